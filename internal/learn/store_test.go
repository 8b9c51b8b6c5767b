package learn

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// clock is a manual clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock(t time.Time) *clock    { return &clock{t: t} }
func approx(a, b float64) bool       { return math.Abs(a-b) < 1e-6*math.Max(1, math.Abs(b)) }
func dist(now time.Time, r ...float64) Dist {
	var d Dist
	for _, x := range r {
		d.Add(x, now, time.Minute)
	}
	return d
}

var prefixes atomic.Int64

func uniquePrefix() string {
	return "learntest" + string(rune('a'+prefixes.Add(1)%26)) + time.Now().Format("150405.000000") + ":"
}

// TestStoreConformance runs the same behaviours on the Memory store, a real redis-server and a
// real 3-master Redis Cluster, on a manual clock.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	single, err := bucket.NewClient(redistest.StartServer(t).URL(), bucket.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = single.Close() })
	cluster, err := bucket.NewClient(redistest.StartCluster(t).URL(), bucket.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close() })
	backends := []struct {
		name string
		new  func(now func() time.Time) Store
	}{
		{"memory", func(now func() time.Time) Store { return NewMemory(now) }},
		{"redis", func(now func() time.Time) Store {
			s := NewRedis(single, uniquePrefix(), time.Hour)
			s.now = now
			return s
		}},
		{"cluster", func(now func() time.Time) Store {
			s := NewRedis(cluster, uniquePrefix(), time.Hour)
			s.now = now
			return s
		}},
	}
	ctx := context.Background()
	a := Key{"anthropic", "claude-sonnet-4-5", "anthropic_estimate"}
	b := Key{"gemini", "gemini-2.5-pro", "gemini_estimate"}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			t.Run("empty", func(t *testing.T) {
				t.Parallel()
				s := be.new(newClock(t0).Now)
				got, err := s.Load(ctx, []Key{a, b})
				if err != nil || len(got) != 2 || got[0].Samples() != 0 || got[1].Samples() != 0 {
					t.Fatalf("Load of unwritten keys: %v %v", got, err)
				}
			})
			t.Run("add and load, keys apart", func(t *testing.T) {
				t.Parallel()
				clk := newClock(t0)
				s := be.new(clk.Now)
				if err := s.Add(ctx, []Delta{{a, dist(t0, 0.6, 0.6, 0.7)}, {b, dist(t0, 1.2)}}, time.Minute); err != nil {
					t.Fatal(err)
				}
				got, err := s.Load(ctx, []Key{a, b})
				if err != nil {
					t.Fatal(err)
				}
				if n := got[0].Samples(); !approx(n, 3) {
					t.Errorf("a: %v samples, want 3", n)
				}
				if q := got[0].Quantile(1); q < 0.7 || q > 0.71 {
					t.Errorf("a: max %v, want about 0.7", q)
				}
				if n, q := got[1].Samples(), got[1].Quantile(0.5); !approx(n, 1) || q < 1.2 || q > 1.22 {
					t.Errorf("b: %v samples, median %v", n, q)
				}
				if !got[0].At.Equal(t0) {
					t.Errorf("a at %v, want %v", got[0].At, t0)
				}
			})
			t.Run("merge decays what was stored", func(t *testing.T) {
				t.Parallel()
				clk := newClock(t0)
				s := be.new(clk.Now)
				if err := s.Add(ctx, []Delta{{a, dist(t0, 0.6, 0.6)}}, time.Minute); err != nil {
					t.Fatal(err)
				}
				clk.Add(time.Minute)
				if err := s.Add(ctx, []Delta{{a, dist(clk.Now(), 0.9)}}, time.Minute); err != nil {
					t.Fatal(err)
				}
				got, err := s.Load(ctx, []Key{a})
				if err != nil {
					t.Fatal(err)
				}
				if n := got[0].Samples(); !approx(n, 2) { // 2 halved + 1
					t.Errorf("%v samples, want 2", n)
				}
				if !got[0].At.Equal(t0.Add(time.Minute)) {
					t.Errorf("at %v", got[0].At)
				}
			})
			t.Run("time never runs backwards", func(t *testing.T) {
				t.Parallel()
				clk := newClock(t0.Add(time.Hour))
				s := be.new(clk.Now)
				if err := s.Add(ctx, []Delta{{a, dist(clk.Now(), 0.6)}}, time.Minute); err != nil {
					t.Fatal(err)
				}
				clk.Add(-time.Hour)
				if err := s.Add(ctx, []Delta{{a, dist(clk.Now(), 0.6)}}, time.Minute); err != nil {
					t.Fatal(err)
				}
				got, err := s.Load(ctx, []Key{a})
				if err != nil || !approx(got[0].Samples(), 2) || !got[0].At.Equal(t0.Add(time.Hour)) {
					t.Fatalf("%v samples at %v (%v), want 2 at t0+1h", got[0].Samples(), got[0].At, err)
				}
			})
			t.Run("replicas share one distribution", func(t *testing.T) {
				t.Parallel()
				clk := newClock(t0)
				st := be.new(clk.Now)
				pol := Policy{Quantile: 0.99, MinSamples: 20, Min: 0.5, Max: 1.5, HalfLife: time.Minute}
				r1 := NewShared(st, SharedOptions{Policy: pol, Now: clk.Now})
				r2 := NewShared(st, SharedOptions{Policy: pol, Now: clk.Now})
				if l := r2.Factor(a); l.Learned || l.Factor != 1 {
					t.Fatalf("r2 before learning: %+v", l)
				}
				for range 30 {
					r1.Observe(a, 625, 1000) // the provider counts 62.5% of the static estimate
				}
				if err := r1.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				if err := r2.Sync(ctx); err != nil {
					t.Fatal(err)
				}
				l := r2.Factor(a)
				if !l.Learned || l.Factor < 0.625 || l.Factor > 0.64 || !approx(l.Samples, 30) {
					t.Fatalf("r2 after r1 learned: %+v, want learned about 0.625 on 30 samples", l)
				}
			})
		})
	}
}

