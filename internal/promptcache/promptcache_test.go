package promptcache

import (
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

func est(points ...pricing.CachePoint) *pricing.Estimate {
	e := &pricing.Estimate{PromptTokens: 10_000}
	e.NCache = copy(e.CachePoints[:], points)
	return e
}

var (
	t0    = time.Unix(1_700_000_000, 0)
	short = pricing.CachePoint{Key: 1, Tokens: 2000, TTL: 5 * time.Minute}
	long  = pricing.CachePoint{Key: 2, Tokens: 5000, TTL: 5 * time.Minute}
)

func expect(m *Memory, e *pricing.Estimate, at time.Time) int64 {
	m.Expect(e, at)
	return e.CacheRead
}

func TestExpect(t *testing.T) {
	t.Parallel()
	m := New(Options{Warmup: time.Second})
	e := est(short, long)
	if got := expect(m, e, t0); got != 0 {
		t.Fatalf("never sent: %d", got)
	}
	m.Sent(est(short), t0)
	// Not readable before the warm-up: the first response has not begun.
	if got := expect(m, e, t0.Add(500*time.Millisecond)); got != 0 {
		t.Errorf("within the warm-up: %d", got)
	}
	if got := expect(m, e, t0.Add(time.Second)); got != short.Tokens {
		t.Errorf("after it: %d, want %d", got, short.Tokens)
	}
	// The longest prefix held wins.
	m.Sent(e, t0.Add(time.Second))
	if got := expect(m, e, t0.Add(3*time.Second)); got != long.Tokens {
		t.Errorf("both held: %d, want %d", got, long.Tokens)
	}
	// Each use renews the lifetime; after it, the prefix is written again and warms up anew.
	m.Sent(est(short), t0.Add(4*time.Minute))
	at := t0.Add(4*time.Minute + 4*time.Minute + 59*time.Second)
	if got := expect(m, est(short), at); got != short.Tokens {
		t.Errorf("renewed: %d", got)
	}
	if got := expect(m, est(long), at); got != 0 {
		t.Errorf("long expired at %v: %d", at.Sub(t0), got)
	}
	m.Sent(est(long), at)
	if got := expect(m, est(long), at.Add(500*time.Millisecond)); got != 0 {
		t.Errorf("rewritten, within the warm-up: %d", got)
	}
	// A read is never more than the prompt.
	big := est(pricing.CachePoint{Key: 1, Tokens: 1 << 40})
	if got := expect(m, big, at); got != big.PromptTokens {
		t.Errorf("capped: %d", got)
	}
}

func TestBounded(t *testing.T) {
	t.Parallel()
	m := New(Options{Entries: shards, Warmup: -1}) // one prefix per shard
	a := pricing.CachePoint{Key: 7, Tokens: 100, TTL: time.Minute}
	b := pricing.CachePoint{Key: 7 + shards, Tokens: 200, TTL: time.Minute} // the same shard
	m.Sent(est(a), t0)
	m.Sent(est(b), t0)
	if m.Len() != 1 {
		t.Fatalf("%d entries", m.Len())
	}
	// Full of live prefixes: b is expected to be written.
	if got := expect(m, est(b), t0); got != 0 {
		t.Errorf("b: %d", got)
	}
	if got := expect(m, est(a), t0); got != a.Tokens {
		t.Errorf("a: %d", got)
	}
	// Once a expires, b takes its place.
	m.Sent(est(b), t0.Add(time.Minute))
	if got := expect(m, est(b), t0.Add(time.Minute)); got != b.Tokens || m.Len() != 1 {
		t.Errorf("b after a expired: %d, %d entries", got, m.Len())
	}
}

func BenchmarkExpectSent(b *testing.B) {
	m := New(Options{})
	e := est(short, long)
	now := t0
	for b.Loop() {
		m.Expect(e, now)
		m.Sent(e, now)
	}
}
