package bucket

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redisstats"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// benchParallelism x GOMAXPROCS goroutines issue decisions concurrently in every Redis benchmark.
const benchParallelism = 16

// trivialScript is the baseline: one EVALSHA that touches one key and returns.
var trivialScript = redis.NewScript("return redis.call('EXISTS', KEYS[1])")

// benchSpecs are the buckets of a typical decision, generous enough never to deny.
func benchSpecs(n int) []Spec {
	all := []Spec{
		{Name: "tenant-42:gpt-4o:tpm", Limit: 1e12, Period: time.Minute, Cost: 1200},
		{Name: "tenant-42:gpt-4o:rpm", Algorithm: SlidingWindow, Limit: 1e12, Period: time.Minute, Cost: 1},
		{Name: "tenant-42:tpm", Limit: 1e12, Period: time.Minute, Cost: 1200},
		{Name: "tenant-42:month", Algorithm: Quota, Calendar: Month, Limit: 1e12, Cost: 1200},
	}
	return all[:n]
}

// BenchmarkRedis measures decisions/s of the Redis store with 1, 2 and 4 buckets per decision
// against a bare EVALSHA of a trivial script, on the same server and concurrency in the same run;
// x_bare is the store's throughput as a fraction of the bare EVALSHA's. redis-us/op is
// redis-server's own CPU per decision (INFO cpu), the script's cost whatever else the machine
// runs.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.StartServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	var bare float64 // ns per op of the baseline
	b.Run("bare_evalsha", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(benchParallelism)
		keys := []string{"bench:{p}bare"}
		cpu := startRedisCPU(b, c)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := trivialScript.Run(ctx, c, keys, "x").Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		bare = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		cpu.report(b)
	})
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("buckets=%d", n), func(b *testing.B) {
			s := NewRedis(c, RedisOptions{Prefix: "bench:"})
			r := &Request{Tag: "openai", Buckets: benchSpecs(n)}
			b.ReportAllocs()
			b.SetParallelism(benchParallelism)
			cpu := startRedisCPU(b, c)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := s.Take(ctx, r)
					if err != nil || res.Outcome != Allowed {
						b.Errorf("Take: %+v, %v", res, err)
						return
					}
				}
			})
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			if bare > 0 {
				b.ReportMetric(bare/ns, "x_bare")
			}
			cpu.report(b)
		})
	}
}

