package gemini

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

func TestRoute(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host, path string
		prov       provider.ID
		api        provider.API
		model      string
	}{
		{hostGemini, "/v1beta/models/gemini-2.0-flash:generateContent", provider.Gemini, provider.GenerateContent, "gemini-2.0-flash"},
		{hostGemini, "/v1beta/models/gemini-2.5-pro:streamGenerateContent", provider.Gemini, provider.StreamGenerateContent, "gemini-2.5-pro"},
		{hostGemini, "/v1/models/gemini%2D2.0-flash:generateContent", provider.Gemini, provider.GenerateContent, "gemini%2D2.0-flash"},
		{hostGemini, "/v1beta/models/gemini-2.0-flash:countTokens", provider.Unknown, provider.UnknownAPI, ""},
		{hostGemini, "/v1beta/models/gemini-2.0-flash:embedContent", provider.Unknown, provider.UnknownAPI, ""},
		{hostGemini, "/v1beta/models/:generateContent", provider.Unknown, provider.UnknownAPI, ""},
		{hostGemini, "/v1beta/openai/chat/completions", provider.Gemini, provider.ChatCompletions, ""},
		{hostGemini, "/v1beta/models", provider.Unknown, provider.UnknownAPI, ""},
		{"us-central1-aiplatform.googleapis.com", "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent",
			provider.Vertex, provider.GenerateContent, "gemini-2.0-flash"},
		{hostVertex, "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-flash:streamGenerateContent",
			provider.Vertex, provider.StreamGenerateContent, "gemini-2.5-flash"},
		{"europe-west1-aiplatform.googleapis.com", "/v1/projects/p/locations/europe-west1/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict",
			provider.Vertex, provider.Messages, "claude-sonnet-4-5@20250929"},
		{hostVertex, "/v1/projects/p/locations/global/publishers/anthropic/models/claude-3-5-haiku@20241022:rawPredict",
			provider.Vertex, provider.Messages, "claude-3-5-haiku@20241022"},
		{hostVertex, "/v1/projects/p/locations/global/publishers/meta/models/llama:generateContent", provider.Unknown, provider.UnknownAPI, ""},
		{hostVertex, "/v1/projects/p/locations/global/endpoints/openapi/chat/completions", provider.Vertex, provider.ChatCompletions, ""},
		{hostVertex, "/v1/projects/p/locations/global/publishers/google/models/gemini-2.0-flash:predict", provider.Unknown, provider.UnknownAPI, ""},
		// No provider's host: the path decides.
		{"", "/v1beta/models/gemini-2.0-flash:generateContent", provider.Gemini, provider.GenerateContent, "gemini-2.0-flash"},
		{"", "/v1/projects/p/locations/l/publishers/google/models/m:generateContent", provider.Vertex, provider.GenerateContent, "m"},
	} {
		prov, api, model := Route(Host(provider.HostName(c.host)), c.path)
		if prov != c.prov || api != c.api || model != c.model {
			t.Errorf("Route(%q, %q) = %v %v %q, want %v %v %q", c.host, c.path, prov, api, model, c.prov, c.api, c.model)
		}
	}
	for h, want := range map[string]provider.ID{
		"generativelanguage.googleapis.com": provider.Gemini, "GenerativeLanguage.GoogleAPIs.com": provider.Gemini,
		"aiplatform.googleapis.com": provider.Vertex, "us-east5-aiplatform.googleapis.com": provider.Vertex,
		"-aiplatform.googleapis.com": provider.Unknown, "a.b-aiplatform.googleapis.com": provider.Unknown,
		"evil.example": provider.Unknown, "aiplatform.googleapis.com.evil": provider.Unknown,
	} {
		if got := Host(h); got != want {
			t.Errorf("Host(%q) = %v, want %v", h, got, want)
		}
	}
}

