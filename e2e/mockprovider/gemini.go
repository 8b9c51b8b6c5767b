package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Gemini is the mock's Gemini API (generativelanguage.googleapis.com) and Vertex AI
// ({region}-aiplatform.googleapis.com, aiplatform.googleapis.com), with the accounting Google
// documents and the mock's own counting (never the limiter's):
//
//   - POST /{version}/models/{model}:generateContent answers one GenerateContentResponse;
//     :streamGenerateContent answers it in chunks, as server-sent events with ?alt=sse
//     ("data: {...}" events) and otherwise as one JSON array of chunks
//     (https://ai.google.dev/api/generate-content). Vertex AI's
//     /{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:generateContent and
//     :streamGenerateContent are served alike
//     (https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/inference).
//   - Limits per model: "Requests per minute (RPM)", "Tokens per minute (input) (TPM)" and
//     "Requests per day (RPD)"; "exceeding any of them will trigger a rate limit error"
//     (https://ai.google.dev/gemini-api/docs/rate-limits). TPM counts the input only, never the
//     output, and is debited at admission: nothing is adjusted at the end. Google documents no
//     algorithm for the minute limits; they are token buckets here (capacity the limit,
//     refilled continuously), like the mock's other providers.
//   - "Requests per day (RPD) quotas reset at midnight Pacific time" (same page): the day is
//     the calendar date in America/Los_Angeles, daylight saving included, of the quota clock.
//     The quota clock is the mock's clock moved by an offset (-gemini-clock, or POST
//     /gemini/clock {"now": RFC 3339}), so that a test can stand seconds before Pacific
//     midnight. Only admitted requests count towards RPD.
//   - usageMetadata: promptTokenCount, candidatesTokenCount, totalTokenCount, and
//     cachedContentTokenCount, "the number of tokens in the cached part of the prompt"; "when
//     cachedContent is set, [promptTokenCount] is still the total effective prompt size meaning
//     this includes the number of tokens in the cached content"
//     (https://ai.google.dev/api/generate-content#UsageMetadata). A request naming
//     cachedContent brings CachedTokens of input the body does not hold; TPM counts them (no
//     document says cached input is free of the limit).
//   - Over a limit: 429 with a google.rpc.Status body, status RESOURCE_EXHAUSTED, a
//     QuotaFailure naming the quota (quotaMetric, quotaId, quotaDimensions) and a RetryInfo
//     {"retryDelay": "17s"}, "Please retry in Xs." in the message (the Gemini API's own 429s,
//     google-gemini/gemini-cli#8437 and continuedev/continue#9745; the status mapping of
//     https://cloud.google.com/apis/design/errors); no rate-limit headers, none being
//     documented. Vertex AI answers its own 429, without details (below).
//
// Gemini's tokenizer is not public. The mock counts as its other providers without a public
// tokenizer do (Anthropic, Bedrock: cl100k_base times a factor, price.go): cl100k_base tokens
// of every text part, of the system instruction and of the tools as JSON, plus 3 per content
// turn, times Factor (1 by default: Google's "a token is equivalent to about 4 characters",
// https://ai.google.dev/gemini-api/docs/tokens, is cl100k_base's own ratio on English). It is a
// stand-in for the provider's count, not the limiter's estimate, which must stay above it.
// Gemini is the Gemini API's limits and counting. It is safe for concurrent use.
type Gemini struct {
	TPM, RPM, RPD int64 // per model; 0: unlimited. TPM counts input tokens only.
	Period        time.Duration
	Factor        float64        // provider tokens per cl100k_base token; 0 is 1
	CachedTokens  int64          // the input a request's cachedContent brings
	Zone          *time.Location // RPD's day: America/Los_Angeles

	mu     sync.Mutex
	offset time.Duration // the quota clock: the mock's clock plus offset
	models map[string]*geminiMeters
}

type geminiMeters struct {
	itpm, rpm *bucket
	day       string // the Pacific date of used
	used      int64
}

