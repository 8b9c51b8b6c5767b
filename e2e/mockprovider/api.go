package main

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// maxBody bounds a request body, far above any real provider's limit.
const maxBody = 64 << 20

// usageHeader, on a request, makes the answer report that many tokens of usage in total (the
// prompt's count raised to make it up): an upstream that reports more than it used, for the
// tests of the limiter's bound on reported usage.
const usageHeader = "x-mock-usage-tokens"

// Server is the mock provider's HTTP handler. It is safe for concurrent use.
type Server struct {
	Pricer   *Pricer
	Enforcer *Enforcer
	Recorder *Recorder
	// Latency is how long an admitted answer takes (spread over the events of a stream).
	Latency time.Duration
	// KeyLatency overrides Latency for the requests of some API keys (a slow generation).
	KeyLatency map[string]time.Duration
	// KeyEnforcers are the budgets of API keys that belong to an organisation of their own: a
	// request with such a key is admitted, refused (429 with retry-after) and reported (the
	// rate-limit headers) against its key's budget, never the shared one, as a provider keeps
	// the limits of each organisation apart.
	KeyEnforcers map[string]*Enforcer
	// CompletionTokens is the most output tokens an answer generates (within the request's max).
	CompletionTokens int64
	// EmbeddingDims is the default length of an embedding vector.
	EmbeddingDims int
	// ChargeActual makes the limiter charge what an answer really uses (the prompt plus the
	// tokens generated) instead of the prompt plus the reserved output: a provider that bills
	// actual usage, against which reconciliation is measured.
	ChargeActual bool
	// ErrorLatency is how long a request the API refuses as invalid (a 400) takes to be answered:
	// a provider's round trip, not the loopback's.
	ErrorLatency time.Duration
	// Compress compresses replies in a coding the client accepts, as the providers' APIs do.
	Compress bool
	// DoneLinger holds a chat completion stream open this long after its data: [DONE] event,
	// as a reply whose end (its last chunk, a compressed stream's trailer) comes after its end
	// marker: a client that stops reading at [DONE], as the OpenAI SDKs do, closes the
	// connection before the reply ends.
	DoneLinger time.Duration
	// CountChars counts OpenAI requests by the rate-limits guide's character rule instead of
	// prompt plus max_tokens.
	CountChars bool
	// Anthropic, when set, admits Messages requests by Anthropic's own accounting (anthropic.go)
	// instead of Enforcer's single token budget.
	Anthropic *Anthropic
	// Azure admits the requests on Azure OpenAI's deployment paths by Azure's own accounting
	// (azure.go); nil: they are unlimited.
	Azure *Azure
	// Bedrock is the Amazon Bedrock runtime's accounting (bedrock.go), for requests to its hosts.
	Bedrock *Bedrock
	// Gemini is the Gemini API's and Vertex AI's accounting (gemini.go), for requests to their
	// hosts.
	Gemini *Gemini
	// Ledger is the bill of every answered request, in money (ledger.go).
	Ledger *Ledger
	Now    func() time.Time

	seq atomic.Int64
	// stored holds each Responses answer's context (its input and output tokens) by id: a
	// request that continues it with previous_response_id is billed for those turns as input.
	stored sync.Map
}

