package anthropic

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// price prices a Messages body of model as tokens.Pricer hands it to this room, counting as c.
func price(tb testing.TB, model, body string, c pricing.Counting) pricing.Estimate {
	tb.Helper()
	cl100k, err := tiktoken.Get(tiktoken.CL100K)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := pricing.Config{DefaultOutputTokens: 4096, CL100K: cl100k, O200K: cl100k, Fallback: cl100k}
	set := Settings{Factors: []FactorRule{{Model: "claude-sonnet-4-*", Factor: 1.6}}, Factor: 2, ImageTokens: 1600}
	if err := set.Validate(); err != nil {
		tb.Fatal(err)
	}
	var sc pricing.Scratch
	r := pricing.NewRequest(&cfg, &sc, c)
	if err := r.Doc.Parse([]byte(body)); err != nil {
		tb.Fatal(err)
	}
	r.Est = pricing.Estimate{Provider: provider.Anthropic, API: provider.Messages, Model: model}
	Price(&r, 0, &set, &openai.Settings{})
	return r.Est
}

func body(tb testing.TB, v map[string]any) string {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

var (
	long    = strings.Repeat("The quick brown fox jumps over the lazy dog. ", 300) // ~3,000 tokens
	longToo = strings.Repeat("A different book of the same length, page after page. ", 260)
	marker  = map[string]any{"type": "ephemeral"}
)

func system(text string, cc map[string]any) []any {
	b := map[string]any{"type": "text", "text": text}
	if cc != nil {
		b["cache_control"] = cc
	}
	return []any{map[string]any{"type": "text", "text": "You are terse."}, b}
}

func user(text string) []any { return []any{map[string]any{"role": "user", "content": text}} }

func TestCachePoints(t *testing.T) {
	t.Parallel()
	const model = "claude-sonnet-4-5"
	a := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "system": system(long, marker), "messages": user("one")}), pricing.Tokenize)
	if a.NCache != 1 {
		t.Fatalf("%d cache points, want 1: %+v", a.NCache, a.CachePoints)
	}
	p := a.CachePoints[0]
	if p.TTL != 5*time.Minute || p.Tokens <= 0 || p.Tokens >= a.PromptTokens {
		t.Fatalf("point %+v of a prompt of %d", p, a.PromptTokens)
	}
	// The prefix is the system prompt: another question shares it, another system does not.
	b := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "system": system(long, marker), "messages": user("another, longer question")}), pricing.Tokenize)
	if b.NCache != 1 || b.CachePoints[0] != p {
		t.Errorf("same system: %+v, want %+v", b.CachePoints[0], p)
	}
	c := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "system": system(longToo, marker), "messages": user("one")}), pricing.Tokenize)
	if c.NCache != 1 || c.CachePoints[0].Key == p.Key {
		t.Errorf("another system has the same key: %+v", c.CachePoints[:c.NCache])
	}
	// Another model has its own cache.
	d := price(t, "claude-sonnet-4-0", body(t, map[string]any{"model": "claude-sonnet-4-0", "max_tokens": 10, "system": system(long, marker), "messages": user("one")}), pricing.Tokenize)
	if d.NCache != 1 || d.CachePoints[0].Key == p.Key {
		t.Errorf("another model has the same key: %+v", d.CachePoints[:d.NCache])
	}
	// A second breakpoint later in the conversation: the system's prefix keeps its key, the
	// longer one follows it.
	conv := []any{
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "one", "cache_control": marker}}},
		map[string]any{"role": "assistant", "content": "two"},
		map[string]any{"role": "user", "content": "three"},
	}
	e := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "system": system(long, marker), "messages": conv}), pricing.Tokenize)
	if e.NCache != 2 || e.CachePoints[0] != p || e.CachePoints[1].Tokens <= p.Tokens {
		t.Errorf("two breakpoints: %+v, first want %+v", e.CachePoints[:e.NCache], p)
	}
	// An hour's lifetime.
	f := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "system": system(long, map[string]any{"type": "ephemeral", "ttl": "1h"}), "messages": user("one")}), pricing.Tokenize)
	if f.NCache != 1 || f.CachePoints[0].TTL != time.Hour || f.CachePoints[0].Key != p.Key {
		t.Errorf("1h: %+v", f.CachePoints[:f.NCache])
	}
	// Pricing is unchanged by the markers.
	plain := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "system": system(long, nil), "messages": user("one")}), pricing.Tokenize)
	if plain.NCache != 0 || plain.PromptTokens != a.PromptTokens {
		t.Errorf("unmarked: %d points, prompt %d, marked prompt %d", plain.NCache, plain.PromptTokens, a.PromptTokens)
	}
}

