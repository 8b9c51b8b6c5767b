package bucket

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redisstats"
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

// TestPipelineCoalescesAndReloads sends concurrent decisions while the server keeps losing its
// functions and scripts, with the function library and with the script alone: every decision is
// applied exactly once (a refused FCALL or EVALSHA did not run; EVAL runs it, and the library is
// loaded again).
func TestPipelineCoalescesAndReloads(t *testing.T) {
	t.Parallel()
	for _, scripts := range []bool{false, true} {
		name := map[bool]string{false: "function", true: "script"}[scripts]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			srv := redistest.StartServer(t)
			c := srv.Client()
			s := NewRedis(c, RedisOptions{Prefix: uniquePrefix(), MaxBatch: 16, MaxInFlight: 1})
			s.lib = newLibrary("", luaSource, "")
			s.lib.scriptsOnly.Store(scripts)
			const workers, rounds = 32, 20
			tags := []string{"p", "q", "r", "s"} // a batch holds a run of each, all refused after a flush
			for round := range rounds {
				if round%5 == 0 {
					srv.Do(ctx, "SCRIPT", "FLUSH")
					srv.Do(ctx, "FUNCTION", "FLUSH")
				}
				var wg sync.WaitGroup
				errs := make(chan error, workers)
				for w := range workers {
					wg.Go(func() {
						res, err := s.Take(ctx, &Request{Tag: tags[w%len(tags)], Buckets: []Spec{{Name: "n", Algorithm: Quota, Calendar: Month, Limit: 1e9, Cost: 1}}})
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
			// The quotas' levels count every applied decision exactly once.
			used := int64(0)
			for _, tag := range tags {
				res, err := s.Take(ctx, &Request{Tag: tag, Buckets: []Spec{{Name: "n", Algorithm: Quota, Calendar: Month, Limit: 1e9, Cost: 0}}})
				if err != nil {
					t.Fatal(err)
				}
				used += 1e9 - res.Buckets[0].Remaining
			}
			if used != workers*rounds {
				t.Errorf("%d decisions applied, want %d", used, workers*rounds)
			}
			runs, err := redisstats.Calls(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("fcall %d, function|load %d, evalsha %d, eval %d for %d decisions", runs["fcall"], runs["function|load"], runs["evalsha"], runs["eval"], workers*rounds+len(tags))
			if runs["eval"] == 0 {
				t.Error("no EVAL: the reload path was not exercised")
			}
			if scripts && runs["fcall"] != 0 {
				t.Errorf("%d FCALL with scripts only", runs["fcall"])
			}
			// One load after each of the 4 flushes, however many of a batch's runs were refused.
			if !scripts && (runs["fcall"] == 0 || runs["function|load"] != 4) {
				t.Errorf("%d FCALL, %d FUNCTION LOAD: the library was not called, or not loaded once after each flush", runs["fcall"], runs["function|load"])
			}
			if s.lib.scriptsOnly.Load() != scripts {
				t.Errorf("scripts only %v, want %v", !scripts, scripts)
			}
		})
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

// TestScriptDecidesCallsApart runs one run of three calls by hand, as the function and as the
// script: a call whose key has another type fails alone, the calls around it are decided and
// applied, and arguments that do not account for the keys fail the whole run.
func TestScriptDecidesCallsApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	c := srv.Client()
	s := NewRedis(c, RedisOptions{Prefix: uniquePrefix()})
	tb := tokenBucket("tpm", 1000, time.Minute, 100)
	sw := slidingWindow("rpm", 10, time.Minute, 1)
	day := quota("day", 1000, Day, 7)
	key := func(spec Spec) string { return s.keys("p", 1, func(int) *Spec { return &spec })[0] }
	arg := func(spec Spec) string {
		return string(appendTake(nil, req(spec), 1, time.Time{}))
	}
	if err := c.Set(ctx, key(sw), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.FunctionLoad(ctx, lib.code).Err(); err != nil {
		t.Fatal(err)
	}
	// The function, then the script: each run leaves 100 fewer tokens and 7 fewer in the quota.
	for i, form := range []struct {
		name string
		run  func(keys []string, args ...any) *redis.Cmd
	}{
		{"function", func(keys []string, args ...any) *redis.Cmd { return c.FCall(ctx, lib.name, keys, args...) }},
		{"script", func(keys []string, args ...any) *redis.Cmd { return lib.script.Run(ctx, c, keys, args...) }},
	} {
		v, err := form.run([]string{key(tb), key(sw), key(day)}, arg(tb), arg(sw), arg(day)).Result()
		if err != nil {
			t.Fatalf("%s: run: %v", form.name, err)
		}
		replies, ok := v.([]any)
		if !ok || len(replies) != 3 {
			t.Fatalf("%s: reply %#v, want 3 replies", form.name, v)
		}
		if _, err := callReply(replies[1]); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Errorf("%s: the call on a string key: %v, want its WRONGTYPE error", form.name, err)
		}
		tokens, used := int64(900-100*i), int64(993-7*i)
		for c, want := range map[int]int64{0: tokens, 2: used} {
			r, err := callReply(replies[c])
			if err != nil {
				t.Fatalf("%s: call %d: %v", form.name, c, err)
			}
			if res, err := parseTake(r, 1); err != nil || res.Outcome != Allowed || res.Buckets[0].Remaining != want {
				t.Errorf("%s: call %d: %+v, %v; want allowed with %d left", form.name, c, res, err, want)
			}
		}
		if got := remaining(t, s, "p", with(day, 0)); got != used {
			t.Errorf("%s: the quota after the run: %d left, want %d", form.name, got, used)
		}

		// Two calls of one bucket each, three keys: no call can be told its keys.
		err = form.run([]string{key(tb), key(day), key(tb)}, arg(tb), arg(day)).Err()
		if err == nil || !strings.Contains(err.Error(), "the calls name 2 keys, got 3") {
			t.Errorf("%s: mismatched keys: %v, want the whole run refused", form.name, err)
		}
		if got := remaining(t, s, "p", with(tb, 0)); got != tokens {
			t.Errorf("%s: the refused run applied something: %d left, want %d", form.name, got, tokens)
		}
	}
}

// TestPipelineRunsPerTag sends concurrent decisions of two tags through a Redis Cluster and a
// single server: each tag's calls share a script run (fewer runs than decisions), the runs of
// different tags never mix (a cross-slot run would fail on the cluster), and every decision is
// applied exactly once.
func TestPipelineRunsPerTag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t)
	for name, url := range map[string]string{"redis": srv.URL(), "cluster": cl.URL()} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c, err := NewClient(url, ClientOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			s := NewRedis(c, RedisOptions{Prefix: uniquePrefix(), MaxBatch: 32, MaxInFlight: 1})
			tags := []string{"openai", "anthropic"}
			spec := Spec{Name: "n", Algorithm: Quota, Calendar: Month, Limit: 1e9, Cost: 1}
			const workers, rounds = 32, 10
			runs := countRuns(t, c)
			for range rounds {
				var wg sync.WaitGroup
				for w := range workers {
					wg.Go(func() {
						res, err := s.Take(ctx, &Request{Tag: tags[w%2], Buckets: []Spec{spec}})
						if err != nil || res.Outcome != Allowed {
							t.Errorf("take: %+v, %v", res, err)
						}
					})
				}
				wg.Wait()
			}
			runs = countRuns(t, c) - runs
			for _, tag := range tags {
				if used := 1e9 - remaining(t, s, tag, with(spec, 0)); used != workers*rounds/2 {
					t.Errorf("%s: %d decisions applied, want %d", tag, used, workers*rounds/2)
				}
			}
			t.Logf("%d script runs for %d decisions", runs, workers*rounds)
			if runs >= workers*rounds/2 {
				t.Errorf("%d script runs for %d concurrent decisions: not coalesced", runs, workers*rounds)
			}
		})
	}
}

