package main

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Azure OpenAI's accounting, as "Manage Azure OpenAI quota"
// (https://learn.microsoft.com/azure/ai-foundry/openai/how-to/quota) describes it. Its requests
// come on /openai/deployments/{deployment}/{operation}?api-version=..., and the deployment, not
// the body, names the model: the mock's deployments are named after their models, so the
// deployment's name is the model the mock counts with.

// azureDeployment reads an Azure OpenAI deployment path: its deployment and the API it calls
// ("" and "" when the path is not one).
func azureDeployment(path string) (deployment, api string) {
	rest, ok := strings.CutPrefix(path, "/openai/deployments/")
	if !ok {
		return "", ""
	}
	d, op, ok := strings.Cut(rest, "/")
	if !ok || d == "" {
		return "", ""
	}
	switch op {
	case "chat/completions":
		return d, "chat_completions"
	case "completions":
		return d, "completions"
	case "embeddings":
		return d, "embeddings"
	}
	return "", ""
}

// AzureCost is what a request takes from Azure's TPM: "the maximum number of tokens that are
// estimated to be processed by a request at the time the request is received", computed from
// "Prompt text and count; The max_tokens parameter setting; The best_of parameter setting"
// (https://learn.microsoft.com/azure/ai-foundry/openai/how-to/quota). That is the prompt plus
// max_tokens for each of the max(best_of, n) completions generated. A request without max_tokens
// reserves the model's context size: "the maximum possible value of the model context size will
// be inferred for the request's quota reservation"
// (https://learn.microsoft.com/en-us/answers/questions/1381398); the configured default output
// stands for it when the mock does not know the model.
func AzureCost(p *Price) int64 {
	if p.API == "embeddings" {
		return p.Prompt
	}
	per := p.Output / int64(max(p.N, 1)) // one choice's maximum (of every prompt, for completions)
	if c := contextWindow(p.Model); p.OutputUnset && c > 0 {
		per = c
	}
	return p.Prompt + per*int64(max(p.BestOf, p.N, 1))
}

// AzureLimits are one deployment's limits (0: unlimited). TPM is a running count "reset each
// minute". RPM: "Azure OpenAI evaluates the rate of incoming requests over a small period of
// time, typically 1 or 10 seconds. If the number of requests received during that time exceeds
// what would be expected at the set RPM limit, then new requests will receive a 429 response code
// until the next evaluation period. For example, if Azure OpenAI is monitoring request rate on
// 1-second intervals, then rate limiting will occur for a 600-RPM deployment if more than 10
// requests are received during each 1-second period"
// (https://learn.microsoft.com/azure/ai-foundry/openai/how-to/quota). So RPMWindow, when set
// (1 s or 10 s), admits RPM x RPMWindow / 1 minute requests in each window of the clock; when
// zero, RPM is counted per minute of the clock.
type AzureLimits struct {
	TPM, RPM  int64
	RPMWindow time.Duration
}

// Azure keeps Azure OpenAI's counters, one set per deployment, as Azure keeps its limits per
// deployment. It is safe for concurrent use.
type Azure struct {
	limits AzureLimits
	mu     sync.Mutex
	counts map[string]*azureCount
}

// azureCount is one deployment's counters: tokens per minute and requests per RPM window, by the
// window's index on the clock. Requests are timed when they arrive but admitted once their body
// is read and priced, so a request of a window that has ended may be admitted after one of the
// next: each window keeps its own count, and only windows well in the past are forgotten.
type azureCount struct {
	tokens   map[int64]int64 // by minute
	requests map[int64]int64 // by RPM window
}

// add adds n to counts[i], forgetting the windows more than keep before i.
func add(counts map[int64]int64, i, n, keep int64) {
	counts[i] += n
	for k := range counts {
		if k < i-keep {
			delete(counts, k)
		}
	}
}

// NewAzure returns Azure's counters for limits.
func NewAzure(limits AzureLimits) *Azure {
	return &Azure{limits: limits, counts: map[string]*azureCount{}}
}

// requestWindow is the RPM's window and how many requests each admits.
func (l AzureLimits) requestWindow() (time.Duration, int64) {
	if l.RPMWindow <= 0 {
		return time.Minute, l.RPM
	}
	return l.RPMWindow, max(l.RPM*int64(l.RPMWindow)/int64(time.Minute), 1)
}