// geminiVerdict is an admission's outcome: ok, or the quota that refused and the wait.
type geminiVerdict struct {
	ok    bool
	which string // rpd, rpm or tpm
	wait  time.Duration
	never bool // the request can never fit the limit
}

// geminiQuotas name each limit as the Gemini API's QuotaFailure does: quotaMetric and quotaId
// (the free tier's names, as recorded in google-gemini/gemini-cli#8437).
var geminiQuotas = map[string][2]string{
	"tpm": {"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count", "GenerateContentInputTokensPerModelPerMinute-FreeTier"},
	"rpm": {"generativelanguage.googleapis.com/generate_content_free_tier_requests", "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"},
	"rpd": {"generativelanguage.googleapis.com/generate_content_free_tier_requests", "GenerateRequestsPerDayPerProjectPerModel-FreeTier"},
}

// geminiHost reports whether host (with or without a port) is the Gemini API's or Vertex AI's.
func geminiHost(host string) bool {
	h, _, _ := strings.Cut(strings.ToLower(host), ":")
	if h == "generativelanguage.googleapis.com" || h == "aiplatform.googleapis.com" {
		return true
	}
	region, ok := strings.CutSuffix(h, "-aiplatform.googleapis.com")
	return ok && region != "" && !strings.Contains(region, ".")
}

func (g *Gemini) zone() *time.Location {
	if g.Zone == nil {
		return time.UTC
	}
	return g.Zone
}

// SetClock moves the quota clock so that it reads at at the mock's time now.
func (g *Gemini) SetClock(at, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offset = at.Sub(now)
}

// Clock is the quota clock at the mock's time now.
func (g *Gemini) Clock(now time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return now.Add(g.offset)
}

// Admit counts a request of input tokens to model (the limits' key: one set per model) at the
// mock's time now, or refuses it.
func (g *Gemini) Admit(model string, input int64, now time.Time) geminiVerdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.models == nil {
		g.models = map[string]*geminiMeters{}
	}
	m := g.models[model]
	if m == nil {
		m = &geminiMeters{}
		if g.TPM > 0 {
			m.itpm = newBucket(g.TPM, g.Period, now)
		}
		if g.RPM > 0 {
			m.rpm = newBucket(g.RPM, g.Period, now)
		}
		g.models[model] = m
	}
	local := now.Add(g.offset).In(g.zone())
	if day := local.Format(time.DateOnly); day != m.day {
		m.day, m.used = day, 0
	}
	if g.RPD > 0 && m.used >= g.RPD {
		y, mo, d := local.Date()
		midnight := time.Date(y, mo, d+1, 0, 0, 0, 0, g.zone())
		return geminiVerdict{which: "rpd", wait: midnight.Sub(local)}
	}
	if m.rpm != nil {
		if w, _ := m.rpm.wait(now, 1); w > 0 {
			return geminiVerdict{which: "rpm", wait: w}
		}
	}
	if m.itpm != nil {
		w, ok := m.itpm.wait(now, input)
		if !ok {
			return geminiVerdict{which: "tpm", never: true}
		}
		if w > 0 {
			return geminiVerdict{which: "tpm", wait: w}
		}
		m.itpm.debit(now, input)
	}
	if m.rpm != nil {
		m.rpm.debit(now, 1)
	}
	m.used++
	return geminiVerdict{ok: true}
}

// geminiRequest is what the mock reads of a GenerateContentRequest.
type geminiRequest struct {
	Contents          []geminiContent `json:"contents"`
	SystemInstruction *geminiContent  `json:"systemInstruction"`
	Tools             json.RawMessage `json:"tools"`
	CachedContent     string          `json:"cachedContent"`
	GenerationConfig  struct {
		MaxOutputTokens *int64 `json:"maxOutputTokens"`
	} `json:"generationConfig"`
}

type geminiContent struct {
	Role  string `json:"role"`
	Parts []struct {
		Text string `json:"text"`
	} `json:"parts"`
}