// BenchmarkRedisBatched measures the store as the service runs it: script calls of concurrent
// decisions coalesced into pipelines (MaxBatch 32), 64 decisions in flight, each goroutine a
// tenant of its own with a token bucket of tokens and one of requests. redis-us/op, Redis's CPU
// per decision, is the figure to compare between versions of bucket.lua.
func BenchmarkRedisBatched(b *testing.B) {
	srv := redistest.StartServer(b)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 8})
	b.Cleanup(func() { _ = c.Close() })
	s := NewRedis(c, RedisOptions{Prefix: "bench:", MaxBatch: 32})
	ctx := context.Background()
	var tenant atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(64 / runtime.GOMAXPROCS(0))
	cpu := startRedisCPU(b, c)
	b.RunParallel(func(pb *testing.PB) {
		name := fmt.Sprintf("t-%03d", tenant.Add(1))
		r := &Request{Tag: "openai", Buckets: []Spec{
			{Name: name + ":tpm", Limit: 1e12, Period: time.Minute, Cost: 300},
			{Name: name + ":rpm", Limit: 1e12, Period: time.Minute, Cost: 1},
		}}
		for pb.Next() {
			res, err := s.Take(ctx, r)
			if err != nil || res.Outcome != Allowed {
				b.Errorf("Take: %+v, %v", res, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	cpu.report(b)
}

// redisCPU is redis-server's CPU time (user and system) from a benchmark's start.
type redisCPU struct {
	c     *redis.Client
	start time.Duration
}

func startRedisCPU(b *testing.B, c *redis.Client) redisCPU {
	return redisCPU{c, readRedisCPU(b, c)}
}

// report adds redis-us/op, the server's CPU per operation since start.
func (r redisCPU) report(b *testing.B) {
	used := readRedisCPU(b, r.c) - r.start
	b.ReportMetric(float64(used.Microseconds())/float64(b.N), "redis-us/op")
}

func readRedisCPU(b *testing.B, c *redis.Client) time.Duration {
	d, err := redisstats.CPU(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

// BenchmarkMemory measures the in-memory store's decisions, sequentially (allocations, latency).
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("buckets=%d", n), func(b *testing.B) {
			m := NewMemory(MemoryOptions{})
			r := &Request{Tag: "openai", Buckets: benchSpecs(n)}
			b.ReportAllocs()
			for b.Loop() {
				if res, err := m.Take(ctx, r); err != nil || res.Outcome != Allowed {
					b.Fatalf("Take: %+v, %v", res, err)
				}
			}
		})
	}
}

// BenchmarkKeys measures building a 4-bucket decision's keys.
func BenchmarkKeys(b *testing.B) {
	s := NewRedis(nil, RedisOptions{Prefix: "rl:"})
	specs := benchSpecs(4)
	b.ReportAllocs()
	for b.Loop() {
		_ = s.keys("openai", len(specs), func(i int) *Spec { return &specs[i] })
	}
}

// BenchmarkScriptRuns sends runs of 6 takes of 2 token buckets each (100 tenants in a fixed
// order), one run per op, as the function (FCALL) and as the script (EVALSHA), the two buckets
// under a key each (keys=2) or sharing one (keys=1, Spec.Slot): the work of bucket.lua alone,
// without the batcher. decisions/s and redis-us/op are per decision. With
// SCRIPT_COST_ADDR set it drives that server instead of starting one: scripts/script-cost.sh
// runs it against redis-server under callgrind, whose instruction counts, unlike times, repeat
// exactly on a busy machine.
func BenchmarkScriptRuns(b *testing.B) {
	var c *redis.Client
	if addr := os.Getenv("SCRIPT_COST_ADDR"); addr != "" {
		c = redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: time.Minute, WriteTimeout: time.Minute})
	} else {
		c = redistest.StartServer(b).Client()
	}
	b.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	if err := c.FunctionLoad(ctx, lib.code).Err(); err != nil && !strings.Contains(err.Error(), "already exists") {
		b.Fatal(err)
	}
	s := NewRedis(c, RedisOptions{Prefix: "cost:"})
	const calls = 6
	// Every run's keys and arguments, built before timing: tenants 7 apart, 100 of them.
	type run struct {
		keys []string
		args []any
	}
	build := func(shared bool) *[100]run {
		var runs [100]run
		for r := range runs {
			for i := range calls {
				name := fmt.Sprintf("t-%03d", (r*calls+i)*7%100)
				req := &Request{Tag: "openai", Buckets: []Spec{
					{Name: name + ":tpm", Limit: 1e12, Period: time.Minute, Cost: 300},
					{Name: name + ":rpm", Limit: 1e12, Period: time.Minute, Cost: 1},
				}}
				if shared {
					req.Buckets[0].Name, req.Buckets[0].Slot = name, 1
					req.Buckets[1].Name, req.Buckets[1].Slot = name, 2
				}
				keys := s.keys(req.Tag, 2, func(i int) *Spec { return &req.Buckets[i] })
				runs[r].keys = append(runs[r].keys, keys...)
				runs[r].args = append(runs[r].args, string(appendTake(nil, req, len(keys), time.Time{})))
			}
		}
		return &runs
	}
	layouts := []struct {
		name string
		runs *[100]run
	}{{"keys=2", build(false)}, {"keys=1", build(true)}}
	for _, form := range []struct {
		name string
		call func(r *run) *redis.Cmd
	}{
		{"function", func(r *run) *redis.Cmd { return c.FCall(ctx, lib.name, r.keys, r.args...) }},
		{"script", func(r *run) *redis.Cmd { return lib.script.Run(ctx, c, r.keys, r.args...) }},
	} {
		for _, layout := range layouts {
			runs := layout.runs
			b.Run(form.name+"/"+layout.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu := startRedisCPU(b, c)
				i := 0
				for b.Loop() {
					v, err := form.call(&runs[i%len(runs)]).Result()
					if err != nil {
						b.Fatal(err)
					}
					for _, x := range v.([]any) {
						if res, err := parseTake(x, 2); err != nil || res.Outcome != Allowed {
							b.Fatalf("take: %+v, %v", res, err)
						}
					}
					i++
				}
				b.ReportMetric(float64(b.N*calls)/b.Elapsed().Seconds(), "decisions/s")
				used := readRedisCPU(b, c) - cpu.start
				b.ReportMetric(float64(used.Microseconds())/float64(b.N*calls), "redis-us/decision")
			})
		}
	}
}
