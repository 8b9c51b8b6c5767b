package filter

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

const cachedLimits = `
rules:
  - name: claude
    match: {provider: anthropic}
    per: [model]
    input_tokens: {limit: 100000, period: minute}
    output_tokens: {limit: 8000, period: minute}
`

// cached is a Messages body whose system prompt (about 5,000 tokens as priced) is marked for
// Anthropic's prompt cache, and whose question is q.
func cached(t *testing.T, model, q string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"model": model, "max_tokens": 50,
		"system":   []any{map[string]any{"type": "text", "text": strings.Repeat("Rules of the house, one by one. ", 450), "cache_control": map[string]any{"type": "ephemeral"}}},
		"messages": []any{map[string]any{"role": "user", "content": q}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// inputCost is what an allowed request reserved of its rule's input_tokens, and its prompt.
func inputCost(t *testing.T, e *env, body string) (reserved, prompt int64) {
	t.Helper()
	resp := e.answer(t, context.Background(), messages(body)).Response()
	if d := decisionOf(resp); d != decisionAllowed {
		t.Fatalf("decision %q", d)
	}
	md := resp.GetDynamicMetadata().GetFields()
	r, err := reservation.Decode(md["reservation"].GetStringValue())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range r.Buckets {
		if b.Kind == reservation.KindInput {
			return b.Spec.Cost, r.Prompt
		}
	}
	t.Fatalf("no input bucket in %+v", r)
	return 0, 0
}

// A prefix an admitted request sent is expected to be read from the provider's cache once its
// warm-up has passed: where cache reads are free (Anthropic's ITPM) admission does not reserve
// it; the first sending, the warm-up and a model that counts cache reads reserve it whole.
func TestPromptCacheExpected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, cachedLimits, Options{})
	const model = "claude-sonnet-4-5"
	first, prompt := inputCost(t, e, cached(t, model, "first"))
	if first != prompt {
		t.Fatalf("first sending reserved %d of a %d-token prompt", first, prompt)
	}
	e.clock.Add(time.Second) // within the 2 s warm-up: the first response may not have begun
	if got, p := inputCost(t, e, cached(t, model, "second")); got != p {
		t.Errorf("within the warm-up: reserved %d of %d", got, p)
	}
	e.clock.Add(2 * time.Second)
	got, p := inputCost(t, e, cached(t, model, "third, a longer question"))
	if got >= p/4 || got <= 0 {
		t.Errorf("after the warm-up: reserved %d of a %d-token prompt, want only the uncached part", got, p)
	}
	// Claude 3 Haiku counts cache reads toward ITPM: reserved whole.
	const haiku = "claude-3-haiku-20240307"
	inputCost(t, e, cached(t, haiku, "first"))
	e.clock.Add(3 * time.Second)
	if got, p := inputCost(t, e, cached(t, haiku, "second")); got != p {
		t.Errorf("haiku 3: reserved %d of %d", got, p)
	}
	// Five minutes after its last use the provider has dropped it.
	e.clock.Add(5 * time.Minute)
	if got, p := inputCost(t, e, cached(t, model, "later")); got != p {
		t.Errorf("expired: reserved %d of %d", got, p)
	}
}

// A denied request sent nothing: its prefix is not taken as written.
func TestPromptCacheDeniedSendsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
rules:
  - name: claude
    match: {provider: anthropic}
    input_tokens: {limit: 1000, period: minute}
`, Options{})
	body := cached(t, "claude-sonnet-4-5", "q")
	resp := e.answer(t, context.Background(), messages(body)).Response()
	if d := decisionOf(resp); d != decisionTooLarge {
		t.Fatalf("decision %q", d)
	}
	if n := e.f.prompts.Len(); n != 0 {
		t.Errorf("%d prefixes remembered after a refusal", n)
	}
}
