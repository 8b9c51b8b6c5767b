package bucket

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// store is what the conformance suite exercises: Memory and Redis.
type store interface {
	Take(ctx context.Context, req *Request) (Result, error)
	Adjust(ctx context.Context, tag string, adj []Adjustment) error
	Lower(ctx context.Context, tag string, lv []Level) error
	Peek(ctx context.Context, tag string, specs []Spec) ([]Snapshot, error)
	Reset(ctx context.Context, tag string, specs []Spec) error
	Ping(ctx context.Context) error
}

var (
	_ store = (*Memory)(nil)
	_ store = (*Redis)(nil)
)

// fakeTimePrelude shadows the global redis with a table whose call answers TIME with the time
// fakeTimeEpilogue takes off each run's last two arguments (seconds and microseconds), so that
// tests drive the production code, as a function and as a script, with an exact clock. A
// function library loads with a reduced redis (no call, no setmetatable): the table is filled
// from the full one when a run starts.
const fakeTimePrelude = `local fake_s, fake_us
local redis = { register_function = redis.register_function }
`

// fakeTimeEpilogue takes the time off every run's arguments.
const fakeTimeEpilogue = `
local real_run = run
run = function(keys, argv)
  fake_us = table.remove(argv)
  fake_s = table.remove(argv)
  local real = _G.redis -- the API of a run, not the one a library loads with
  redis.error_reply = real.error_reply
  redis.call = function(cmd, ...)
    if cmd == 'TIME' then return { fake_s, fake_us } end
    return real.call(cmd, ...)
  end
  return real_run(keys, argv)
end
`

var fakeTimeLibrary = newLibrary(fakeTimePrelude, luaSource, fakeTimeEpilogue)

// newFakeTimeRedis is a Redis store whose script reads the time from now instead of TIME.
func newFakeTimeRedis(c redis.UniversalClient, opts RedisOptions, now func() time.Time) *Redis {
	s := NewRedis(c, opts)
	s.lib, s.now = fakeTimeLibrary, now
	return s
}

// fakeTimeServer starts a redis-server for t and a store on it, under prefix, whose script reads
// the time from the returned clock (set to t0).
func fakeTimeServer(t *testing.T, prefix string) (*Redis, *redis.Client, *clock) {
	t.Helper()
	c := redistest.StartServer(t).Client()
	clk := newClock(t0)
	return newFakeTimeRedis(c, RedisOptions{Prefix: prefix}, clk.Now), c, clk
}

// clock is a manual clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

var prefixes atomic.Int64

// uniquePrefix isolates a test's keys on a shared server.
func uniquePrefix() string { return fmt.Sprintf("test%d:", prefixes.Add(1)) }

// take runs req on s and fails the test on error.
func take(t testing.TB, s store, req *Request) Result {
	t.Helper()
	res, err := s.Take(context.Background(), req)
	if err != nil {
		t.Fatalf("Take: %v", err)
	}
	return res
}

func adjust(t testing.TB, s store, tag string, adj ...Adjustment) {
	t.Helper()
	if err := s.Adjust(context.Background(), tag, adj); err != nil {
		t.Fatalf("Adjust: %v", err)
	}
}

// req builds a request of buckets under tag "p".
func req(buckets ...Spec) *Request { return &Request{Tag: "p", Buckets: buckets} }

func tokenBucket(name string, limit int64, period time.Duration, cost int64) Spec {
	return Spec{Name: name, Algorithm: TokenBucket, Limit: limit, Period: period, Cost: cost}
}

func slidingWindow(name string, limit int64, period time.Duration, cost int64) Spec {
	return Spec{Name: name, Algorithm: SlidingWindow, Limit: limit, Period: period, Cost: cost}
}

func quota(name string, limit int64, cal Calendar, cost int64) Spec {
	return Spec{Name: name, Algorithm: Quota, Limit: limit, Calendar: cal, Cost: cost}
}

// with returns s with another cost.
func with(s Spec, cost int64) Spec {
	s.Cost = cost
	return s
}

// remaining returns the level of spec without debiting it (a zero-cost take).
func remaining(t testing.TB, s store, tag string, spec Spec) int64 {
	t.Helper()
	spec.Cost, spec.Floor = 0, 0
	res := take(t, s, &Request{Tag: tag, Buckets: []Spec{spec}})
	return res.Buckets[0].Remaining
}