// TestRedisKey: the key shares the provider's buckets' hash tag and names no model in clear.
func TestRedisKey(t *testing.T) {
	t.Parallel()
	k := RedisKey("rl:", Key{"anthropic", "claude-secret-model", "anthropic_estimate"})
	if !strings.HasPrefix(k, "rl:"+bucket.HashTag("anthropic")+"L:anthropic_estimate:") || strings.Contains(k, "claude") {
		t.Fatalf("key %q", k)
	}
	if k2 := RedisKey("rl:", Key{"anthropic", "claude-other", "anthropic_estimate"}); k2 == k {
		t.Fatal("two models share a key")
	}
	if k3 := RedisKey("", Key{"a}b{c", "m", "x}{:y"}); strings.Count(k3, "{") != 1 || strings.Count(k3, "}") != 1 {
		t.Fatalf("braces leak into %q", k3)
	}
}

// failing is a store that is away.
type failing struct{ add, load error }

func (f failing) Add(context.Context, []Delta, time.Duration) error { return f.add }
func (f failing) Load(_ context.Context, k []Key) ([]Dist, error) {
	return make([]Dist, len(k)), f.load
}

// TestSharedOutage: a store that fails empties the snapshot, so that every key prices statically.
func TestSharedOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := Key{"anthropic", "m", "anthropic_estimate"}
	pol := Policy{Quantile: 0.99, MinSamples: 5, Min: 0.5, Max: 1.5, HalfLife: time.Minute}
	mem := NewMemory(func() time.Time { return t0 })
	var st Store = mem
	sw := &switchable{s: &st}
	s := NewShared(sw, SharedOptions{Policy: pol, Now: func() time.Time { return t0 }})
	for range 10 {
		s.Observe(k, 700, 1000)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if l := s.Factor(k); !l.Learned {
		t.Fatalf("learned before the outage: %+v", l)
	}
	for _, f := range []failing{{add: errors.New("down")}, {load: errors.New("down")}} {
		st = f
		if err := s.Sync(ctx); err == nil {
			t.Fatal("Sync on a failing store: nil error")
		}
		if l := s.Factor(k); l.Learned || l.Factor != 1 {
			t.Fatalf("during the outage: %+v, want static", l)
		}
		st = mem
		if err := s.Sync(ctx); err != nil || !s.Factor(k).Learned {
			t.Fatalf("after the outage: %v %+v", err, s.Factor(k))
		}
	}
}

type switchable struct{ s *Store }

func (w *switchable) Add(ctx context.Context, d []Delta, h time.Duration) error {
	return (*w.s).Add(ctx, d, h)
}
func (w *switchable) Load(ctx context.Context, k []Key) ([]Dist, error) { return (*w.s).Load(ctx, k) }

