package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"os"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// encoding is the named encoding.
func encoding(tb testing.TB, name string) *tiktoken.Encoding {
	tb.Helper()
	enc, err := tiktoken.Get(name)
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

// price prices body as a request of model to api with the default configuration, as
// tokens.Pricer hands it to this room.
func price(tb testing.TB, api provider.API, model, body string) pricing.Estimate {
	tb.Helper()
	return priceWith(tb, &Settings{}, api, model, body)
}

// priceWith is price with the family's settings set.
func priceWith(tb testing.TB, set *Settings, api provider.API, model, body string) pricing.Estimate {
	tb.Helper()
	cl100k := encoding(tb, tiktoken.CL100K)
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, O200K: encoding(tb, tiktoken.O200K), Fallback: cl100k}
	var sc pricing.Scratch
	r := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
	if err := r.Doc.Parse([]byte(body)); err != nil {
		tb.Fatal(err)
	}
	r.Est = pricing.Estimate{Provider: provider.OpenAI, API: api, Model: model}
	Price(&r, 0, set)
	return r.Est
}

// request is a body sent to one of the family's API paths.
type request struct {
	api  provider.API
	body string
}

// post is a request of body to path, whose API is recognised as API recognises it.
func post(path, body string) request { return request{API(path), body} }

// estimate prices r as tokens.Pricer does with the default configuration: the model is the
// body's, and the estimate is exact when the room records no reason.
func estimate(tb testing.TB, set *Settings, r request) pricing.Estimate {
	tb.Helper()
	var d pricing.Doc
	if err := d.Parse([]byte(r.body)); err != nil {
		tb.Fatal(err)
	}
	model, _ := d.Text(nil, d.Get(0, "model"))
	est := priceWith(tb, set, r.api, string(model), r.body)
	est.Exact = est.Reason == ""
	return est
}

// pngDataURL returns a data URL holding just a PNG signature and IHDR of the given size: all
// the pricer reads.
func pngDataURL(w, h int) string {
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR")
	b = binary.BigEndian.AppendUint32(b, uint32(w))
	b = binary.BigEndian.AppendUint32(b, uint32(h))
	b = append(b, 8, 6, 0, 0, 0, 0, 0, 0, 0)
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b)
}