func encoding(tb testing.TB, name string) *tiktoken.Encoding {
	tb.Helper()
	enc, err := tiktoken.Get(name)
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

// rooms are the other rooms' settings this room prices with, their defaults.
var rooms = func() (r struct {
	claude anthropic.Settings
	chat   openai.Settings
}) {
	if err := errors.Join(r.claude.Validate(), r.chat.Validate()); err != nil {
		panic(err)
	}
	return r
}()

// price prices body as a request of model to api, as tokens.Pricer hands it to this room.
func price(tb testing.TB, api provider.API, model, body string) pricing.Estimate {
	tb.Helper()
	cl100k := encoding(tb, tiktoken.CL100K)
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, O200K: cl100k, Fallback: cl100k}
	var sc pricing.Scratch
	r := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
	if err := r.Doc.Parse([]byte(body)); err != nil {
		tb.Fatal(err)
	}
	r.Est = pricing.Estimate{Provider: provider.Gemini, API: api, Model: model}
	Price(&r, 0, &rooms.claude, &rooms.chat)
	return r.Est
}

// pngOf is a base64 PNG header of w x h: what the size reader needs.
func pngOf(w, h int) string {
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
	b = append(b, byte(w>>24), byte(w>>16), byte(w>>8), byte(w), byte(h>>24), byte(h>>16), byte(h>>8), byte(h), 8, 6, 0, 0, 0)
	b = append(b, make([]byte, 64)...)
	return base64.StdEncoding.EncodeToString(b)
}

func TestPrice(t *testing.T) {
	t.Parallel()
	cl := encoding(t, tiktoken.CL100K)
	n := func(s string) int64 { return int64(cl.Count([]byte(s))) }
	hello := "The quick brown fox jumps over the lazy dog."
	for _, c := range []struct {
		name, model, body string
		api               provider.API
		prompt, output    int64
		reason            pricing.Reason
		stream            bool
	}{
		{"text", "gemini-2.0-flash", `{"contents":[{"role":"user","parts":[{"text":"` + hello + `"}]}]}`,
			provider.GenerateContent, scaled(n(hello) + perContent), 4096, pricing.ReasonGeminiEstimate, false},
		{"stream and output", "gemini-2.0-flash", `{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":100,"candidateCount":3}}`,
			provider.StreamGenerateContent, scaled(n("hi") + perContent), 300, pricing.ReasonGeminiEstimate, true},
		{"snake case", "gemini-2.0-flash", `{"contents":[{"parts":[{"text":"hi"}]}],"system_instruction":{"parts":[{"text":"be brief"}]},"generation_config":{"max_output_tokens":50,"candidate_count":2}}`,
			provider.GenerateContent, scaled(n("hi") + n("be brief") + 2*perContent), 100, pricing.ReasonGeminiEstimate, false},
		{"small image", "gemini-2.0-flash", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + pngOf(300, 200) + `"}}]}]}`,
			provider.GenerateContent, scaled(perContent) + 258, 4096, pricing.ReasonGeminiEstimate, false},
		{"tiled image", "gemini-2.5-flash", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + pngOf(1000, 800) + `"}}]}]}`,
			provider.GenerateContent, scaled(perContent) + 4*258, 4096, pricing.ReasonGeminiEstimate, false},
		{"gemini 3 image", "gemini-3-pro-preview", `{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + pngOf(300, 200) + `"}}]}]}`,
			provider.GenerateContent, scaled(perContent) + imageHigh, 4096, pricing.ReasonGeminiEstimate, false},
		{"audio", "gemini-2.0-flash", `{"contents":[{"parts":[{"inlineData":{"mimeType":"audio/mp3","data":"` + strings.Repeat("A", 1600) + `"}}]}]}`,
			provider.GenerateContent, scaled(perContent) + (1602+15)/16, 4096, pricing.ReasonGeminiEstimate, false},
		{"contents not a list", "gemini-2.0-flash", `{"contents":{"parts":[{"text":"hi"}]}}`,
			provider.GenerateContent, scaled(n("hi") + perContent), 4096, pricing.ReasonGeminiEstimate, false},
		{"compat chat", "gemini-2.0-flash", `{"model":"gemini-2.0-flash","messages":[{"role":"user","content":"hi"}],"max_tokens":10}`,
			provider.ChatCompletions, scaled(n("hi") + 3 + 3 + 1 /* the chat rule: 3 per message, 3 for the reply, the role */), 10, pricing.ReasonGeminiEstimate, false},
	} {
		got := price(t, c.api, c.model, c.body)
		if got.PromptTokens != c.prompt || got.OutputTokens != c.output || got.Reason != c.reason || got.Stream != c.stream {
			t.Errorf("%s: prompt %d output %d reason %q stream %v, want %d %d %q %v", c.name,
				got.PromptTokens, got.OutputTokens, got.Reason, got.Stream, c.prompt, c.output, c.reason, c.stream)
		}
	}
}

