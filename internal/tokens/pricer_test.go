package tokens

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

func mustEncoding(tb testing.TB, name string) *tiktoken.Encoding {
	tb.Helper()
	e, err := tiktoken.Get(name)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

func newPricer(tb testing.TB, opts Options) *Pricer {
	tb.Helper()
	p, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

func post(path, body string) *Input {
	return &Input{Path: path, Body: []byte(body), ContentType: "application/json", ContentLength: int64(len(body))}
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func gzipped(s string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(s))
	zw.Close()
	return buf.Bytes()
}

// TestEstimate prices requests end to end for what the Pricer does around the rooms: it
// recognises the provider and API, reads the model (or the Azure deployment's) and stream, applies
// the output options, reads and decodes the body and bounds what it cannot read. One plain request
// per room shows the hand-off; each room's TestPrice holds the rules of its APIs' bodies.
func TestEstimate(t *testing.T) {
	t.Parallel()
	cl, o2 := mustEncoding(t, tiktoken.CL100K), mustEncoding(t, tiktoken.O200K)
	cnt := func(e *tiktoken.Encoding, s string) int64 { return int64(e.CountString(s)) }
	p := newPricer(t, Options{
		OpenAI:      openai.Settings{AzureDeployments: map[string]string{"prod-chat": "gpt-4o"}},
		OutputRules: []OutputRule{{Model: "gpt-4o-mini*", Tokens: 1000}},
	})
	hello := cnt(o2, "Hello")
	userMsg := 3 + 1 + hello + 3 // per message, "user", content, priming
	big := strings.Repeat("lorem ipsum dolor sit amet ", 2000)

	tests := []struct {
		name string
		in   *Input
		want Estimate
	}{
		{"chat string", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_completion_tokens":50,"n":2,"stream":true}`),
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: userMsg, OutputTokens: 100, Stream: true, Exact: true}},
		{"default output per model", post("/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`),
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o-mini", PromptTokens: userMsg, OutputTokens: 1000, Exact: true}},
		{"default output", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`),
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: userMsg, OutputTokens: 4096, Exact: true}},
		{"azure deployment map", post("/openai/deployments/prod-chat/chat/completions?api-version=2024-10-21", `{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3}`),
			Estimate{Provider: AzureOpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: userMsg, OutputTokens: 3, Exact: true}},
		{"azure unmapped deployment named like a model", post("/openai/deployments/gpt-35-turbo/chat/completions?api-version=2024-10-21", `{"messages":[{"role":"user","content":"Hello"}],"max_tokens":3}`),
			Estimate{Provider: AzureOpenAI, API: ChatCompletions, Model: "gpt-35-turbo", PromptTokens: 3 + 1 + cnt(cl, "Hello") + 3, OutputTokens: 3, Exact: true}},
		{"anthropic", post("/v1/messages", `{"model":"claude-sonnet-4-5","system":"Be brief.","messages":[{"role":"user","content":"Hello"}],"max_tokens":100}`),
			Estimate{Provider: Anthropic, API: Messages, Model: "claude-sonnet-4-5", PromptTokens: ceil16(anthropicBase + cnt(cl, "Be brief.") + anthropicPerMessage + cnt(cl, "Hello")), OutputTokens: 100, Reason: ReasonAnthropicEstimate}},
		{"not JSON", post("/v1/chat/completions", `this is not json`),
			Estimate{Provider: OpenAI, API: ChatCompletions, PromptTokens: 16, OutputTokens: openAIMaxOutput, Reason: ReasonNotJSON}},
		{"too deep", post("/v1/chat/completions", `{"model":"gpt-4o","messages":`+strings.Repeat("[", pricing.MaxDepth)+strings.Repeat("]", pricing.MaxDepth)+`}`),
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: int64(len(`{"model":"gpt-4o","messages":}`) + 2*pricing.MaxDepth), OutputTokens: 16_384, Reason: ReasonNotJSON}},
		{"invalid UTF-8", post("/v1/chat/completions", "{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}],\"max_tokens\":1}"),
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 3 + 1 + cnt(o2, "\xff\xfe") + 3, OutputTokens: 1, Reason: ReasonInvalidUTF8}},
		{"gzip", &Input{Path: "/v1/chat/completions", ContentEncoding: "gzip", ContentLength: -1, Body: gzipped(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":2}`)},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: userMsg, OutputTokens: 2, Exact: true}},
		{"gzip corrupt", &Input{Path: "/v1/chat/completions", ContentEncoding: "gzip", ContentLength: -1, Body: []byte("not gzip at all")},
			Estimate{Provider: OpenAI, API: ChatCompletions, PromptTokens: openAIMaxContext, OutputTokens: openAIMaxOutput, Reason: ReasonGzip}},
		{"brotli", &Input{Path: "/v1/chat/completions", ContentEncoding: "br", ContentLength: -1, Body: []byte("0123456789")},
			Estimate{Provider: OpenAI, API: ChatCompletions, PromptTokens: openAIMaxContext, OutputTokens: openAIMaxOutput, Reason: ReasonUnsupportedEncoding}},
		{"partial body", &Input{Path: "/v1/chat/completions", Body: []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + big[:1000]), ContentLength: 4000, Partial: true},
			Estimate{Provider: OpenAI, API: ChatCompletions, Model: "gpt-4o", PromptTokens: 4000, OutputTokens: 16_384, Reason: ReasonPartialBody}},
		{"unknown API", post("/v1/models", ``),
			Estimate{Reason: ReasonUnknownAPI}},
		{"count_tokens is not a generation", post("/v1/messages/count_tokens", `{"model":"claude-sonnet-4-5","messages":[]}`),
			Estimate{PromptTokens: cnt(cl, `{"model":"claude-sonnet-4-5","messages":[]}`), Reason: ReasonUnknownAPI}},
	}
	for _, tt := range tests {
		got := p.Estimate(tt.in)
		got.Chars, got.OutputUnset, got.Context = 0, false, 0 // TestAccountingInputs
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

func ceil16(n int64) int64 { return int64(math.Ceil(float64(n) * 1.6)) }

// TestGzipBomb: a body that decodes beyond MaxDecodedBytes stops there and is priced at the
// model's upper bound: its whole context window and maximum output.
func TestGzipBomb(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{MaxDecodedBytes: 1 << 20})
	body := gzipped(`{"model":"gpt-4o","messages":[{"role":"user","content":"` + strings.Repeat("ab ", 4<<20) + `"}]}`)
	start := time.Now()
	got := p.Estimate(&Input{Path: "/v1/chat/completions", ContentEncoding: "gzip", Body: body, ContentLength: int64(len(body))})
	if got.Reason != ReasonGzip || got.PromptTokens != 128_000 || got.OutputTokens != 16_384 || got.Exact {
		t.Errorf("got %+v, want gpt-4o's context window and maximum output", got)
	}
	t.Logf("%d compressed bytes: %+v in %v", len(body), got, time.Since(start))
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	_, err := New(Options{DefaultOutputTokens: -1, FallbackEncoding: "p50k_base", Anthropic: anthropic.Settings{Factor: 0.5},
		OutputRules: []OutputRule{{Model: "[", Tokens: 1}}, MaxBodyBytes: -1})
	if err == nil {
		t.Fatal("New accepted bad options")
	}
	for _, want := range []string{"DefaultOutputTokens", "FallbackEncoding", "anthropic: Factor", "OutputRules[0]", "MaxBodyBytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestOneMiB prices a 1 MiB chat body and reports the time (it must be far below Envoy's
// ext_authz timeout, typically 200 ms to 1 s; the bound here allows for the race detector).
func TestOneMiB(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{})
	body := chatBody(t, englishProse(t, 1<<20))
	start := time.Now()
	got := p.Estimate(post("/v1/chat/completions", body))
	d := time.Since(start)
	t.Logf("1 MiB chat body priced in %v: %+v", d, got)
	if !got.Exact || got.PromptTokens < 1<<20/8 {
		t.Errorf("got %+v", got)
	}
	if d > 5*time.Second {
		t.Errorf("1 MiB took %v", d)
	}
}

func chatBody(tb testing.TB, text []byte) string {
	return mustJSON(tb, map[string]any{"model": "gpt-4o", "max_tokens": 100, "messages": []map[string]string{
		{"role": "system", "content": "You are a helpful assistant."},
		{"role": "user", "content": string(text)},
	}})
}

// FuzzEstimate: arbitrary bodies and paths never panic and never give a negative price.
// Long fuzzing: go test -run '^$' -fuzz FuzzEstimate -fuzztime 10m ./internal/tokens/
func FuzzEstimate(f *testing.F) {
	p := newPricer(f, Options{OpenAI: openai.Settings{AzureDeployments: map[string]string{"d": "gpt-4o"}}})
	uncached := newPricer(f, Options{OpenAI: openai.Settings{AzureDeployments: map[string]string{"d": "gpt-4o"}}, CountCache: -1})
	var hosts provider.Hosts
	hosts.Add("api.deepseek.com", &provider.Declared{Name: "deepseek", Family: provider.OpenAI, Ratio: 1.5})
	hosts.Add("api.moonshot.ai", &provider.Declared{Name: "kimi", Family: provider.Anthropic, Encoding: "o200k_base"})
	declared := newPricer(f, Options{Providers: &hosts})
	seeds := []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`},
		{"/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]}],"tools":[{}]}`},
		{"/v1/completions", `{"prompt":[[1,2],[3]],"n":1e2,"max_tokens":1.0}`},
		{"/v1/embeddings", `{"input":["a",1,null]}`},
		{"/v1/responses", `{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]},{"type":"function_call"}],"text":{"format":{"type":"json_schema"}}}`},
		{"/openai/deployments/d/chat/completions?api-version=1", `{"messages":[]}`},
		{"/v1/messages", `{"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"tool_result","content":[{"type":"text","text":"x"}]}]}],"tools":[1],"max_tokens":-1}`},
		{"/v1/chat/completions", `{"a":"\ud800\u12"}`},
		{"/x", "\x00\xff"},
		{"/v1/chat/completions", strings.Repeat("[", 1000)},
	}
	for _, s := range seeds {
		f.Add(s.path, []byte(s.body), "", int64(-1), false)
	}
	f.Add("/v1/chat/completions", gzipped(seeds[0].body), "gzip", int64(10), true)
	for _, s := range boundSeeds() {
		f.Add(s.path, []byte(s.body), "", int64(-1), false)
	}
	f.Add("/v1/chat/completions", []byte(`{"model":"gpt-4o","max_tokens":5,"messages":[`), "", int64(-2), false)
	f.Fuzz(func(t *testing.T, path string, body []byte, encoding string, length int64, partial bool) {
		// A length below -1 stands for a request without content-length (Envoy's count then).
		in := &Input{Path: path, Body: body, ContentEncoding: encoding, ContentLength: max(length, -1), Partial: partial,
			NoContentLength: length < -1}
		start := time.Now()
		got := p.Estimate(in)
		if got.PromptTokens < 0 || got.OutputTokens < 0 || got.Cost() < 0 {
			t.Fatalf("negative price %+v", got)
		}
		if got.Exact != (got.Reason == "") {
			t.Fatalf("exact %v with reason %q", got.Exact, got.Reason)
		}
		if got.Reason == ReasonInternal {
			t.Fatalf("internal error on %q %q", path, body)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("took %v for %d bytes", d, len(body))
		}
		// The count cache changes nothing: the same request again (hits) and without the cache.
		if again := p.Estimate(in); again != got {
			t.Fatalf("cached estimate %+v, first %+v", again, got)
		}
		if plain := uncached.Estimate(in); plain != got {
			t.Fatalf("estimate %+v, without the count cache %+v", got, plain)
		}
		// A declared provider's request: its name, an API, never a negative or internal price.
		for _, host := range [...]string{"api.deepseek.com", "api.moonshot.ai"} {
			in.Host = host
			d := declared.Estimate(in)
			if d.Name == "" || d.API == UnknownAPI || d.Cost() < 0 || d.PromptTokens < 0 || d.Reason == ReasonInternal ||
				d.Exact != (d.Reason == "") {
				t.Fatalf("%s %q: %+v", host, path, d)
			}
		}
	})
}

