package bucket

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// The contention tests: independent clients (separate pools, like separate ext-authz replicas),
// each with many goroutines, on one shared budget.
const (
	contentionClients = 3
	contentionWorkers = 64 // goroutines per client
	contentionFor     = 3 * time.Second
)

// budget is the binding token bucket of a contention run: rate tokens a second, burst capacity.
type budget struct{ rate, burst int64 }

func (b budget) spec() Spec {
	return Spec{Name: "tokens", Limit: b.rate, Burst: b.burst, Period: time.Second}
}

// contentionCalls is a second, generous bucket debited in the same decisions.
var contentionCalls = Spec{Name: "calls", Limit: 1_000_000, Period: time.Second, Cost: 1}

// decider is one client's way of deciding a request of cost tokens; a zero cost must not write.
type decider func(ctx context.Context, cost int64) (bool, error)

// contention is what a contention run measured.
type contention struct {
	budget
	admitted, attempted int64 // tokens
	calls               int64 // admitted decisions
	elapsed             time.Duration
}

// runContention hammers the budget from every decider's workers for d, and measures the elapsed
// time with the server's clock. Every worker first makes one zero-cost decision, so that the pools
// are connected before the clock starts.
func runContention(t *testing.T, b budget, redisTime func() time.Time, deciders []decider, d time.Duration) contention {
	t.Helper()
	var admitted, attempted, calls atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var failed atomic.Pointer[error]
	fail := func(err error) {
		if ctx.Err() == nil {
			failed.CompareAndSwap(nil, &err)
			cancel()
		}
	}
	var warm, wg sync.WaitGroup
	start := make(chan struct{})
	for ci, decide := range deciders {
		for w := range contentionWorkers {
			warm.Add(1)
			wg.Go(func() {
				_, err := decide(ctx, 0)
				warm.Done()
				if err != nil {
					fail(err)
					return
				}
				<-start
				rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
				for ctx.Err() == nil {
					cost := int64(1 + rng.IntN(10))
					ok, err := decide(ctx, cost)
					if err != nil {
						fail(err)
						return
					}
					attempted.Add(cost)
					if ok {
						admitted.Add(cost)
						calls.Add(1)
					}
				}
			})
		}
	}
	warm.Wait()
	begin := redisTime()
	close(start)
	timer := time.AfterFunc(d, cancel)
	defer timer.Stop()
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("decide: %v", *err)
	}
	return contention{
		budget: b, admitted: admitted.Load(), attempted: attempted.Load(), calls: calls.Load(),
		elapsed: redisTime().Sub(begin),
	}
}

// allows is what the token bucket allows over c.elapsed: its burst plus its refill.
func (c contention) allows() float64 {
	return float64(c.burst) + float64(c.rate)*c.elapsed.Seconds()
}

// overshoot reports an admission above what the bucket allows.
func (c contention) overshoot() error {
	if float64(c.admitted) > c.allows()+1 {
		return fmt.Errorf("admitted %d tokens in %v, the bucket allows %.0f (%.1f%%)",
			c.admitted, c.elapsed, c.allows(), 100*float64(c.admitted)/c.allows())
	}
	return nil
}

func (c contention) String() string {
	return fmt.Sprintf("admitted %d tokens (%d calls) of %d asked in %v; the bucket allows %.0f: %.2f%%, demand %.1fx the refill",
		c.admitted, c.calls, c.attempted, c.elapsed.Round(time.Millisecond), c.allows(),
		100*float64(c.admitted)/c.allows(), float64(c.attempted)/(float64(c.rate)*c.elapsed.Seconds()))
}

// scripted deciders: separate clients (pools) running the real store.
func scriptedDeciders(b budget, newClient func() redis.UniversalClient, prefix string) []decider {
	var ds []decider
	for range contentionClients {
		s := NewRedis(newClient(), RedisOptions{Prefix: prefix})
		ds = append(ds, func(ctx context.Context, cost int64) (bool, error) {
			tokens := b.spec()
			tokens.Cost = cost
			res, err := s.Take(ctx, &Request{Tag: "shared", Buckets: []Spec{tokens, contentionCalls}})
			return res.Outcome == Allowed, err
		})
	}
	return ds
}

func serverTime(t *testing.T, c redis.UniversalClient) func() time.Time {
	return func() time.Time {
		tm, err := c.Time(context.Background()).Result()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		return tm
	}
}

// TestContention: independent clients x 64 goroutines on shared buckets never admit more than the
// bucket allows (elapsed by Redis time), and with demand far above the refill admit at least 97%
// of it; on one server and on a cluster. The racy variant shows that the check can fail.
func TestContention(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t)
	newSingle := func() redis.UniversalClient {
		c, err := NewClient(srv.URL(), ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	newCluster := func() redis.UniversalClient {
		c, err := NewClient(cl.URL(), ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}

	// The runs are sequential: each needs the machine's CPUs to produce its demand.
	scripted := budget{rate: 500, burst: 500}
	for _, tc := range []struct {
		name      string
		newClient func() redis.UniversalClient
	}{{"redis", newSingle}, {"cluster", newCluster}} {
		t.Run(tc.name, func(t *testing.T) {
			ds := scriptedDeciders(scripted, tc.newClient, uniquePrefix())
			res := runContention(t, scripted, serverTime(t, tc.newClient()), ds, contentionFor)
			t.Log(res)
			if err := res.overshoot(); err != nil {
				t.Fatal(err)
			}
			if float64(res.attempted) < 3*float64(res.rate)*res.elapsed.Seconds() {
				t.Fatalf("demand too low to test efficiency: %v", res)
			}
			if float64(res.admitted) < 0.97*res.allows() {
				t.Fatalf("admitted less than 97%% of what the bucket allows: %v", res)
			}
		})
	}

	t.Run("racy_read_then_write_fails", func(t *testing.T) {
		racy := budget{rate: 100, burst: 100}
		prefix := uniquePrefix()
		var ds []decider
		for range contentionClients {
			ds = append(ds, racyDecider(racy, newSingle(), prefix))
		}
		res := runContention(t, racy, serverTime(t, newSingle()), ds, time.Second)
		t.Log(res)
		if err := res.overshoot(); err == nil {
			t.Fatalf("a read-then-write limiter passed the overshoot check: %v", res)
		}
	})
}

// racyDecider is a token bucket done wrong: read the level, decide in Go, write it back, without
// the script. Concurrent requests read the same level and overshoot.
func racyDecider(b budget, c redis.UniversalClient, prefix string) decider {
	key := prefix + "{shared}racy"
	rate := float64(b.rate) / 1e6 // tokens per µs
	return func(ctx context.Context, cost int64) (bool, error) {
		now, err := c.Time(ctx).Result()
		if err != nil {
			return false, err
		}
		us := float64(now.UnixMicro())
		v, err := c.HMGet(ctx, key, "l", "t").Result()
		if err != nil {
			return false, err
		}
		level, ts := float64(b.burst), us
		if l, ok := v[0].(string); ok {
			if level, err = strconv.ParseFloat(l, 64); err != nil {
				return false, err
			}
			t, ok := v[1].(string)
			if !ok {
				return false, errors.New("racy: no time")
			}
			if ts, err = strconv.ParseFloat(t, 64); err != nil {
				return false, err
			}
		}
		level = min(float64(b.burst), level+(us-ts)*rate)
		if cost == 0 || level < float64(cost) {
			return false, nil
		}
		return true, c.HSet(ctx, key, "l", level-float64(cost), "t", us).Err()
	}
}