// TestSharedBounds: keys past MaxKeys stay static, and bad reports are ignored.
func TestSharedBounds(t *testing.T) {
	t.Parallel()
	pol := Policy{Quantile: 0.99, MinSamples: 1, Min: 0.5, Max: 1.5, HalfLife: time.Minute}
	now := func() time.Time { return t0 }
	s := NewShared(NewMemory(now), SharedOptions{Policy: pol, MaxKeys: 2, Now: now})
	for _, m := range []string{"a", "b", "c"} {
		s.Observe(Key{"p", m, "r"}, 700, 1000)
	}
	s.Observe(Key{"p", "a", "r"}, 0, 1000)
	s.Observe(Key{"p", "a", "r"}, 700, -1)
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	if len(snap) != 2 || snap[Key{"p", "a", "r"}].Samples != 1 {
		t.Fatalf("snapshot %+v, want a and b with one sample each", snap)
	}
	if l := s.Factor(Key{"p", "c", "r"}); l.Learned {
		t.Fatalf("a key past MaxKeys learned: %+v", l)
	}
}

// A settlement above the learned factor raises it at once on the replica that saw it (a provider
// whose counts just rose), clamped to Max; one below changes nothing; the next Sync prices at
// the distribution's quantile again.
func TestSharedRaise(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := Key{"anthropic", "m", "anthropic_estimate"}
	now := func() time.Time { return t0 }
	pol := Policy{Quantile: 0.99, MinSamples: 10, Min: 0.5, Max: 1.5, HalfLife: time.Minute}
	s := NewShared(NewMemory(now), SharedOptions{Policy: pol, Now: now})
	s.Observe(k, 2000, 1000) // not learned yet: nothing to raise
	if l := s.Factor(k); l.Learned {
		t.Fatalf("before the floor: %+v", l)
	}
	for range 400 {
		s.Observe(k, 700, 1000)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	base := s.Factor(k).Factor
	if base < 0.7 || base > 0.71 {
		t.Fatalf("learned %v, want about 0.7", base)
	}
	s.Observe(k, 600, 1000)
	if f := s.Factor(k).Factor; f != base {
		t.Fatalf("a lower sample moved the factor to %v", f)
	}
	s.Observe(k, 1050, 1000)
	if f := s.Factor(k).Factor; f < 1.05 || f > 1.07 {
		t.Fatalf("after a sample at 1.05: %v, want about 1.05 at once", f)
	}
	s.Observe(k, 9000, 1000)
	if f := s.Factor(k).Factor; f != 1.5 {
		t.Fatalf("after a sample at 9: %v, want Max", f)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if f := s.Factor(k).Factor; f != base { // three samples above 0.7 of 404 are under 1%: the p99 stays
		t.Fatalf("after Sync: %v, want the quantile %v again", f, base)
	}
}

// A Cluster whose masters lost the script (a restart, a failover) merges each delta once: the
// deltas a master refused are run again, never those another master merged.
func TestRedisAddAfterScriptFlush(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := cl.Client()
	ctx := context.Background()
	s := NewRedis(c, uniquePrefix(), time.Hour)
	keys := []Key{{"anthropic", "m", "r"}, {"gemini", "m", "r"}, {"openai", "m", "r"}, {"bedrock", "m", "r"}}
	for round := range 3 {
		// Flush the script from one master only: the others still run it.
		if err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.ScriptFlush(ctx).Err()
		}); err != nil && round == 0 {
			t.Fatal(err)
		}
		if round == 1 {
			if err := script.Load(ctx, c).Err(); err != nil {
				t.Fatal(err)
			}
			first := redis.NewClient(&redis.Options{Addr: cl.Addrs()[0]})
			err := first.ScriptFlush(ctx).Err()
			first.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		deltas := make([]Delta, len(keys))
		for i, k := range keys {
			deltas[i] = Delta{k, dist(t0, 0.8)}
		}
		if err := s.Add(ctx, deltas, time.Hour); err != nil {
			t.Fatal(err)
		}
		got, err := s.Load(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if n := got[i].Samples(); math.Abs(n-float64(round+1)) > 1e-3 {
				t.Fatalf("round %d, %v: %v samples, want %d", round, keys[i], n, round+1)
			}
		}
	}
}