func TestPriceUnseen(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"file":  `{"contents":[{"parts":[{"fileData":{"mimeType":"application/pdf","fileUri":"https://generativelanguage.googleapis.com/v1beta/files/x"}}]}]}`,
		"cache": `{"cachedContent":"cachedContents/abc","contents":[{"parts":[{"text":"hi"}]}]}`,
	} {
		var sc pricing.Scratch
		cl := encoding(t, tiktoken.CL100K)
		cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl, O200K: cl, Fallback: cl}
		r := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
		if err := r.Doc.Parse([]byte(body)); err != nil {
			t.Fatal(err)
		}
		r.Est = pricing.Estimate{Provider: provider.Gemini, API: provider.GenerateContent, Model: "gemini-2.0-flash"}
		Price(&r, 0, &rooms.claude, &rooms.chat)
		if !r.HasUnseen() {
			t.Errorf("%s: input the body does not hold is not marked unseen (%+v)", name, r.Est)
		}
	}
}

// Claude on Vertex is priced by Anthropic's rules.
func TestPriceVertexClaude(t *testing.T) {
	t.Parallel()
	got := price(t, provider.Messages, "claude-sonnet-4-5@20250929",
		`{"anthropic_version":"vertex-2023-10-16","messages":[{"role":"user","content":"hi"}],"max_tokens":64}`)
	if got.Reason != pricing.ReasonAnthropicEstimate || got.OutputTokens != 64 || got.PromptTokens <= 0 {
		t.Errorf("Claude on Vertex priced %+v", got)
	}
}

func TestPriceAllocatesNothing(t *testing.T) {
	cl := encoding(t, tiktoken.CL100K)
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl, O200K: cl, Fallback: cl}
	var sc pricing.Scratch
	body := []byte(`{"systemInstruction":{"parts":[{"text":"be brief"}]},"contents":[{"role":"user","parts":[{"text":"hi"},{"inlineData":{"mimeType":"image/png","data":"` + pngOf(10, 10) + `"}}]}],"tools":[{"functionDeclarations":[{"name":"f"}]}]}`)
	n := testing.AllocsPerRun(50, func() {
		r := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
		if err := r.Doc.Parse(body); err != nil {
			t.Fatal(err)
		}
		r.Est = pricing.Estimate{Provider: provider.Gemini, API: provider.GenerateContent, Model: "gemini-2.0-flash"}
		Price(&r, 0, &rooms.claude, &rooms.chat)
	})
	if n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

