package filter

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The gauge reports, per rule, kind and window, the lowest level decisions left in any of the
// rule's buckets (each tenant's) over the last complete interval: not before the interval
// ends, the same to every scrape, gone once the rule has seen no decision for two intervals.
func TestBucketLevelGauge(t *testing.T) {
	t.Parallel()
	const limits = `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: per-tenant
    per: [tenant]
    requests: {limit: 10, period: hour}
`
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e := newEnv(t, limits, Options{Metrics: m})
	m.levels.now = e.clock.Now
	// Start at the beginning of an interval, so that the decisions below share it.
	start := e.clock.Now().Truncate(levelInterval).Add(levelInterval)
	set := func(t time.Time) { e.clock.Add(t.Sub(e.clock.Now())) }
	set(start)
	send := func(tenant string, n int) {
		for range n {
			req := loadRequest(t, "chat")
			req.Attributes.Request.Http.Headers["x-tenant-id"] = tenant
			if d := decision(e.answer(t, t.Context(), req).Response()); d != decisionAllowed {
				t.Fatalf("decision %q", d)
			}
		}
	}
	send("team-a", 3) // team-a's bucket: 7 of 10
	send("team-b", 6) // team-b's: 4 of 10, the lowest
	if got := samples(t, reg, "llm_ratelimit_bucket_level_ratio"); len(got) != 0 {
		t.Fatalf("gauge before the interval ended: %v", got)
	}
	set(start.Add(levelInterval))
	send("team-a", 1) // the next interval's: team-a at 6 of 10
	want := map[string]float64{"kind=requests,rule=per-tenant,window=0": 0.4}
	for range 2 {
		if got := samples(t, reg, "llm_ratelimit_bucket_level_ratio"); !equalSamples(got, want) {
			t.Fatalf("gauge = %v, want %v", got, want)
		}
	}
	set(start.Add(2 * levelInterval))
	want["kind=requests,rule=per-tenant,window=0"] = 0.6
	if got := samples(t, reg, "llm_ratelimit_bucket_level_ratio"); !equalSamples(got, want) {
		t.Fatalf("gauge = %v, want %v", got, want)
	}
	set(start.Add(3 * levelInterval))
	if got := samples(t, reg, "llm_ratelimit_bucket_level_ratio"); len(got) != 0 {
		t.Fatalf("gauge of an interval without decisions: %v", got)
	}
	set(start.Add(5 * levelInterval))
	_ = samples(t, reg, "llm_ratelimit_bucket_level_ratio")
	m.levels.mu.RLock()
	n := len(m.levels.slots)
	m.levels.mu.RUnlock()
	if n != 0 {
		t.Errorf("%d idle slots kept", n)
	}
}

// A level is clamped to [0, 1]: a bucket in debt reads 0, and a late decision of an interval
// already done changes nothing.
func TestLevelSlotBounds(t *testing.T) {
	t.Parallel()
	l := newLevels()
	at := time.Unix(1000*int64(levelInterval/time.Second), 0)
	l.now = func() time.Time { return at.Add(levelInterval) }
	k := levelKey{rule: "r", kind: 'r'}
	l.observe(k, at, -5, 10)
	l.observe(k, at, 20, 10)
	l.observe(k, at.Add(levelInterval), 1, 10)
	l.observe(k, at, 9, 0) // no capacity: ignored
	s := l.slots[k]
	if ppm, ok := s.last(interval(at.Add(levelInterval))); !ok || ppm != 0 {
		t.Errorf("level = %d, %v; want 0 (in debt)", ppm, ok)
	}
	l.observe(k, at, 0, 10) // late: its interval was rotated out
	if ppm, _ := s.last(interval(at.Add(2 * levelInterval))); ppm != 1e5 {
		t.Errorf("current interval's level = %d, want 100000", ppm)
	}
}

// Recording a level, the request path's part of the gauge: no allocation once the slot exists.
func BenchmarkLevelsObserve(b *testing.B) {
	l := newLevels()
	k := levelKey{rule: "openai-per-model", kind: 't'}
	at := time.Now()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int64(0)
		for pb.Next() {
			i++
			l.observe(k, at, i%1000, 1000)
		}
	})
}