// contextWindow is the most input tokens a model accepts (the providers' model pages; Azure's
// gpt-35-turbo: https://learn.microsoft.com/azure/ai-foundry/openai/concepts/models); 0 when the
// mock does not know the model. Above it, the providers answer 400.
func contextWindow(model string) int64 {
	switch {
	case strings.HasPrefix(model, "gpt-35-turbo"):
		return 16_385
	case strings.HasPrefix(model, "gpt-4o"):
		return 128_000
	case strings.HasPrefix(model, "gpt-4.1"):
		return 1_047_576
	case strings.HasPrefix(model, "claude-haiku-4-5"), strings.HasPrefix(model, "claude-3"):
		return 200_000
	case strings.HasPrefix(model, "claude-"):
		return 1_000_000
	}
	return 0
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/healthz":
		w.Header().Set("content-type", "text/plain")
		io.WriteString(w, "ok\n") //nolint:errcheck // the client may have gone
	case r.URL.Path == "/stats" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.Recorder.Stats())
	case r.URL.Path == "/ledger" && r.Method == http.MethodGet && s.Ledger != nil:
		s.Ledger.serve(w)
	case r.URL.Path == "/control/anthropic-factor" && r.Method == http.MethodPost:
		s.setAnthropicFactor(w, r)
	case strings.HasPrefix(r.URL.Path, "/price/") && r.Method == http.MethodPost:
		s.price(w, r)
	case r.URL.Path == "/v1/models" && r.Method == http.MethodGet:
		s.models(s.compressed(w, r), r)
	case r.Method == http.MethodPost && bedrockHost(r.Host) && s.Bedrock != nil:
		s.bedrock(w, r)
	case r.URL.Path == "/gemini/clock" && s.Gemini != nil:
		s.geminiClock(w, r)
	case r.Method == http.MethodPost && geminiHost(r.Host) && s.Gemini != nil:
		if model, stream, ok := vertexClaudeCall(r.URL.EscapedPath()); ok && !strings.HasPrefix(strings.ToLower(r.Host), "generativelanguage.") {
			s.vertexClaude(w, r, model, stream)
			return
		}
		if geminiCompatPath(r.URL.Path) && strings.HasPrefix(strings.ToLower(r.Host), "generativelanguage.") {
			s.geminiCompat(w, r)
			return
		}
		model, method, ok := geminiCall(r.URL.EscapedPath())
		if !ok {
			geminiError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
			return
		}
		s.gemini(w, r, model, method)
	case r.Method == http.MethodPost:
		if _, api := APIOnHost(r.Host, r.URL.Path); api != "" {
			cw := s.compressed(w, r)
			defer cw.close()
			s.priced(cw.ResponseWriter, r)
			return
		}
		fallthrough
	default:
		s.errorAnswer(w, isAnthropic(r), http.StatusNotFound, "not_found_error", "invalid_request_error",
			fmt.Sprintf("Unknown request URL: %s %s.", r.Method, r.URL.Path))
	}
}

// setAnthropicFactor changes the Anthropic tokenizer's ratio to cl100k_base mid-run (the body:
// a number between 0.1 and 10): the provider's own counts change, as when a model's tokenizer
// does, and a limiter that learned the old ratio must learn the new one.
func (s *Server) setAnthropicFactor(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(io.LimitReader(r.Body, 64))
	f, perr := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil || perr != nil || !(f >= 0.1 && f <= 10) {
		http.Error(w, "want a factor between 0.1 and 10", http.StatusBadRequest)
		return
	}
	s.Pricer.SetAnthropicFactor(f)
	writeJSON(w, http.StatusOK, map[string]float64{"anthropic_factor": f})
}

// replyWriter is the writer of one API reply: compressed when negotiated.
type replyWriter struct {
	http.ResponseWriter
	close func()
}

// compressed returns w, compressing in the coding the request accepts when s.Compress is set.
func (s *Server) compressed(w http.ResponseWriter, r *http.Request) replyWriter {
	if !s.Compress {
		return replyWriter{w, func() {}}
	}
	coding := negotiate(r.Header.Get("accept-encoding"))
	if coding == "" {
		return replyWriter{w, func() {}}
	}
	cw := newCompressWriter(w, coding)
	return replyWriter{cw, cw.Close}
}