// AzureVerdict is the outcome of one Azure admission.
type AzureVerdict struct {
	Admitted bool
	// TooLarge is true when the request's estimate is above the TPM: it can never fit.
	TooLarge bool
	// Which refused: "tokens" or "requests" ("" when admitted).
	Which string
	// Wait is until the counter that refused starts again (0 when admitted or too large).
	Wait time.Duration
	// Tokens and Requests are the counters after the decision, for the rate-limit headers:
	// Requests is the RPM window's (its share of the RPM as its limit).
	Tokens, Requests       meterState
	HasTokens, HasRequests bool
}

// AdmitAt counts a request of cost tokens on deployment at now: refused by RPM first (a request
// over the window's share is refused whatever its size), then by TPM.
func (a *Azure) AdmitAt(deployment string, cost int64, now time.Time) AzureVerdict {
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.counts[deployment]
	if c == nil {
		c = &azureCount{tokens: map[int64]int64{}, requests: map[int64]int64{}}
		a.counts[deployment] = c
	}
	mi := now.UnixNano() / int64(time.Minute)
	minute := time.Unix(0, mi*int64(time.Minute))
	win, winLimit := a.limits.requestWindow()
	wi := now.UnixNano() / int64(win)
	start := time.Unix(0, wi*int64(win))
	var v AzureVerdict
	switch {
	case a.limits.TPM > 0 && cost > a.limits.TPM:
		v.TooLarge, v.Which = true, "tokens"
	case a.limits.RPM > 0 && c.requests[wi] >= winLimit:
		v.Which, v.Wait = "requests", start.Add(win).Sub(now)
	case a.limits.TPM > 0 && c.tokens[mi]+cost > a.limits.TPM:
		v.Which, v.Wait = "tokens", minute.Add(time.Minute).Sub(now)
	default:
		v.Admitted = true
		add(c.tokens, mi, cost, 2)
		add(c.requests, wi, 1, int64(10*time.Second/win))
	}
	if a.limits.TPM > 0 {
		v.HasTokens = true
		v.Tokens = meterState{Limit: a.limits.TPM, Remaining: a.limits.TPM - c.tokens[mi], Reset: minute.Add(time.Minute).Sub(now)}
	}
	if a.limits.RPM > 0 {
		v.HasRequests = true
		v.Requests = meterState{Limit: winLimit, Remaining: winLimit - c.requests[wi], Reset: start.Add(win).Sub(now)}
	}
	return v
}

// azureHeaders sets Azure OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the
// resets in whole seconds (https://learn.microsoft.com/azure/ai-foundry/openai/how-to/quota).
func azureHeaders(h http.Header, v *AzureVerdict) {
	set := func(kind string, m meterState) {
		h.Set("x-ratelimit-limit-"+kind, strconv.FormatInt(m.Limit, 10))
		h.Set("x-ratelimit-remaining-"+kind, strconv.FormatInt(max(m.Remaining, 0), 10))
		h.Set("x-ratelimit-reset-"+kind, strconv.FormatInt(int64(math.Ceil(m.Reset.Seconds())), 10))
	}
	if v.HasTokens {
		set("tokens", v.Tokens)
	}
	if v.HasRequests {
		set("requests", v.Requests)
	}
}

// azureOperation is the operation an Azure error message names.
func azureOperation(api string) string {
	switch api {
	case "completions":
		return "Completions_Create"
	case "embeddings":
		return "Embeddings_Create"
	}
	return "ChatCompletions_Create"
}

// azureLimited writes Azure OpenAI's 429: its error body ({"error":{"code":"429",...}}), with
// retry-after-ms and retry-after (seconds) until the refusing counter starts again
// (https://learn.microsoft.com/azure/ai-foundry/openai/how-to/quota). A request that can never
// fit gets no retry-after: waiting would not help.
func azureLimited(w http.ResponseWriter, p *Price, cost int64, v *AzureVerdict) {
	op := azureOperation(p.API)
	if v.TooLarge {
		writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{"code": "429",
			"message": "Requests to the " + op + " Operation under Azure OpenAI API have exceeded token rate limit of your current pricing tier: this request (" +
				strconv.FormatInt(cost, 10) + " tokens) is above the deployment's " + strconv.FormatInt(v.Tokens.Limit, 10) + " tokens per minute."}})
		return
	}
	ms := max(v.Wait.Milliseconds(), 1)
	w.Header().Set("retry-after-ms", strconv.FormatInt(ms, 10))
	w.Header().Set("retry-after", strconv.FormatInt((ms+999)/1000, 10))
	what := "token rate limit"
	if v.Which == "requests" {
		what = "call rate limit"
	}
	writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{"code": "429",
		"message": "Requests to the " + op + " Operation under Azure OpenAI API have exceeded " + what +
			" of your current pricing tier. Please retry after " + strconv.FormatInt((ms+999)/1000, 10) + " second(s)."}})
}