func ExamplePricer_Estimate() {
	p, err := New(Options{})
	if err != nil {
		panic(err)
	}
	est := p.Estimate(&Input{
		Path:          "/v1/chat/completions",
		Body:          []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":50}`),
		ContentLength: -1,
	})
	fmt.Println(est.Provider, est.API, est.Model, est.PromptTokens, est.OutputTokens, est.Cost(), est.Exact)
	// Output: openai chat_completions gpt-4o 8 50 58 true
}

// TestLongRunReason: a request with such a run is priced approximately, with ReasonLongRun; one
// with a run of one byte, exactly.
func TestLongRunReason(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{})
	for _, tc := range []struct {
		run    string
		reason Reason
	}{{strings.Repeat("ab", pricing.MaxPiece/2+1000), ReasonLongRun}, {strings.Repeat("a", pricing.MaxPiece+1000), ""}} {
		got := p.Estimate(post("/v1/chat/completions", chatBody(t, []byte(tc.run))))
		exact := 3 + 1 + int64(mustEncoding(t, tiktoken.O200K).CountString("You are a helpful assistant.")) + 3 + 1 + int64(mustEncoding(t, tiktoken.O200K).CountString(tc.run)) + 3
		if got.Reason != tc.reason || got.PromptTokens != exact {
			t.Errorf("%q...: got %+v, want reason %q and prompt %d", tc.run[:4], got, tc.reason, exact)
		}
	}
}

// TestAccountingInputs: what the profiles count beyond the prompt and output: the size of the
// body read field by field (MaxOfChars), and for a request without an output maximum the
// model's context window (ContextWindow).
func TestAccountingInputs(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{})
	for _, tc := range []struct {
		name    string
		in      *Input
		chars   int64
		unset   bool
		context int64
	}{
		{"max_tokens given", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[],"max_tokens":5}`), 47, false, 0},
		{"no output maximum: the model's context", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`), 32, true, 128_000},
		{"null is no maximum", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[],"max_tokens":null}`), 50, true, 128_000},
		{"a wrong type is not unset", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[],"max_tokens":"x"}`), 49, false, 0},
		{"an unread body counts no characters", post("/v1/chat/completions", `{"model":`), 0, false, 0},
	} {
		got := p.Estimate(tc.in)
		if got.Chars != tc.chars || got.OutputUnset != tc.unset || got.Context != tc.context {
			t.Errorf("%s: chars %d unset %v context %d, want %d %v %d", tc.name, got.Chars, got.OutputUnset, got.Context,
				tc.chars, tc.unset, tc.context)
		}
	}
}