// isAnthropic tells the Anthropic API's requests apart on shared paths (/v1/models).
func isAnthropic(r *http.Request) bool {
	return r.URL.Path == "/v1/messages" || r.Header.Get("anthropic-version") != "" ||
		strings.Contains(r.Host, "anthropic")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("content-type", "application/json")
	w.Header().Set("content-length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b) //nolint:errcheck // the client may have gone
}

// errorAnswer writes an error in the provider's own format.
func (s *Server) errorAnswer(w http.ResponseWriter, anthropic bool, status int, anthropicType, openaiType, msg string) {
	if anthropic {
		writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": anthropicType, "message": msg}})
		return
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": openaiType, "param": nil, "code": nil}})
}

func (s *Server) models(rw replyWriter, r *http.Request) {
	defer rw.close()
	w := rw.ResponseWriter
	if isAnthropic(r) {
		writeJSON(w, http.StatusOK, map[string]any{
			"data":     []any{map[string]any{"type": "model", "id": "claude-sonnet-4-6", "display_name": "Claude Sonnet 4.6", "created_at": "2025-09-29T00:00:00Z"}},
			"has_more": false, "first_id": "claude-sonnet-4-6", "last_id": "claude-sonnet-4-6",
		})
		return
	}
	var data []any
	for _, m := range []string{"gpt-4o-mini", "gpt-4o", "text-embedding-3-small"} {
		data = append(data, map[string]any{"id": m, "object": "model", "created": 1715367049, "owned_by": "system"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// price answers what the request under /price would cost, without admitting or recording it:
// the suite uses it to turn the clients' call counts into offered tokens.
func (s *Server) price(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/price")
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var p *Price
	if err == nil {
		p, err = s.Pricer.Price(path, body)
	}
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
		return
	}
	cost := p.Cost()
	if p.Provider == "azure" {
		cost = AzureCost(p)
	}
	writeJSON(w, http.StatusOK, map[string]any{"provider": p.Provider, "api": p.API, "model": p.Model,
		"prompt": p.Prompt, "output": p.Output, "cost": cost})
}

func apiKey(r *http.Request) string {
	if k := r.Header.Get("x-api-key"); k != "" {
		return k
	}
	return strings.TrimPrefix(r.Header.Get("authorization"), "Bearer ")
}

func (s *Server) priced(w http.ResponseWriter, r *http.Request) {
	arrived := s.Now()
	provider, api := APIOnHost(r.Host, r.URL.Path)
	// Anthropic's OpenAI-compatible endpoint answers errors in OpenAI's format, for the OpenAI SDK.
	anthropic := provider == "anthropic" && api == "messages"
	rec := &Record{Provider: provider, API: api, Key: apiKey(r), RequestID: r.Header.Get("x-request-id"),
		FailureModeAllowed: r.Header.Get("x-envoy-auth-failure-mode-allowed")}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err == nil && len(body) > maxBody {
		err = fmt.Errorf("body over %d bytes", maxBody)
	}
	var p *Price
	if err == nil {
		p, err = s.Pricer.PriceOn(r.Host, r.URL.Path, body)
	}
	if err == nil && p.PreviousResponseID != "" {
		// The earlier turns are input of this one (OpenAI bills them as input tokens).
		if v, ok := s.stored.Load(p.PreviousResponseID); ok {
			p.Prompt += v.(int64)
		} else {
			err = fmt.Errorf("Previous response with id '%s' not found.", p.PreviousResponseID) //nolint:staticcheck // OpenAI's message, verbatim
		}
	}
	if err == nil {
		if ctx := contextWindow(p.Model); ctx > 0 && p.Prompt > ctx {
			err = fmt.Errorf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens.", ctx, p.Prompt) //nolint:staticcheck // OpenAI's message, verbatim
			rec.Prompt = p.Prompt
		}
	}
	now := arrived
	rec.T = unix(now)
	if err != nil {
		rec.Status, rec.End = http.StatusBadRequest, rec.T
		s.Recorder.Add(rec)
		pause(r, s.ErrorLatency)
		s.errorAnswer(w, anthropic, http.StatusBadRequest, "invalid_request_error", "invalid_request_error", err.Error())
		return
	}
	cost := p.Cost()
	if provider == "azure" {
		cost = AzureCost(p)
	}
	if s.CountChars && provider == "openai" {
		// "Your rate limit is calculated as the maximum of max_tokens and the estimated number of
		// tokens based on the character count of your request"
		// (https://platform.openai.com/docs/guides/rate-limits; the cookbook's "How to handle
		// rate limits"): about four characters a token, OpenAI's own rule of thumb.
		cost = max(p.Output, (int64(utf8.RuneCount(body))+3)/4)
	}
	if s.ChargeActual && p.Output > 0 && provider != "azure" {
		cost = p.Prompt + s.completion(p)*int64(max(p.N, 1))
	}
	rec.Model, rec.Prompt, rec.Output, rec.Cost, rec.Stream = p.Model, p.Prompt, p.Output, cost, p.Stream

	if anthropic && s.Anthropic != nil {
		s.anthropicPriced(w, r, p, rec, now)
		return
	}
	if provider == "azure" {
		if !s.azureAdmit(w, p, rec, now) {
			return
		}
	} else {
		enf := s.Enforcer
		if e, ok := s.KeyEnforcers[rec.Key]; ok {
			enf = e
		}
		v := enf.AdmitAt(provider, p.Model, cost, now)
		s.rateLimitHeaders(w.Header(), anthropic, &v, now)
		if !v.Admitted {
			rec.Status, rec.End, rec.TooLarge, rec.Which, rec.WaitMS = http.StatusTooManyRequests, rec.T, v.TooLarge, v.Which, v.Wait.Milliseconds()
			s.Recorder.Add(rec)
			s.rateLimited(w, anthropic, p, &v)
			return
		}
	}
	rec.InFlight = s.Recorder.Start()
	rec.Status = http.StatusOK
	var out int64
	if api != "embeddings" {
		out = s.completion(p) * int64(max(p.N, 1))
	}
	if n, err := strconv.ParseInt(r.Header.Get(usageHeader), 10, 64); err == nil && n > out {
		// The test asks for an upstream that reports this usage whatever it used: the answer
		// carries it, the limits are charged what was really used.
		q := *p
		q.Prompt = n - out
		p = &q
	}
	rec.Usage = p.Prompt + out
	defer func() {
		rec.End = unix(s.Now())
		if s.Ledger != nil {
			rec.Micros = s.Ledger.Charge(rec.Key, p.Model, p.Prompt, 0, 0, out)
		}
		s.Recorder.Add(rec)
	}()
	id := s.seq.Add(1)
	switch api {
	case "chat_completions", "completions":
		s.chat(w, r, p, id)
	case "responses":
		s.responses(w, r, p, id)
	case "embeddings":
		s.embeddings(w, r, p)
	case "messages":
		s.messages(w, r, p, id)
	}
}

// azureAdmit decides rec's request at now by Azure OpenAI's accounting and sets Azure's
// rate-limit headers; on a refusal it records the request, answers Azure's 429 and returns false.
func (s *Server) azureAdmit(w http.ResponseWriter, p *Price, rec *Record, now time.Time) bool {
	if s.Azure == nil {
		return true
	}
	v := s.Azure.AdmitAt(p.Model, rec.Cost, now)
	azureHeaders(w.Header(), &v)
	if v.Admitted {
		return true
	}
	rec.Status, rec.End, rec.TooLarge, rec.Which, rec.WaitMS = http.StatusTooManyRequests, rec.T, v.TooLarge, v.Which, v.Wait.Milliseconds()
	s.Recorder.Add(rec)
	azureLimited(w, p, rec.Cost, &v)
	return false
}

// latencyOf is how long the answer to r takes.
func (s *Server) latencyOf(r *http.Request) time.Duration {
	if d, ok := s.KeyLatency[apiKey(r)]; ok {
		return d
	}
	return s.Latency
}

// rateLimitHeaders sets the provider's own rate-limit headers.
func (s *Server) rateLimitHeaders(h http.Header, anthropic bool, v *Verdict, now time.Time) {
	set := func(kind string, m meterState) {
		if anthropic {
			h.Set("anthropic-ratelimit-"+kind+"-limit", strconv.FormatInt(m.Limit, 10))
			h.Set("anthropic-ratelimit-"+kind+"-remaining", strconv.FormatInt(max(m.Remaining, 0), 10))
			h.Set("anthropic-ratelimit-"+kind+"-reset", now.Add(m.Reset).UTC().Format(time.RFC3339))
			return
		}
		h.Set("x-ratelimit-limit-"+kind, strconv.FormatInt(m.Limit, 10))
		h.Set("x-ratelimit-remaining-"+kind, strconv.FormatInt(max(m.Remaining, 0), 10))
		h.Set("x-ratelimit-reset-"+kind, m.Reset.Round(time.Millisecond).String())
	}
	if v.HasTokens {
		set("tokens", v.Tokens)
	}
	if v.HasRequests {
		set("requests", v.Requests)
	}
}

func (s *Server) rateLimited(w http.ResponseWriter, anthropic bool, p *Price, v *Verdict) {
	limit, used := v.Tokens.Limit, v.Tokens.Limit-v.Tokens.Remaining
	unit, requested := "tokens per min (TPM)", p.Cost()
	if v.Which == "requests" {
		limit, used = v.Requests.Limit, v.Requests.Limit-v.Requests.Remaining
		unit, requested = "requests per min (RPM)", 1
	}
	if v.TooLarge {
		msg := fmt.Sprintf("Request too large for %s in organization org-mock on %s: Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.",
			p.Model, unit, limit, requested)
		s.errorAnswer(w, anthropic, http.StatusTooManyRequests, "rate_limit_error", "tokens", msg)
		return
	}
	secs := int64(math.Ceil(v.Wait.Seconds()))
	w.Header().Set("retry-after", strconv.FormatInt(max(secs, 1), 10))
	if anthropic {
		msg := fmt.Sprintf("This request would exceed the rate limit for your organization (org-mock) of %d %s. Please try again in %s.",
			limit, strings.ToLower(strings.SplitN(unit, " (", 2)[0]), v.Wait.Round(time.Millisecond))
		s.errorAnswer(w, true, http.StatusTooManyRequests, "rate_limit_error", "", msg)
		return
	}
	msg := fmt.Sprintf("Rate limit reached for %s in organization org-mock on %s: Limit %d, Used %d, Requested %d. Please try again in %s.",
		p.Model, unit, limit, used, requested, v.Wait.Round(time.Millisecond))
	writeJSON(w, http.StatusTooManyRequests, map[string]any{"error": map[string]any{
		"message": msg, "type": v.Which, "param": nil, "code": "rate_limit_exceeded"}})
}

// completion is how many tokens an answer generates: the mock's cap within the request's own.
func (s *Server) completion(p *Price) int64 {
	per := p.Output / int64(max(p.N, 1))
	return max(min(per, s.CompletionTokens), 1)
}

func words(n int64) string { return strings.Repeat(" mock", int(n)) }

// pause waits d or until the client goes away; false when it went away.
func pause(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

// sse writes server-sent events with the stream's pacing.
type sse struct {
	w     http.ResponseWriter
	r     *http.Request
	every time.Duration
}

func newSSE(w http.ResponseWriter, r *http.Request, events int, latency time.Duration) *sse {
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("cache-control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, r: r, every: latency / time.Duration(max(events, 1))}
}

// send writes one event (name may be empty) and waits its share of the latency.
func (e *sse) send(name string, data any) bool {
	var b []byte
	switch d := data.(type) {
	case string:
		b = []byte(d)
	default:
		b, _ = json.Marshal(d)
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", b)
	if f, ok := e.w.(http.Flusher); ok {
		f.Flush()
	}
	return pause(e.r, e.every)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, p *Price, id int64) {
	n := s.completion(p)
	created := s.Now().Unix()
	cid := fmt.Sprintf("chatcmpl-mock%d", id)
	finish := "length"
	if n < p.Output/int64(max(p.N, 1)) {
		finish = "stop"
	}
	usage := map[string]any{"prompt_tokens": p.Prompt, "completion_tokens": n * int64(p.N), "total_tokens": p.Prompt + n*int64(p.N)}
	if p.API == "completions" {
		var choices []any
		for i := 0; i < p.N; i++ {
			choices = append(choices, map[string]any{"index": i, "text": words(n), "finish_reason": finish, "logprobs": nil})
		}
		if !pause(r, s.latencyOf(r)) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": cid, "object": "text_completion", "created": created, "model": p.Model, "choices": choices, "usage": usage})
		return
	}
	if !p.Stream {
		var choices []any
		for i := 0; i < p.N; i++ {
			choices = append(choices, map[string]any{"index": i, "finish_reason": finish, "logprobs": nil,
				"message": map[string]any{"role": "assistant", "content": words(n), "refusal": nil}})
		}
		if !pause(r, s.latencyOf(r)) {
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": cid, "object": "chat.completion", "created": created, "model": p.Model,
			"choices": choices, "usage": usage, "system_fingerprint": "fp_mock"})
		return
	}
	chunk := func(choices []any) map[string]any {
		return map[string]any{"id": cid, "object": "chat.completion.chunk", "created": created, "model": p.Model,
			"system_fingerprint": "fp_mock", "choices": choices}
	}
	delta := func(i int, d map[string]any, fin any) map[string]any {
		return map[string]any{"index": i, "delta": d, "finish_reason": fin, "logprobs": nil}
	}
	e := newSSE(w, r, int(n)+2, s.latencyOf(r))
	for i := 0; i < p.N; i++ {
		if !e.send("", chunk([]any{delta(i, map[string]any{"role": "assistant", "content": ""}, nil)})) {
			return
		}
	}
	for k := int64(0); k < n; k++ {
		for i := 0; i < p.N; i++ {
			if !e.send("", chunk([]any{delta(i, map[string]any{"content": " mock"}, nil)})) {
				return
			}
		}
	}
	for i := 0; i < p.N; i++ {
		e.send("", chunk([]any{delta(i, map[string]any{}, finish)}))
	}
	if p.IncludeUsage {
		c := chunk([]any{})
		c["usage"] = usage
		e.send("", c)
	}
	e.every = 0
	if e.send("", "[DONE]") {
		pause(r, s.DoneLinger)
	}
}

func (s *Server) responses(w http.ResponseWriter, r *http.Request, p *Price, id int64) {
	n := s.completion(p)
	rid, mid := fmt.Sprintf("resp_mock%d", id), fmt.Sprintf("msg_mock%d", id)
	created := s.Now().Unix()
	resp := func(status string, out []any, usage any) map[string]any {
		return map[string]any{"id": rid, "object": "response", "created_at": created, "status": status, "model": p.Model,
			"output": out, "usage": usage, "parallel_tool_calls": true, "tool_choice": "auto", "tools": []any{},
			"error": nil, "incomplete_details": nil, "instructions": nil, "metadata": map[string]any{}, "temperature": 1.0, "top_p": 1.0}
	}
	out := []any{map[string]any{"type": "message", "id": mid, "status": "completed", "role": "assistant",
		"content": []any{map[string]any{"type": "output_text", "text": words(n), "annotations": []any{}}}}}
	s.stored.Store(rid, p.Prompt+n)
	usage := map[string]any{"input_tokens": p.Prompt, "output_tokens": n, "total_tokens": p.Prompt + n,
		"input_tokens_details": map[string]any{"cached_tokens": 0}, "output_tokens_details": map[string]any{"reasoning_tokens": 0}}
	if !p.Stream {
		if !pause(r, s.latencyOf(r)) {
			return
		}
		writeJSON(w, http.StatusOK, resp("completed", out, usage))
		return
	}
	e := newSSE(w, r, int(n)+2, s.latencyOf(r))
	seq := 0
	ev := func(typ string, fields map[string]any) bool {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		return e.send(typ, fields)
	}
	if !ev("response.created", map[string]any{"response": resp("in_progress", []any{}, nil)}) {
		return
	}
	for k := int64(0); k < n; k++ {
		if !ev("response.output_text.delta", map[string]any{"item_id": mid, "output_index": 0, "content_index": 0, "delta": " mock"}) {
			return
		}
	}
	e.every = 0
	ev("response.completed", map[string]any{"response": resp("completed", out, usage)})
}

func (s *Server) embeddings(w http.ResponseWriter, r *http.Request, p *Price) {
	dims := s.EmbeddingDims
	var data []any
	for i := 0; i < max(p.Inputs, 1); i++ {
		vec := make([]float32, dims)
		for j := range vec {
			vec[j] = float32(math.Sin(float64(i*dims + j)))
		}
		var emb any = vec
		if p.EncodingFormat == "base64" {
			b := make([]byte, 4*dims)
			for j, f := range vec {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(f))
			}
			emb = base64.StdEncoding.EncodeToString(b)
		}
		data = append(data, map[string]any{"object": "embedding", "index": i, "embedding": emb})
	}
	if !pause(r, s.latencyOf(r)) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": p.Model,
		"usage": map[string]any{"prompt_tokens": p.Prompt, "total_tokens": p.Prompt}})
}

func (s *Server) messages(w http.ResponseWriter, r *http.Request, p *Price, id int64) {
	n := s.completion(p)
	mid := fmt.Sprintf("msg_mock%d", id)
	stop := "max_tokens"
	if n < p.Output {
		stop = "end_turn"
	}
	msg := func(content []any, stopReason any, out int64) map[string]any {
		return map[string]any{"id": mid, "type": "message", "role": "assistant", "model": p.Model, "content": content,
			"stop_reason": stopReason, "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": p.Prompt - p.CacheRead - p.CacheWrite, "output_tokens": out,
				"cache_creation_input_tokens": p.CacheWrite, "cache_read_input_tokens": p.CacheRead}}
	}
	w.Header().Set("request-id", fmt.Sprintf("req_mock%d", id))
	if !p.Stream {
		if !pause(r, s.latencyOf(r)) {
			return
		}
		writeJSON(w, http.StatusOK, msg([]any{map[string]any{"type": "text", "text": words(n)}}, stop, n))
		return
	}
	e := newSSE(w, r, int(n)+3, s.latencyOf(r))
	steps := []struct {
		name string
		data any
	}{
		{"message_start", map[string]any{"type": "message_start", "message": msg([]any{}, nil, 1)}},
		{"content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}},
		{"ping", map[string]any{"type": "ping"}},
	}
	for _, st := range steps {
		if !e.send(st.name, st.data) {
			return
		}
	}
	for k := int64(0); k < n; k++ {
		if !e.send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": " mock"}}) {
			return
		}
	}
	e.every = 0
	e.send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	e.send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": n}})
	e.send("message_stop", map[string]any{"type": "message_stop"})
}

// anthropicPriced admits, answers and settles a Messages request by Anthropic's accounting.
func (s *Server) anthropicPriced(w http.ResponseWriter, r *http.Request, p *Price, rec *Record, now time.Time) {
	v := s.Anthropic.Admit(p, now)
	v.headers(w.Header(), now)
	c := v.Charge
	rec.Input, rec.CacheWrite, rec.CacheRead, rec.ITPM, rec.OTPM = c.Input, c.CacheWrite, c.CacheRead, c.ITPM, c.OTPM
	rec.Cost = c.ITPM + c.OTPM
	if !v.Admitted {
		rec.Status, rec.End, rec.TooLarge, rec.Which, rec.WaitMS = http.StatusTooManyRequests, rec.T, v.TooLarge, v.Which, v.Wait.Milliseconds()
		s.Recorder.Add(rec)
		if v.Which == "spend_cap" {
			s.errorAnswer(w, true, http.StatusTooManyRequests, "rate_limit_error", "",
				"This request would exceed your account's monthly spend limit. Please try again later.")
			return
		}
		words := map[string]string{"requests": "requests per minute", "input_tokens": "input tokens per minute", "output_tokens": "output tokens per minute"}[v.Which]
		if v.TooLarge {
			s.errorAnswer(w, true, http.StatusTooManyRequests, "rate_limit_error", "", "This request would exceed your organization's rate limit of "+words+" and can never fit.")
			return
		}
		w.Header().Set("retry-after", strconv.FormatInt(max(int64(math.Ceil(v.Wait.Seconds())), 1), 10))
		s.errorAnswer(w, true, http.StatusTooManyRequests, "rate_limit_error", "",
			fmt.Sprintf("This request would exceed the rate limit for your organization (org-mock) of %s. Please try again in %s.", words, v.Wait.Round(time.Millisecond)))
		return
	}
	rec.InFlight = s.Recorder.Start()
	rec.Status = http.StatusOK
	out := s.completion(p)
	q := *p
	q.CacheRead, q.CacheWrite = c.CacheRead, c.CacheWrite
	rec.Usage = p.Prompt + out
	rec.OTPM = out // what OTPM keeps once adjusted
	defer func() {
		end := s.Now()
		s.Anthropic.Settle(p.Model, p.Output, out, end)
		rec.End = unix(end)
		if s.Ledger != nil {
			rec.Micros = s.Ledger.Charge(rec.Key, p.Model, p.Prompt, c.CacheRead, c.CacheWrite, out)
		}
		s.Recorder.Add(rec)
	}()
	s.messages(w, r, &q, s.seq.Add(1))
}