// countRuns is the number of FCALL, EVALSHA and EVAL every node of c has run.
func countRuns(t *testing.T, c redis.UniversalClient) int64 {
	t.Helper()
	var mu sync.Mutex
	total := int64(0)
	count := func(ctx context.Context, n *redis.Client) error {
		calls, err := redisstats.Calls(ctx, n)
		mu.Lock()
		total += calls["fcall"] + calls["evalsha"] + calls["eval"]
		mu.Unlock()
		return err
	}
	var err error
	switch c := c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(context.Background(), count)
	case *redis.Client:
		err = count(context.Background(), c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestPipelineMixedCalls sends concurrent takes, adjustments and concurrency leases through
// coalesced runs, so that one run holds calls of every kind: each is applied exactly once. A
// worker takes a quota (cost 3) and a concurrency lease, refunds 1 of the quota, then releases
// the lease; at the end the quota has used 2 per worker and no lease is held.
func TestPipelineMixedCalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	s := NewRedis(srv.Client(), RedisOptions{Prefix: uniquePrefix(), MaxBatch: 16, MaxInFlight: 1})
	quotaSpec := Spec{Name: "q", Algorithm: Quota, Calendar: Month, Limit: 1e9, Cost: 3}
	lease := Spec{Name: "c", Algorithm: Concurrency, Limit: 1000, Period: time.Minute, Cost: 1}
	const workers = 48
	runs := countRuns(t, srv.Client())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			id := fmt.Sprintf("lease-%d", w)
			res, err := s.Take(ctx, &Request{Tag: "p", Lease: id, Buckets: []Spec{quotaSpec, lease}})
			if err != nil || res.Outcome != Allowed {
				t.Errorf("take: %+v, %v", res, err)
				return
			}
			if err := s.Adjust(ctx, "p", []Adjustment{{Spec: quotaSpec, Delta: 1}}); err != nil {
				t.Errorf("refund: %v", err)
			}
			if err := s.Adjust(ctx, "p", []Adjustment{{Spec: lease, Delta: 1, Lease: id}}); err != nil {
				t.Errorf("release: %v", err)
			}
		})
	}
	wg.Wait()
	runs = countRuns(t, srv.Client()) - runs
	t.Logf("%d script runs for %d calls", runs, 3*workers)
	if runs > 3*workers/2 {
		t.Errorf("%d script runs for %d concurrent calls: none shared a run", runs, 3*workers)
	}
	if used := 1e9 - remaining(t, s, "p", quotaSpec); used != 2*workers {
		t.Errorf("quota used %d, want %d", used, 2*workers)
	}
	if held := 1000 - remaining(t, s, "p", lease); held != 0 {
		t.Errorf("%d leases still held, want 0", held)
	}
}