func reported(t *testing.T, name string) (provider.Usage, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "usage", name))
	if err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	switch {
	case strings.HasSuffix(name, ".sse"):
		for _, l := range bytes.Split(b, []byte{'\n'}) {
			if data, ok := bytes.CutPrefix(bytes.TrimSuffix(l, []byte{'\r'}), []byte("data:")); ok {
				docs = append(docs, bytes.TrimSpace(data))
			}
		}
	case bytes.HasPrefix(bytes.TrimSpace(b), []byte("[")):
		var elems []json.RawMessage
		if err := json.Unmarshal(b, &elems); err != nil {
			t.Fatal(err)
		}
		for _, e := range elems {
			docs = append(docs, e)
		}
	default:
		docs = [][]byte{b}
	}
	var u provider.Usage
	found := false
	for _, d := range docs {
		if r, ok := (Dialect{}).Usage(d); ok {
			u.Merge(r)
			found = true
		}
	}
	return u, found
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]provider.Usage{
		// Thinking is output; cached content is part of the prompt.
		"generate.json": {Input: 120, Output: 30, CacheRead: 100, Total: 150},
		// Each chunk carries the usage so far: the last wins.
		"stream.json": {Input: 42, Output: 7, Total: 49},
		"stream.sse":  {Input: 42, Output: 10, Total: 52},
		// Claude on Vertex reports Anthropic's usage.
		"vertex_claude.json": {Input: 30, Output: 5},
	} {
		got, ok := reported(t, name)
		if got != want || !ok {
			t.Errorf("%s: usage %+v (found %v), want %+v", name, got, ok, want)
		}
	}
	if _, ok := (Dialect{}).Usage([]byte(`{"candidates":[]}`)); ok {
		t.Error("a chunk without usageMetadata reports usage")
	}
	u, _ := (Dialect{}).Usage([]byte(`{"usageMetadata":{"promptTokenCount":-5,"candidatesTokenCount":1e30,"totalTokenCount":99999999999999999}}`))
	if u.Input != 0 || u.Output > provider.MaxCount || u.Total > provider.MaxCount {
		t.Errorf("unbounded counts: %+v", u)
	}
}

func TestAppendError(t *testing.T) {
	t.Parallel()
	b := Dialect{}.AppendError(nil, provider.GenerateContent, provider.Error{Class: provider.RateLimited, Limit: "input_tokens",
		Code: "rate_limit_exceeded", Message: "Rate limit reached.", RetryAfter: 12*time.Second + 300*time.Millisecond})
	const want = `{"error":{"code":429,"message":"Rate limit reached.","status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"llm-ratelimit/input_tokens","quotaId":"rate_limit_exceeded"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12.3s"}]}}`
	if string(b) != want {
		t.Errorf("429 body\n%s\nwant\n%s", b, want)
	}
	// The limiter's own 429 reads back as a provider 429 does.
	if d, ok := (Dialect{}).RetryAfter(provider.Gemini, b); !ok || d != 12300*time.Millisecond {
		t.Errorf("RetryAfter of our own 429 = %v %v", d, ok)
	}
	for c, want := range map[provider.Class]string{
		provider.TooLarge: `"code":413`, provider.Unavailable: `"status":"UNAVAILABLE"`,
		provider.InvalidRequest: `"status":"INVALID_ARGUMENT"`, provider.Misconfigured: `"code":500`,
	} {
		if b := (Dialect{}).AppendError(nil, provider.StreamGenerateContent, provider.Error{Class: c, Message: "m"}); !bytes.Contains(b, []byte(want)) || bytes.Contains(b, []byte("details")) {
			t.Errorf("class %v: %s, want %s and no details", c, b, want)
		}
	}
	if b := (Dialect{}).AppendError([]byte("x"), provider.ChatCompletions, provider.Error{Class: provider.RateLimited, Message: "m"}); !bytes.HasPrefix(b, []byte(`x{"error":{"message":"m","type"`)) {
		t.Errorf("the OpenAI-compatible endpoint answers %s", b)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata", "errors", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, c := range []struct {
		id   provider.ID
		body []byte
		want time.Duration
		ok   bool
	}{
		{provider.Gemini, read("gemini_429.json"), 10 * time.Second, true},
		{provider.Gemini, []byte(`{"error":{"code":429,"message":"Quota exceeded. Please retry in 2.5s.","status":"RESOURCE_EXHAUSTED"}}`), 2500 * time.Millisecond, true},
		{provider.Gemini, read("vertex_dsq_429.json"), 0, false},
		{provider.Vertex, read("vertex_dsq_429.json"), CapacityBackoff, true},
		{provider.Vertex, read("gemini_429.json"), 10 * time.Second, true},
		{provider.Gemini, []byte(`{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"99999999s"}]}}`), MaxRetryDelay, true},
		{provider.Gemini, []byte(`{"error":{"details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"-3s"}]}}`), 0, false},
		{provider.Gemini, []byte(`not json`), 0, false},
	} {
		got, ok := (Dialect{}).RetryAfter(c.id, c.body)
		if got != c.want || ok != c.ok {
			t.Errorf("RetryAfter(%v, %.60s) = %v %v, want %v %v", c.id, c.body, got, ok, c.want, c.ok)
		}
	}
}

