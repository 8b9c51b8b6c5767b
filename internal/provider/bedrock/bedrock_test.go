package bedrock

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

const sonnet4 = "us.anthropic.claude-sonnet-4-20250514-v1:0"

func config(tb testing.TB) *pricing.Config {
	tb.Helper()
	cl100k, err := tiktoken.Get(tiktoken.CL100K)
	if err != nil {
		tb.Fatal(err)
	}
	o200k, err := tiktoken.Get(tiktoken.O200K)
	if err != nil {
		tb.Fatal(err)
	}
	return &pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, O200K: o200k, Fallback: cl100k}
}

// settings are the anthropic room's settings the tests price with: 1.6 for Sonnet 4, 2.0 else.
func settings(tb testing.TB) *anthropic.Settings {
	tb.Helper()
	set := &anthropic.Settings{Factor: 2.0, Factors: []anthropic.FactorRule{{Model: "claude-sonnet-4-2*", Factor: 1.6}}, ImageTokens: 1600}
	if err := set.Validate(); err != nil {
		tb.Fatal(err)
	}
	return set
}

// price prices body as tokens.Pricer hands it to the room of prov.
func price(tb testing.TB, cfg *pricing.Config, prov provider.ID, api provider.API, model, body string) pricing.Estimate {
	tb.Helper()
	var sc pricing.Scratch
	r := pricing.NewRequest(cfg, &sc, pricing.Tokenize)
	if err := r.Doc.Parse([]byte(body)); err != nil {
		tb.Fatal(err)
	}
	r.Est = pricing.Estimate{Provider: prov, API: api, Model: model}
	if prov == provider.Anthropic {
		anthropic.PriceMessages(&r, 0, settings(tb))
	} else {
		Price(&r, 0, settings(tb))
	}
	return r.Est
}