// geminiCall splits /.../models/{model}:{method}; ok is false for any other path.
func geminiCall(p string) (model, method string, ok bool) {
	i := strings.LastIndex(p, "/models/")
	if i < 0 {
		return "", "", false
	}
	model, method, ok = strings.Cut(p[i+len("/models/"):], ":")
	if !ok || model == "" || strings.Contains(model, "/") {
		return "", "", false
	}
	if m, err := url.PathUnescape(model); err == nil {
		model = m
	}
	return model, method, method == "generateContent" || method == "streamGenerateContent"
}

// geminiError writes a google.rpc.Status error body.
func geminiError(w http.ResponseWriter, code int, status, msg string, details ...any) {
	e := map[string]any{"code": code, "message": msg, "status": status}
	if len(details) > 0 {
		e["details"] = details
	}
	writeJSON(w, code, map[string]any{"error": e})
}

// gemini serves one generateContent or streamGenerateContent request to model.
func (s *Server) gemini(w http.ResponseWriter, r *http.Request, model, method string) {
	now := s.Now()
	g := s.Gemini
	stream := method == "streamGenerateContent"
	sse := r.URL.Query().Get("alt") == "sse"
	api := "generate_content"
	if stream {
		api = "stream_generate_content"
	}
	provider := "vertex"
	if h, _, _ := strings.Cut(strings.ToLower(r.Host), ":"); h == "generativelanguage.googleapis.com" {
		provider = "gemini"
	}
	key := r.Header.Get("x-goog-api-key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	rec := &Record{T: unix(now), Provider: provider, API: api, Model: model, Stream: stream, Key: key,
		RequestID: r.Header.Get("x-request-id"), FailureModeAllowed: r.Header.Get("x-envoy-auth-failure-mode-allowed")}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	var req geminiRequest
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	var in, cached int64
	if err == nil {
		in, cached, err = g.prompt(s.Pricer, &req)
	}
	if err != nil {
		rec.Status, rec.End = http.StatusBadRequest, unix(s.Now())
		s.Recorder.Add(rec)
		pause(r, s.ErrorLatency)
		geminiError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid GenerateContentRequest: "+err.Error())
		return
	}
	rec.Prompt, rec.Cost, rec.Input, rec.CacheRead = in, in, in, cached
	v := g.Admit(provider+"/"+model, in, now) // the Gemini API and Vertex AI keep apart limits
	if !v.ok {
		rec.Status, rec.Which, rec.TooLarge, rec.WaitMS, rec.End = http.StatusTooManyRequests, v.which, v.never, v.wait.Milliseconds(), unix(s.Now())
		s.Recorder.Add(rec)
		if provider == "vertex" {
			// Vertex AI's Gemini models share a dynamic pool: its 429 names no quota and no
			// wait ("Resource exhausted, please try again later",
			// https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429; the body as
			// recorded in google-gemini/gemini-cli#14811).
			geminiError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED",
				"Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.")
			return
		}
		q := geminiQuotas[v.which]
		details := []any{map[string]any{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{map[string]any{
			"quotaMetric": q[0], "quotaId": q[1], "quotaDimensions": map[string]string{"location": "global", "model": model}}}}}
		msg := "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits."
		if !v.never {
			details = append(details, map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retryDelay(v.wait)})
			msg += fmt.Sprintf(" Please retry in %.6fs.", v.wait.Seconds())
		}
		geminiError(w, http.StatusTooManyRequests, "RESOURCE_EXHAUSTED", msg, details...)
		return
	}
	out := s.Pricer.DefaultOutput
	if m := req.GenerationConfig.MaxOutputTokens; m != nil && *m >= 0 {
		out = *m
	}
	rec.Output, rec.Status = out, http.StatusOK
	rec.InFlight = s.Recorder.Start()
	defer func() {
		rec.End = unix(s.Now())
		s.Recorder.Add(rec)
	}()
	n := min(out, s.CompletionTokens)
	rec.Usage = in + n
	id := s.seq.Add(1)
	chunk := func(text string, generated int64, last bool) map[string]any {
		c := map[string]any{"content": map[string]any{"parts": []any{map[string]any{"text": text}}, "role": "model"}, "index": 0}
		if last {
			c["finishReason"] = "STOP"
		}
		usage := map[string]any{"promptTokenCount": in, "candidatesTokenCount": generated, "totalTokenCount": in + generated}
		if cached > 0 {
			usage["cachedContentTokenCount"] = cached
		}
		return map[string]any{"candidates": []any{c}, "usageMetadata": usage, "modelVersion": model, "responseId": fmt.Sprintf("mock-%d", id)}
	}
	if !stream {
		if !pause(r, s.latencyOf(r)) {
			return
		}
		writeJSON(w, http.StatusOK, chunk(words(n), n, true))
		return
	}
	// Three chunks, each with the usage so far.
	parts := []int64{n / 3, n / 3, n - 2*(n/3)}
	every := s.latencyOf(r) / 3
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	if sse {
		w.Header().Set("content-type", "text/event-stream")
	} else {
		w.Header().Set("content-type", "application/json; charset=UTF-8")
	}
	w.WriteHeader(http.StatusOK)
	var generated int64
	for i, k := range parts {
		if !pause(r, every) {
			return
		}
		generated += k
		b, _ := json.Marshal(chunk(words(k), generated, i == len(parts)-1))
		switch {
		case sse:
			fmt.Fprintf(w, "data: %s\r\n\r\n", b)
		case i == 0:
			fmt.Fprintf(w, "[%s", b)
		default:
			fmt.Fprintf(w, "\r\n,%s", b)
		}
		flush()
	}
	if !sse {
		io.WriteString(w, "]") //nolint:errcheck // the client may have gone
		flush()
	}
}

