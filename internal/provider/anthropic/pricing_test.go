package anthropic

import (
	"math"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// request is a body sent to one of the family's API paths.
type request struct {
	api  provider.API
	body string
}

// post is a request of body to path, whose API is recognised as API recognises it.
func post(path, body string) request { return request{API(path), body} }

// estimate prices r as tokens.Pricer hands it to this room, with set and chat (both
// validated) and the default shared configuration: the model is the body's, and the estimate
// is exact when the room records no reason.
func estimate(tb testing.TB, set *Settings, chat *openai.Settings, r request) pricing.Estimate {
	tb.Helper()
	cl100k, err := tiktoken.Get(tiktoken.CL100K)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, Fallback: cl100k}
	var sc pricing.Scratch
	q := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
	if err := q.Doc.Parse([]byte(r.body)); err != nil {
		tb.Fatal(err)
	}
	model, _ := q.Doc.Text(nil, q.Doc.Get(0, "model"))
	q.Est = pricing.Estimate{Provider: provider.Anthropic, API: r.api, Model: string(model)}
	Price(&q, 0, set, chat)
	q.Est.Exact = q.Est.Reason == ""
	return q.Est
}

// defaults returns the family's default settings, validated.
func defaults(tb testing.TB) *Settings {
	tb.Helper()
	var s Settings
	if err := s.Validate(); err != nil {
		tb.Fatal(err)
	}
	return &s
}

func ceil16(n int64) int64 { return int64(math.Ceil(float64(n) * 1.6)) }

// TestPrice prices Messages bodies by the family's estimate (internal/tokens' TestEstimate
// covers what the Pricer does around it).
func TestPrice(t *testing.T) {
	t.Parallel()
	cl, err := tiktoken.Get(tiktoken.CL100K)
	if err != nil {
		t.Fatal(err)
	}
	cnt := func(e *tiktoken.Encoding, s string) int64 { return int64(e.CountString(s)) }
	tests := []struct {
		name string
		in   request
		want pricing.Estimate
	}{
		{"anthropic newer model", post("/v1/messages", `{"model":"claude-opus-4-7","messages":[{"role":"user","content":"Hello"}],"max_tokens":100}`),
			pricing.Estimate{Provider: provider.Anthropic, API: provider.Messages, Model: "claude-opus-4-7", PromptTokens: 2 * (anthropicBase + anthropicPerMessage + cnt(cl, "Hello")), OutputTokens: 100, Reason: pricing.ReasonAnthropicEstimate}},
		{"anthropic blocks, image, tools", post("/v1/messages", `{"model":"claude-opus-4-1","system":[{"type":"text","text":"Sys"}],"messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.Anthropic, API: provider.Messages, Model: "claude-opus-4-1", PromptTokens: ceil16(anthropicBase+anthropicPerBlock+cnt(cl, "Sys")+anthropicPerMessage+2*anthropicPerBlock+cnt(cl, "Hi")+anthropicToolsSystem+cnt(cl, `[{"name":"f","input_schema":{"type":"object"}}]`)) + 1600, OutputTokens: 1, Reason: pricing.ReasonAnthropicEstimate}},
	}
	for _, tt := range tests {
		got := estimate(t, defaults(t), &openai.Settings{}, tt.in)
		got.OutputUnset = false // internal/tokens' TestAccountingInputs
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

// TestPriceWithSettings: the factors and the cost of an unknown image are the settings'; the
// OpenAI-compatible endpoint's image parts are priced by OpenAI's chat rule and its settings.
func TestPriceWithSettings(t *testing.T) {
	t.Parallel()
	cl, err := tiktoken.Get(tiktoken.CL100K)
	if err != nil {
		t.Fatal(err)
	}
	msg := post("/v1/messages", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"image","source":{"type":"url","url":"https://x/y.png"}}]}],"max_tokens":1}`)
	text := int64(anthropicBase + anthropicPerMessage + 2*anthropicPerBlock + cl.CountString("Hi"))
	rule := Settings{Factors: []FactorRule{{Model: "claude-sonnet-*", Factor: 3}}, ImageTokens: 100}
	none := Settings{Factors: []FactorRule{}, Factor: 1.5}
	for _, set := range []*Settings{&rule, &none} {
		if err := set.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		set  *Settings
		want int64
	}{
		{"defaults", defaults(t), ceil16(text) + DefaultImageTokens},
		{"a rule of 3, images 100", &rule, 3*text + 100},
		{"no rules, factor 1.5", &none, int64(math.Ceil(1.5*float64(text))) + DefaultImageTokens},
	} {
		if got := estimate(t, tc.set, &openai.Settings{}, msg); got.PromptTokens != tc.want {
			t.Errorf("%s: prompt %d, want %d", tc.name, got.PromptTokens, tc.want)
		}
	}

	compat := post("/v1/chat/completions", `{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"max_tokens":1}`)
	chat := func(image int64) int64 { // the chat rule's count, then the Messages overheads
		return ceil16(3 + int64(cl.CountString("user")) + image + 3 + anthropicBase + anthropicPerMessage - 3)
	}
	for _, tc := range []struct {
		name string
		chat openai.Settings
		want int64
	}{
		{"OpenAI's worst case", openai.Settings{}, chat(1445)},
		{"OpenAI's ImageTokens", openai.Settings{ImageTokens: 5}, chat(5)},
	} {
		if got := estimate(t, defaults(t), &tc.chat, compat); got.PromptTokens != tc.want || got.Reason != pricing.ReasonAnthropicEstimate {
			t.Errorf("compat image, %s: %+v, want prompt %d", tc.name, got, tc.want)
		}
	}
}