func fixture(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

func TestHostAndAPI(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]provider.ID{
		"bedrock-runtime.us-east-1.amazonaws.com":          provider.Bedrock,
		"BEDROCK-RUNTIME.ap-southeast-2.AMAZONAWS.COM":     provider.Bedrock,
		"bedrock-runtime-fips.us-west-2.amazonaws.com":     provider.Bedrock,
		"bedrock-runtime.cn-northwest-1.amazonaws.com.cn":  provider.Bedrock,
		"bedrock-runtime.us-east-1.amazonaws.com.evil":     provider.Unknown,
		"bedrock-runtime.us.east.1.amazonaws.com":          provider.Unknown,
		"bedrock-runtime.-x.amazonaws.com":                 provider.Unknown,
		"bedrock-agent-runtime.us-east-1.amazonaws.com":    provider.Unknown,
		"bedrock-mantle.us-east-1.api.aws":                 provider.Unknown,
		"x.bedrock-runtime.us-east-1.amazonaws.com":        provider.Unknown,
		"bedrock-runtime.amazonaws.com":                    provider.Unknown,
		"bedrock-runtime.us-east-1.amazonaws.com.cn.other": provider.Unknown,
	} {
		if got := Host(h); got != want {
			t.Errorf("Host(%q) = %v, want %v", h, got, want)
		}
	}
	for p, want := range map[string]provider.API{
		"/model/m/converse": provider.Converse, "/model/m/converse-stream": provider.ConverseStream,
		"/model/m/invoke": provider.InvokeModel, "/model/m/invoke-with-response-stream": provider.InvokeModelStream,
		"/model/m/x/converse": provider.UnknownAPI, "/model//converse": provider.UnknownAPI,
		"/models/m/converse": provider.UnknownAPI, "/model/m/count-tokens": provider.UnknownAPI,
	} {
		if got, _ := API(p); got != want {
			t.Errorf("API(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestProfile(t *testing.T) {
	t.Parallel()
	for model, weight := range map[string]int64{
		// The models the burndown page lists, under every spelling of their ids.
		"anthropic.claude-sonnet-4-20250514-v1:0": 5,
		sonnet4: 5,
		"eu.anthropic.claude-opus-4-1-20250805-v1:0":                                                        5,
		"global.anthropic.claude-sonnet-4-5-20250929-v1:0":                                                  5,
		"anthropic.claude-haiku-4-5-20251001-v1:0":                                                          5,
		"apac.anthropic.claude-opus-4-5-20251101-v1:0":                                                      5,
		"arn:aws:bedrock:us-east-1:123456789012:inference-profile/us.anthropic.claude-opus-4-20250514-v1:0": 5,
		"arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-sonnet-4-20250514-v1:0":               5,
		// Earlier Claude models and other vendors burn 1x.
		"anthropic.claude-3-7-sonnet-20250219-v1:0":                                1,
		"us.anthropic.claude-3-5-haiku-20241022-v1:0":                              1,
		"anthropic.claude-v2:1":                                                    1,
		"anthropic.claude-instant-v1":                                              1,
		"amazon.nova-pro-v1:0":                                                     1,
		"meta.llama3-1-70b-instruct-v1:0":                                          1,
		"arn:aws:bedrock:us-east-1::foundation-model/amazon.titan-text-express-v1": 1,
		// An id that names no model cannot be checked: weighted as the listed models.
		"arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3": 5,
		"arn:aws:bedrock:us-east-1:123456789012:provisioned-model/abc":                5,
		// A vendor prefix that is not a Region's is another model.
		"xanthropic.claude-sonnet-4-20250514-v1:0": 1,
	} {
		p := Dialect{}.Profile(provider.Bedrock, model)
		if p.Weight() != weight || !p.CacheReadsFree || !p.Settles.Has(provider.Tokens) || p.Settles.Has(provider.InputTokens) {
			t.Errorf("Profile(%q) = %+v, want weight %d, cache reads free, tokens settling", model, p, weight)
		}
	}
}

func TestPrice(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	// A Converse body prices as the Messages body Bedrock turns it into, by the anthropic room.
	conv := `{"system":[{"text":"Be brief."}],"messages":[{"role":"user","content":[{"text":"Hello there"}]},` +
		`{"role":"assistant","content":[{"text":"Hi."}]},{"role":"user","content":[{"text":"Name a river."}]}],"inferenceConfig":{"maxTokens":100}}`
	msgs := `{"model":"claude-sonnet-4-20250514","system":[{"type":"text","text":"Be brief."}],"max_tokens":100,"messages":[` +
		`{"role":"user","content":[{"type":"text","text":"Hello there"}]},{"role":"assistant","content":[{"type":"text","text":"Hi."}]},` +
		`{"role":"user","content":[{"type":"text","text":"Name a river."}]}]}`
	got := price(t, cfg, provider.Bedrock, provider.Converse, sonnet4, conv)
	want := price(t, cfg, provider.Anthropic, provider.Messages, "claude-sonnet-4-20250514", msgs)
	if got.PromptTokens != want.PromptTokens || got.OutputTokens != 100 || got.Reason != pricing.ReasonAnthropicEstimate || got.Model != sonnet4 {
		t.Errorf("Converse priced %+v, want the Messages estimate %d", got, want.PromptTokens)
	}
	for _, c := range []struct {
		name, model string
		api         provider.API
		output      int64
		reason      pricing.Reason
		stream      bool
	}{
		{"converse.json", sonnet4, provider.ConverseStream, 512, pricing.ReasonAnthropicEstimate, true},
		// maxTokens unset: Bedrock reserves the model's maximum output.
		{"converse_unset.json", sonnet4, provider.Converse, 64_000, pricing.ReasonAnthropicEstimate, false},
		{"converse_unset.json", "amazon.nova-pro-v1:0", provider.Converse, 4096, pricing.ReasonUnknownModel, false},
		{"invoke_claude.json", sonnet4, provider.InvokeModelStream, 300, pricing.ReasonAnthropicEstimate, true},
		{"invoke_llama.json", "meta.llama3-1-70b-instruct-v1:0", provider.InvokeModel, 200, pricing.ReasonUnpricedPart, false},
	} {
		e := price(t, cfg, provider.Bedrock, c.api, c.model, fixture(t, c.name))
		if e.PromptTokens <= 0 || e.OutputTokens != c.output || e.Reason != c.reason || e.Stream != c.stream || e.NCache != 0 {
			t.Errorf("%s (%s): %+v, want output %d, reason %s, stream %v, no cache point", c.name, c.model, e, c.output, c.reason, c.stream)
		}
	}
	// Content the body only refers to is unseen: the pricer bounds the prompt.
	for _, body := range []string{
		`{"messages":[{"role":"user","content":[{"image":{"format":"png","source":{"s3Location":{"uri":"s3://b/k"}}}}]}]}`,
		`{"messages":[{"role":"user","content":[{"document":{"format":"pdf","name":"d","source":{"bytes":"JVBERi0="}}}]}]}`,
		`{"promptVariables":{"topic":{"text":"x"}}}`,
	} {
		var sc pricing.Scratch
		r := pricing.NewRequest(cfg, &sc, pricing.Tokenize)
		if err := r.Doc.Parse([]byte(body)); err != nil {
			t.Fatal(err)
		}
		r.Est = pricing.Estimate{Provider: provider.Bedrock, API: provider.Converse, Model: sonnet4}
		Price(&r, 0, settings(t))
		if !r.HasUnseen() {
			t.Errorf("%s: not unseen (%+v)", body, r.Est)
		}
	}
}

func TestPriceAllocatesNothing(t *testing.T) {
	cfg := config(t)
	body := []byte(fixture(t, "converse.json"))
	var sc pricing.Scratch
	r := pricing.NewRequest(cfg, &sc, pricing.Tokenize)
	if err := r.Doc.Parse(body); err != nil {
		t.Fatal(err)
	}
	set := settings(t)
	if n := testing.AllocsPerRun(50, func() {
		r.Est = pricing.Estimate{Provider: provider.Bedrock, API: provider.Converse, Model: sonnet4}
		Price(&r, 0, set)
	}); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]provider.Usage{
		// inputTokens leaves out the cache's reads and writes: Input adds them.
		"converse.json":          {Input: 170, Output: 30, CacheRead: 40, CacheWrite: 10},
		"converse_metadata.json": {Input: 25, Output: 16},
		"invoke_claude.json":     {Input: 62, Output: 12, CacheRead: 7, CacheWrite: 5},
		"chunk_start.json":       {Input: 18, Output: 1},
		"chunk_delta.json":       {Output: 16},
		"chunk_stop.json":        {Input: 122, Output: 16, CacheRead: 100, CacheWrite: 4},
	} {
		got, ok := Dialect{}.Usage([]byte(fixture(t, "usage/"+name)))
		if got != want || !ok {
			t.Errorf("%s: usage %+v (found %v), want %+v", name, got, ok, want)
		}
	}
	for _, doc := range []string{fixture(t, "usage/chunk_text.json"), `{"bytes":"not base64"}`, `{"bytes":"eyJieXRlcyI6ImUzMD0ifQ=="}`, `[]`, `{"usage":null}`, `{"messageStop":{"stopReason":"end_turn"}}`} {
		if u, ok := (Dialect{}).Usage([]byte(doc)); ok {
			t.Errorf("%s: usage %+v, want none", doc, u)
		}
	}
}

func TestAnswers(t *testing.T) {
	t.Parallel()
	d := Dialect{}
	b := d.AppendError(nil, provider.ConverseStream, provider.Error{Class: provider.RateLimited, Message: `over "x"`})
	var v map[string]string
	if err := json.Unmarshal(b, &v); err != nil || len(v) != 1 || v["message"] != `over "x"` {
		t.Errorf("AppendError = %s", b)
	}
	for c, want := range map[provider.Class]string{provider.RateLimited: "ThrottlingException", provider.TooLarge: "ValidationException",
		provider.Unavailable: "ServiceUnavailableException", provider.Misconfigured: "InternalServerException", provider.InvalidRequest: "ValidationException"} {
		if k, v, ok := d.ErrorHeader(provider.Converse, c); !ok || k != "x-amzn-errortype" || v != want {
			t.Errorf("ErrorHeader(%v) = %s: %s, want %s", c, k, v, want)
		}
	}
	if _, ok := d.RateHeaders(provider.Converse, provider.Tokens); ok {
		t.Error("Bedrock sends no rate-limit headers")
	}
	if b := d.Budgets(func(string) (string, bool) { return "1", true }); b[provider.Tokens].OK {
		t.Error("Bedrock reports no budget")
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	for model, want := range map[string]int64{sonnet4: 64_000, "anthropic.claude-opus-4-1-20250805-v1:0": 32_000,
		"arn:aws:bedrock:us-east-1:1:inference-profile/us.anthropic.claude-3-5-haiku-20241022-v1:0": 8_192} {
		if got, ok := maxOutput(model); !ok || got != want {
			t.Errorf("maxOutput(%q) = %d %v, want %d", model, got, ok, want)
		}
	}
	for _, l := range Limits() {
		if !strings.Contains(l.Model, "anthropic.claude-") {
			t.Errorf("glob %q may name another family's model", l.Model)
		}
	}
}

func FuzzPrice(f *testing.F) {
	for _, n := range []string{"converse.json", "converse_unset.json", "invoke_claude.json", "invoke_llama.json"} {
		f.Add(fixture(f, n), uint8(0))
	}
	f.Add(`{"messages":[{"content":[{"toolResult":{"content":[{"json":1},{"image":{"source":{"bytes":"iVBORw0KGgo="}}}]}}]}]}`, uint8(1))
	cfg := config(f)
	set := settings(f)
	models := []string{sonnet4, "amazon.nova-pro-v1:0", "arn:aws:bedrock:us-east-1:1:provisioned-model/x", ""}
	apis := []provider.API{provider.Converse, provider.ConverseStream, provider.InvokeModel, provider.InvokeModelStream}
	f.Fuzz(func(t *testing.T, body string, sel uint8) {
		var sc pricing.Scratch
		r := pricing.NewRequest(cfg, &sc, pricing.Tokenize)
		if r.Doc.Parse([]byte(body)) != nil || r.Doc.Kind(0) != pricing.Object {
			return
		}
		r.Est = pricing.Estimate{Provider: provider.Bedrock, API: apis[sel%4], Model: models[sel/4%4]}
		Price(&r, 0, set)
		if r.Est.PromptTokens < 0 || r.Est.OutputTokens < 0 || r.Est.NCache != 0 {
			t.Fatalf("%q: %+v", body, r.Est)
		}
	})
}

func FuzzUsage(f *testing.F) {
	for _, n := range []string{"converse.json", "converse_metadata.json", "invoke_claude.json", "chunk_stop.json", "chunk_start.json"} {
		f.Add([]byte(fixture(f, "usage/"+n)))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		u, _ := Dialect{}.Usage(doc)
		for _, n := range []int64{u.Input, u.Output, u.CacheRead, u.CacheWrite} {
			if n < 0 || n > 4*provider.MaxCount {
				t.Fatalf("%q: usage %+v", doc, u)
			}
		}
		if u.CacheRead+u.CacheWrite > u.Input {
			t.Fatalf("%q: cache counts above the input: %+v", doc, u)
		}
	})
}
