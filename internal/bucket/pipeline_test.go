package bucket

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// TestConformancePipelined runs the conformance suite against the Redis stores with coalescing
// on: a pipelined decision must behave exactly like a lone one.
func TestConformancePipelined(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t)
	for name, url := range map[string]string{"redis": srv.URL(), "cluster": cl.URL()} {
		c, err := NewClient(url, ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range conformance {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					clk := newClock(t0)
					tc.run(t, newFakeTimeRedis(c, RedisOptions{Prefix: uniquePrefix(), MaxBatch: 8}, clk.Now), clk)
				})
			}
		})
	}
}

// TestPipelineCoalescesAndReloads sends concurrent decisions after the server lost its script
// cache: every decision is applied exactly once (NOSCRIPT calls did not run, EVAL runs them).
func TestPipelineCoalescesAndReloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	c := srv.Client()
	s := NewRedis(c, RedisOptions{Prefix: uniquePrefix(), MaxBatch: 16, MaxInFlight: 1})
	const workers, rounds = 32, 20
	for round := range rounds {
		if round%5 == 0 {
			srv.Do(ctx, "SCRIPT", "FLUSH")
		}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				res, err := s.Take(ctx, &Request{Tag: "p", Buckets: []Spec{{Name: "n", Algorithm: Quota, Calendar: Month, Limit: 1e9, Cost: 1}}})
				if err == nil && res.Outcome != Allowed {
					t.Errorf("take: %+v", res)
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// The quota's level counts every applied decision exactly once.
	res, err := s.Take(ctx, &Request{Tag: "p", Buckets: []Spec{{Name: "n", Algorithm: Quota, Calendar: Month, Limit: 1e9, Cost: 0}}})
	if err != nil {
		t.Fatal(err)
	}
	if used := 1e9 - res.Buckets[0].Remaining; used != workers*rounds {
		t.Errorf("%d decisions applied, want %d", used, workers*rounds)
	}
	stats := c.Info(ctx, "commandstats").Val()
	calls := func(cmd string) string {
		for line := range strings.SplitSeq(stats, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
				n, _, _ := strings.Cut(rest, ",")
				return n
			}
		}
		return "0"
	}
	t.Logf("evalsha %s, eval %s for %d decisions", calls("evalsha"), calls("eval"), workers*rounds+1)
	if calls("eval") == "0" {
		t.Error("no EVAL: the NOSCRIPT path was not exercised")
	}
}

// TestPipelineCanceled checks that a call whose context has ended is never sent.
func TestPipelineCanceled(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	s := NewRedis(srv.Client(), RedisOptions{Prefix: uniquePrefix(), MaxBatch: 16})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	spec := Spec{Name: "n", Algorithm: Quota, Calendar: Month, Limit: 10, Cost: 1}
	if _, err := s.Take(ctx, &Request{Tag: "p", Buckets: []Spec{spec}}); err == nil {
		t.Fatal("canceled take: no error")
	}
	spec.Cost = 0
	res, err := s.Take(context.Background(), &Request{Tag: "p", Buckets: []Spec{spec}})
	if err != nil || res.Buckets[0].Remaining != 10 {
		t.Fatalf("after a canceled take: %+v, %v; want the quota untouched", res, err)
	}
}