// retryDelay is d as RetryInfo's retryDelay, a google.protobuf.Duration in JSON: whole
// seconds rounded up, as the Gemini API writes it ("17s").
func retryDelay(d time.Duration) string {
	return strconv.FormatInt(int64(math.Ceil(d.Seconds())), 10) + "s"
}

// prompt counts a request's input as the mock's Gemini does: ceil(Factor * (cl100k_base tokens
// of every text of the system instruction and the contents, and of the tools as JSON, plus 3
// per content turn)), plus CachedTokens when it names cachedContent (reported as cached).
func (g *Gemini) prompt(p *Pricer, req *geminiRequest) (input, cached int64, err error) {
	if len(req.Contents) == 0 {
		return 0, 0, fmt.Errorf("contents is not specified")
	}
	enc, err := p.encoding("cl100k_base")
	if err != nil {
		return 0, 0, err
	}
	count := func(t string) int64 {
		if p.MaxCounted > 0 && len(t) > p.MaxCounted {
			return int64(len(t))
		}
		return int64(len(enc.Encode(t, nil, nil)))
	}
	var n int64
	turns := req.Contents
	if req.SystemInstruction != nil {
		turns = append([]geminiContent{*req.SystemInstruction}, turns...)
	}
	for _, c := range turns {
		n += 3
		for _, part := range c.Parts {
			n += count(part.Text)
		}
	}
	if len(req.Tools) > 0 && string(req.Tools) != "null" {
		n += count(string(req.Tools))
	}
	f := g.Factor
	if f <= 0 {
		f = 1
	}
	input = int64(math.Ceil(float64(n) * f))
	if req.CachedContent != "" {
		cached = g.CachedTokens
	}
	return input + cached, cached, nil
}

// geminiClock serves GET and POST /gemini/clock: the quota clock in Pacific time, and setting
// it ({"now": "2026-03-07T23:59:40-08:00"}).
func (s *Server) geminiClock(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var v struct {
			Now time.Time `json:"now"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&v); err != nil || v.Now.IsZero() {
			http.Error(w, `want {"now": RFC 3339}`, http.StatusBadRequest)
			return
		}
		s.Gemini.SetClock(v.Now, s.Now())
	}
	writeJSON(w, http.StatusOK, map[string]any{"now": s.Gemini.Clock(s.Now()).In(s.Gemini.zone()).Format(time.RFC3339Nano)})
}