func TestCachePointsNotRecorded(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		model string
		body  map[string]any
		c     pricing.Counting
	}{
		// Under the model's minimum (1024 tokens), counted before the factor.
		"short prefix": {"claude-sonnet-4-5", map[string]any{"system": system(strings.Repeat("word ", 600), marker)}, pricing.Tokenize},
		// 2,048 for Sonnet 4.6: a ~1,500-token prefix is not cached.
		"model's minimum": {"claude-sonnet-4-6", map[string]any{"system": system(strings.Repeat("word ", 1500), marker)}, pricing.Tokenize},
		// Counted by length (a body priced at its bound): no prefix is known.
		"bound": {"claude-sonnet-4-5", map[string]any{"system": system(long, marker)}, pricing.ByLength},
		// Not an ephemeral marker.
		"other type":    {"claude-sonnet-4-5", map[string]any{"system": system(long, map[string]any{"type": "persistent"})}, pricing.Tokenize},
		"not an object": {"claude-sonnet-4-5", map[string]any{"system": []any{map[string]any{"type": "text", "text": long, "cache_control": "ephemeral"}}}, pricing.Tokenize},
	} {
		tc.body["model"], tc.body["max_tokens"], tc.body["messages"] = tc.model, 10, user("q")
		if e := price(t, tc.model, body(t, tc.body), tc.c); e.NCache != 0 {
			t.Errorf("%s: %+v", name, e.CachePoints[:e.NCache])
		}
	}
}

func TestCachePointsToolsAndAutomatic(t *testing.T) {
	t.Parallel()
	const model = "claude-opus-4-1"
	tool := func(name string, cc map[string]any) map[string]any {
		t := map[string]any{"name": name, "description": long, "input_schema": map[string]any{"type": "object"}}
		if cc != nil {
			t["cache_control"] = cc
		}
		return t
	}
	last := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "messages": user("q"),
		"tools": []any{tool("a", nil), tool("b", marker)}}), pricing.Tokenize)
	if last.NCache != 1 {
		t.Fatalf("last tool marked: %d points", last.NCache)
	}
	// A marker on an earlier tool is not recorded: the tools are counted whole.
	if e := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "messages": user("q"),
		"tools": []any{tool("a", marker), tool("b", nil)}}), pricing.Tokenize); e.NCache != 0 {
		t.Errorf("earlier tool marked: %+v", e.CachePoints[:e.NCache])
	}
	// The tools come first in the prefix: a system breakpoint after them is longer.
	both := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "messages": user("q"),
		"tools": []any{tool("a", nil), tool("b", marker)}, "system": system(long, marker)}), pricing.Tokenize)
	if both.NCache != 2 || both.CachePoints[0] != last.CachePoints[0] || both.CachePoints[1].Tokens <= last.CachePoints[0].Tokens {
		t.Errorf("tools then system: %+v", both.CachePoints[:both.NCache])
	}
	// Automatic caching (a top-level marker): the whole prompt but its wrapper, which is left to
	// the uncached part.
	auto := price(t, model, body(t, map[string]any{"model": model, "max_tokens": 10, "system": system(long, nil), "messages": user("q"), "cache_control": marker}), pricing.Tokenize)
	if auto.NCache != 1 || auto.PromptTokens-auto.CachePoints[0].Tokens < anthropicBase {
		t.Errorf("automatic: %+v, prompt %d", auto.CachePoints[:auto.NCache], auto.PromptTokens)
	}
}
