package bucket

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestMemoryExpiry checks that idle buckets leave memory once they would be full again.
func TestMemoryExpiry(t *testing.T) {
	t.Parallel()
	clk := newClock(t0)
	m := NewMemory(MemoryOptions{Now: clk.Now})
	for i := range 1000 {
		take(t, m, &Request{Tag: "p", Buckets: []Spec{{Name: string(rune(i)), Limit: 10, Period: time.Minute, Cost: 1}}})
	}
	if n := len(m.buckets); n != 1000 {
		t.Fatalf("%d buckets stored, want 1000", n)
	}
	// Full again after 6 s, gone after the 1 s margin: sweeps driven by new traffic remove them.
	clk.Advance(7*time.Second + time.Microsecond)
	for range 100_000 {
		take(t, m, req(tokenBucket("busy", 1_000_000, time.Second, 1)))
		if len(m.buckets) == 1 {
			return
		}
	}
	t.Fatalf("%d buckets left after they expired", len(m.buckets))
}

// TestMemoryConcurrent checks atomicity of the Memory store under the race detector: 64 goroutines
// on a bucket that never refills admit exactly its capacity.
func TestMemoryConcurrent(t *testing.T) {
	t.Parallel()
	m := NewMemory(MemoryOptions{Now: newClock(t0).Now})
	spec := []Spec{tokenBucket("a", 1000, MaxPeriod, 1), slidingWindow("b", 5000, MaxPeriod, 1)}
	var mu sync.Mutex
	admitted := 0
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 50 {
				res, err := m.Take(context.Background(), &Request{Tag: "p", Buckets: spec})
				if err != nil {
					t.Error(err)
					return
				}
				if res.Outcome == Allowed {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if admitted != 1000 {
		t.Fatalf("admitted %d, want exactly 1000", admitted)
	}
}

func TestMemoryContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := NewMemory(MemoryOptions{})
	if _, err := m.Take(ctx, req(tokenBucket("a", 1, time.Second, 1))); err == nil {
		t.Error("Take with a cancelled context succeeded")
	}
	if err := m.Ping(ctx); err == nil {
		t.Error("Ping with a cancelled context succeeded")
	}
}

// TestCalendar checks the float calendar shared with bucket.lua against the time package, day by
// day from 1970 to 2255.
func TestCalendar(t *testing.T) {
	t.Parallel()
	for d := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() < 2256; d = d.AddDate(0, 0, 1) {
		days := float64(d.Unix() / 86400)
		y, m := civil(days)
		if int(y) != d.Year() || int(m) != int(d.Month()) {
			t.Fatalf("civil(%v) = %v-%v", d, y, m)
		}
		if d.Day() == 1 && firstDay(y, m) != days {
			t.Fatalf("firstDay(%v, %v) = %v, want %v", y, m, firstDay(y, m), days)
		}
		next := time.Date(d.Year(), d.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		if got := periodStart('m', periodOf('m', float64(d.UnixMicro()), 0)+1, 0); got != float64(next.UnixMicro()) {
			t.Fatalf("next month after %v: %v, want %v", d, got, next.UnixMicro())
		}
	}
}
