package openai

import (
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
	cl100k := encoding(tb, tiktoken.CL100K)
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, O200K: encoding(tb, tiktoken.O200K), Fallback: cl100k}
	var sc pricing.Scratch
	r := pricing.NewRequest(&cfg, &sc, pricing.Tokenize)
	if err := r.Doc.Parse([]byte(body)); err != nil {
		tb.Fatal(err)
	}
	r.Est = pricing.Estimate{Provider: provider.OpenAI, API: api, Model: model}
	Price(&r, 0, &Settings{})
	return r.Est
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