func TestProfile(t *testing.T) {
	t.Parallel()
	p := Dialect{}.Profile(provider.Gemini, "gemini-2.0-flash")
	if !p.Settles.Has(provider.InputTokens) || p.CacheReadsFree || p.Counting != provider.Sum {
		t.Errorf("Gemini profile %+v", p)
	}
	if p := (Dialect{}).Profile(provider.Vertex, "claude-sonnet-4-5@20250929"); !p.CacheReadsFree {
		t.Errorf("Claude on Vertex profile %+v, want Anthropic's", p)
	}
	if _, ok := (Dialect{}).RateHeaders(provider.GenerateContent, provider.Tokens); ok {
		t.Error("Gemini names rate-limit headers it does not send")
	}
}

func FuzzPrice(f *testing.F) {
	for _, s := range []string{
		`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":5,"candidateCount":2}}`,
		`{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"` + pngOf(5000, 5000) + `"}}]}]}`,
		`{"contents":"x","systemInstruction":7,"tools":[{}],"generationConfig":{"maxOutputTokens":-1,"candidateCount":1e9}}`,
		`{"contents":[{"parts":[{"fileData":{}},{"functionCall":{"name":"f","args":{}}},{"weird":1}]}]}`,
	} {
		f.Add(s)
	}
	cl := encoding(f, tiktoken.CL100K)
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl, O200K: cl, Fallback: cl}
	f.Fuzz(func(t *testing.T, body string) {
		var sc pricing.Scratch
		for _, api := range []provider.API{provider.GenerateContent, provider.ChatCompletions, provider.Messages} {
			r := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
			if r.Doc.Parse([]byte(body)) != nil || r.Doc.Kind(0) != pricing.Object {
				return
			}
			r.Est = pricing.Estimate{Provider: provider.Gemini, API: api, Model: "gemini-2.0-flash"}
			Price(&r, 0, &rooms.claude, &rooms.chat)
			if r.Est.PromptTokens < 0 || r.Est.OutputTokens < 0 {
				t.Fatalf("negative price %+v", r.Est)
			}
		}
	})
}

func FuzzUsage(f *testing.F) {
	f.Add([]byte(`{"usageMetadata":{"promptTokenCount":1}}`))
	f.Add([]byte(`{"error":{"message":"retry in 9999999999999999999999s","details":[{"@type":"google.rpc.RetryInfo","retryDelay":"1e309s"}]}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		u, _ := (Dialect{}).Usage(doc)
		if u.Input < 0 || u.Output < 0 || u.Input > 2*provider.MaxCount || u.Total > provider.MaxCount {
			t.Fatalf("usage %+v", u)
		}
		for _, id := range []provider.ID{provider.Gemini, provider.Vertex} {
			if d, ok := (Dialect{}).RetryAfter(id, doc); ok && (d <= 0 || d > MaxRetryDelay) {
				t.Fatalf("RetryAfter %v", d)
			}
		}
	})
}
