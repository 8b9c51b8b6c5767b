package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestAnthropicAccounting(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	a := &Anthropic{RPM: 100, ITPM: 10000, OTPM: 2000, CacheMin: 1024, CacheTTL: 5 * time.Minute, Period: time.Minute}
	req := func(model string, prompt, prefix, out int64) *Price {
		p := &Price{Model: model, Prompt: prompt, Output: out}
		if prefix > 0 {
			p.CacheKey, p.CachePrefix = "k-"+model, prefix
		}
		return p
	}
	// The first request writes the 3000-token prefix: ITPM counts 1000 + 3000.
	v := a.Admit(req("claude-sonnet-4-5", 4000, 3000, 500), now)
	if c := v.Charge; !v.Admitted || c.Input != 1000 || c.CacheWrite != 3000 || c.CacheRead != 0 || c.ITPM != 4000 || c.OTPM != 500 {
		t.Fatalf("write: %+v", v)
	}
	// The second reads it: ITPM counts only the 1000 uncached.
	v = a.Admit(req("claude-sonnet-4-5", 4000, 3000, 500), now)
	if c := v.Charge; !v.Admitted || c.CacheRead != 3000 || c.CacheWrite != 0 || c.ITPM != 1000 {
		t.Fatalf("read: %+v", v)
	}
	// Claude Haiku 3.5 counts its cache reads.
	a.Admit(req("claude-3-5-haiku-latest", 4000, 3000, 10), now)
	if v = a.Admit(req("claude-3-5-haiku-latest", 4000, 3000, 10), now); v.Charge.ITPM != 4000 || v.Charge.CacheRead != 3000 {
		t.Fatalf("haiku read: %+v", v)
	}
	// Under the minimum nothing is cached.
	if v = a.Admit(req("claude-opus-4-1", 1500, 1000, 10), now); v.Charge.CacheWrite != 0 || v.Charge.ITPM != 1500 {
		t.Fatalf("short prefix: %+v", v)
	}
	// After the TTL the prefix is written again.
	if v = a.Admit(req("claude-sonnet-4-5", 4000, 3000, 10), now.Add(6*time.Minute)); v.Charge.CacheWrite != 3000 {
		t.Fatalf("expired: %+v", v)
	}
	// OTPM: 2000 a minute, 500 + 500 + 10 reserved at admission on sonnet; a 1000 max_tokens
	// request does not fit until the output is adjusted to what was generated.
	b := &Anthropic{OTPM: 2000, ITPM: 1_000_000, CacheMin: 1024, CacheTTL: time.Minute, Period: time.Minute}
	b.Admit(req("m", 10, 0, 1500), now)
	if v = b.Admit(req("m", 10, 0, 1000), now); v.Admitted || v.Which != "output_tokens" || v.Wait <= 0 {
		t.Fatalf("OTPM full: %+v", v)
	}
	b.Settle("m", 1500, 16, now)
	if v = b.Admit(req("m", 10, 0, 1000), now); !v.Admitted {
		t.Fatalf("OTPM after the adjustment: %+v", v)
	}
	// ITPM refuses with its own name; a request above a limit can never fit.
	if v = b.Admit(req("m", 2_000_000, 0, 1), now); !v.TooLarge || v.Which != "input_tokens" {
		t.Fatalf("too large: %+v", v)
	}
	// Remaining token counts are rounded to the nearest thousand, requests are not, resets are
	// RFC 3339 instants.
	h := http.Header{}
	v = a.Admit(req("claude-x", 2600, 0, 700), now)
	v.headers(h, now)
	for k, want := range map[string]string{
		"anthropic-ratelimit-input-tokens-remaining":  "7000", // 7400
		"anthropic-ratelimit-output-tokens-remaining": "1000", // 1300
		"anthropic-ratelimit-requests-remaining":      "99",
		"anthropic-ratelimit-input-tokens-limit":      "10000",
	} {
		if got := h.Get(k); got != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if _, err := time.Parse(time.RFC3339, h.Get("anthropic-ratelimit-output-tokens-reset")); err != nil {
		t.Errorf("reset: %v", err)
	}
}

func TestSystemPrefix(t *testing.T) {
	t.Parallel()
	sys := `[{"type":"text","text":"A"},{"type":"text","text":"B","cache_control":{"type":"ephemeral"}},{"type":"text","text":"C"}]`
	texts, key := systemPrefix("m", []byte(sys))
	if len(texts) != 2 || texts[1] != "B" || key == "" {
		t.Fatalf("prefix %q %q", texts, key)
	}
	if _, other := systemPrefix("m2", []byte(sys)); other == key {
		t.Error("the key does not name the model")
	}
	if _, k := systemPrefix("m", []byte(`"plain"`)); k != "" {
		t.Error("a string system prompt has a prefix")
	}
	if _, k := systemPrefix("m", []byte(`[{"type":"text","text":"A"}]`)); k != "" {
		t.Error("blocks without cache_control have a prefix")
	}
}

func TestAnthropicSpendCap(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	a := &Anthropic{ITPM: 100_000, OTPM: 100_000, CacheMin: 1024, CacheTTL: time.Minute, Period: time.Minute, SpendCap: 1000}
	if v := a.Admit(&Price{Model: "m", Prompt: 600, Output: 500}, now); !v.Admitted {
		t.Fatalf("under the cap: %+v", v)
	}
	v := a.Admit(&Price{Model: "m", Prompt: 1, Output: 1}, now)
	if v.Admitted || v.Which != "spend_cap" || v.Wait != 0 || v.TooLarge {
		t.Fatalf("past the cap: %+v", v)
	}
}

// OpenAI's character rule: the larger of max_tokens and the request's characters / 4.
func TestOpenAICountingMaxOfChars(t *testing.T) {
	t.Parallel()
	var rec bytes.Buffer
	srv := &Server{Pricer: testPricer, Recorder: NewRecorder(TokenBucket, &rec), CompletionTokens: 3, Now: time.Now, CountChars: true,
		Enforcer: NewEnforcer(TokenBucket, time.Minute, map[string]Limits{"openai": {Tokens: 1_000_000}}, time.Now)}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	long := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("é", 400) + `"}],"max_tokens":10}`
	short := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}],"max_tokens":500}`
	for _, b := range []string{long, short} {
		if resp, body := post(t, ts.URL+"/v1/chat/completions", b); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	rs := records(t, &rec)
	if want := int64((utf8.RuneCountInString(long) + 3) / 4); rs[0].Cost != want {
		t.Errorf("long prompt: cost %d, want %d (characters / 4)", rs[0].Cost, want)
	}
	if rs[1].Cost != 500 {
		t.Errorf("short prompt: cost %d, want max_tokens 500", rs[1].Cost)
	}
}