// TestPrice prices each API's bodies by the family's rules (internal/tokens' TestEstimate covers
// what the Pricer does around them: recognition, reading the body, bounds, options).
func TestPrice(t *testing.T) {
	t.Parallel()
	cl, o2 := encoding(t, tiktoken.CL100K), encoding(t, tiktoken.O200K)
	cnt := func(e *tiktoken.Encoding, s string) int64 { return int64(e.CountString(s)) }
	hello := cnt(o2, "Hello")
	userMsg := 3 + 1 + hello + 3 // per message, "user", content, priming

	tests := []struct {
		name string
		in   request
		want pricing.Estimate
	}{
		{"chat name and escapes", post("/v1/chat/completions", `{"model":"gpt-4","messages":[{"role":"user","name":"bob","content":"line\nnext \u00e9\ud83d\ude00"}],"max_tokens":5}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4", PromptTokens: 3 + 1 + cnt(cl, "bob") + 1 + cnt(cl, "line\nnext é😀") + 3, OutputTokens: 5, Exact: true}},
		{"special tokens are text", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"<|endoftext|>"}],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o", PromptTokens: 3 + 1 + cnt(o2, "<|endoftext|>") + 3, OutputTokens: 1, Exact: true}},
		{"content parts and low image", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"Hello"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}}]}],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o", PromptTokens: userMsg + 85, OutputTokens: 1, Reason: pricing.ReasonContentParts}},
		{"image URL worst case", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o", PromptTokens: 3 + 1 + 3 + 1445, OutputTokens: 1, Reason: pricing.ReasonContentParts}},
		// OpenAI's published example: 2048x4096 at high detail is 1105 tokens; 1024x1024 is 765.
		{"image size from data URL", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+pngDataURL(2048, 4096)+`","detail":"high"}},{"type":"image_url","image_url":{"url":"`+pngDataURL(1024, 1024)+`"}}]}],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o", PromptTokens: 3 + 1 + 3 + 1105 + 765, OutputTokens: 1, Reason: pricing.ReasonContentParts}},
		{"tool calls and tool message", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o", PromptTokens: 3 + cnt(o2, "assistant") + perToolCall + cnt(o2, `{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}`) + 3 + cnt(o2, "tool") + cnt(o2, "c1") + cnt(o2, "42") + 3, OutputTokens: 1, Reason: pricing.ReasonTools}},
		{"response_format schema", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}},"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o", PromptTokens: userMsg + toolsOverhead + cnt(o2, `{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}`), OutputTokens: 1, Reason: pricing.ReasonTools}},
		{"unknown model uses fallback", post("/v1/chat/completions", `{"model":"llama-3-70b","messages":[{"role":"user","content":"Hello"}],"max_tokens":7}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "llama-3-70b", PromptTokens: 3 + 1 + cnt(cl, "Hello") + 3, OutputTokens: 7, Reason: pricing.ReasonUnknownModel}},
		{"completions string", post("/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":"Say this is a test","max_tokens":7,"n":2}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.Completions, Model: "gpt-3.5-turbo-instruct", PromptTokens: cnt(cl, "Say this is a test"), OutputTokens: 14, Exact: true}},
		{"completions array and default 16", post("/v1/completions", `{"model":"davinci-002","prompt":["a b","c"],"best_of":3}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.Completions, Model: "davinci-002", PromptTokens: cnt(cl, "a b") + cnt(cl, "c"), OutputTokens: 16 * 3 * 2, Exact: true}},
		{"completions token arrays", post("/v1/completions", `{"model":"davinci-002","prompt":[[1,2,3],[4]],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.Completions, Model: "davinci-002", PromptTokens: 4, OutputTokens: 2, Exact: true}},
		{"completions token array", post("/v1/completions", `{"model":"davinci-002","prompt":[1,2,3],"max_tokens":1}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.Completions, Model: "davinci-002", PromptTokens: 3, OutputTokens: 1, Exact: true}},
		{"embeddings", post("/v1/embeddings", `{"model":"text-embedding-3-small","input":["Hello","world"]}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.Embeddings, Model: "text-embedding-3-small", PromptTokens: cnt(cl, "Hello") + cnt(cl, "world"), Exact: true}},
		{"responses", post("/v1/responses", `{"model":"gpt-4.1","instructions":"Be brief.","input":"Hello","max_output_tokens":20}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.Responses, Model: "gpt-4.1", PromptTokens: 3 + 1 + cnt(o2, "Be brief.") + 3 + 1 + hello + 3, OutputTokens: 20, Reason: pricing.ReasonResponses}},
		{"responses items", post("/v1/responses", `{"model":"o3","input":[{"role":"user","content":[{"type":"input_text","text":"Hello"}]}]}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.Responses, Model: "o3", PromptTokens: 3 + 1 + hello + 3, OutputTokens: 4096, Reason: pricing.ReasonResponses}},
		{"wrong types", post("/v1/chat/completions", `{"model":"gpt-4o","messages":{"role":"user"},"max_tokens":"many"}`),
			pricing.Estimate{Provider: provider.OpenAI, API: provider.ChatCompletions, Model: "gpt-4o", PromptTokens: cnt(o2, `{"role":"user"}`) + 3, OutputTokens: 4096, Reason: pricing.ReasonWrongType}},
	}
	for _, tt := range tests {
		got := estimate(t, &Settings{}, tt.in)
		got.OutputUnset = false // internal/tokens' TestAccountingInputs
		if got != tt.want {
			t.Errorf("%s:\n got %+v\nwant %+v", tt.name, got, tt.want)
		}
	}
}

// TestImageTokens: an image of unknown size costs Settings.ImageTokens when it is set, on
// every API that takes images; a known size still costs the rule's.
func TestImageTokens(t *testing.T) {
	t.Parallel()
	set := Settings{ImageTokens: 500}
	if err := set.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		in    request
		image int64
	}{
		{"chat URL", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"max_tokens":1}`), 500},
		{"patch model URL", post("/v1/chat/completions", `{"model":"gpt-4.1-mini","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"max_tokens":1}`), 500},
		{"chat data URL", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+pngDataURL(1024, 1024)+`"}}]}],"max_tokens":1}`), 765},
		{"low detail", post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"low"}}]}],"max_tokens":1}`), 85},
	} {
		got := estimate(t, &set, tc.in)
		if want := 3 + 1 + 3 + tc.image; got.PromptTokens != want {
			t.Errorf("%s: prompt %d, want %d", tc.name, got.PromptTokens, want)
		}
	}
	in := post("/v1/responses", `{"model":"gpt-4o","input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/y.png"}]}],"max_output_tokens":1}`)
	if with, without := estimate(t, &set, in), estimate(t, &Settings{}, in); without.PromptTokens-with.PromptTokens != 1445-500 {
		t.Errorf("Responses image: %d with the setting, %d without, want 1445-500 apart", with.PromptTokens, without.PromptTokens)
	}
}

func mustJSON(tb testing.TB, v any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

type cookbook struct {
	Messages          []map[string]string `json:"messages"`
	MessagesPrompt    map[string]int64    `json:"messages_prompt_tokens"`
	Tools             []any               `json:"tools"`
	ToolsMessages     []map[string]string `json:"tools_messages"`
	ToolsPromptTokens map[string]int64    `json:"tools_prompt_tokens"`
}

func readCookbook(tb testing.TB) cookbook {
	tb.Helper()
	b, err := os.ReadFile("testdata/openai_cookbook.json")
	if err != nil {
		tb.Fatal(err)
	}
	var c cookbook
	if err := json.Unmarshal(b, &c); err != nil {
		tb.Fatal(err)
	}
	return c
}

// TestChatCookbook: the chat rule gives exactly the totals OpenAI's cookbook publishes.
func TestChatCookbook(t *testing.T) {
	t.Parallel()
	c := readCookbook(t)
	for model, want := range c.MessagesPrompt {
		body := mustJSON(t, map[string]any{"model": model, "messages": c.Messages, "max_tokens": 10})
		got := price(t, provider.ChatCompletions, model, body)
		if got.PromptTokens != want || got.Reason != "" || got.OutputTokens != 10 {
			t.Errorf("%s: %+v, want prompt %d exact, output 10", model, got, want)
		}
	}
}

// TestToolsCookbook: tool definitions are priced exactly at the cookbook's published counts,
// which the API reported there.
func TestToolsCookbook(t *testing.T) {
	t.Parallel()
	c := readCookbook(t)
	for model, want := range c.ToolsPromptTokens {
		body := mustJSON(t, map[string]any{"model": model, "messages": c.ToolsMessages, "tools": c.Tools})
		got := price(t, provider.ChatCompletions, model, body)
		if got.PromptTokens != want || got.Reason != "" {
			t.Errorf("%s: %+v, want prompt %d exact", model, got, want)
		}
	}
}
