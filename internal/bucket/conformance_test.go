package bucket

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// t0 is the conformance suite's start time: a whole second (so sub-windows of whole seconds start
// on it), one minute before midnight UTC, in a leap February.
var t0 = time.Date(2024, 2, 28, 23, 59, 0, 0, time.UTC)

// backend builds a fresh, isolated store on a manual clock.
type backend struct {
	name     string
	newStore func(now func() time.Time) store
}

// TestConformance runs every behaviour against the Memory store, a real redis-server and a real
// 3-master Redis Cluster, all on a manual clock (the Redis stores run the production script with
// TIME replaced; see fakeTimePrelude). Real-time behaviour (TIME, contention, Retry-After with real
// sleeps) is tested in redis_test.go.
func TestConformance(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t)
	single, err := NewClient(srv.URL(), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = single.Close() })
	cluster, err := NewClient(cl.URL(), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Close() })

	backends := []backend{
		{"memory", func(now func() time.Time) store { return NewMemory(MemoryOptions{Now: now}) }},
		{"redis", func(now func() time.Time) store {
			return newFakeTimeRedis(single, RedisOptions{Prefix: uniquePrefix()}, now)
		}},
		{"cluster", func(now func() time.Time) store {
			return newFakeTimeRedis(cluster, RedisOptions{Prefix: uniquePrefix()}, now)
		}},
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range conformance {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					clk := newClock(t0)
					c.run(t, be.newStore(clk.Now), clk)
				})
			}
		})
	}
}

var conformance = []struct {
	name string
	run  func(t *testing.T, s store, clk *clock)
}{
	{"token_bucket/take_deny_retry", testTokenBucketTakeDenyRetry},
	{"token_bucket/burst_and_refill", testTokenBucketBurstAndRefill},
	{"token_bucket/large_numbers", testTokenBucketLargeNumbers},
	{"sliding_window/take_deny_retry", testSlidingWindowTakeDenyRetry},
	{"sliding_window/error_bound", testSlidingWindowErrorBound},
	{"quota/day", testQuotaDay},
	{"quota/month", testQuotaMonth},
	{"quota/zone_dst", testQuotaZone},
	{"all_or_nothing", testAllOrNothing},
	{"wait_is_max", testWaitIsMax},
	{"impossible", testImpossible},
	{"reservation/token_bucket", testReservationTokenBucket},
	{"reservation/sliding_window", testReservationSlidingWindow},
	{"reservation/quota", testReservationQuota},
	{"priority_floor", testPriorityFloor},
	{"adjust/token_bucket", testAdjustTokenBucket},
	{"adjust/sliding_window", testAdjustSlidingWindow},
	{"adjust/sliding_window_at", testAdjustSlidingWindowAt},
	{"adjust/quota", testAdjustQuota},
	{"money_budget", testMoneyBudget},
	{"cost_zero_and_debt", testCostZeroAndDebt},
	{"clock_backwards", testClockBackwards},
	{"hostile_keys", testHostileKeys},
	{"invalid", testInvalid},
	{"concurrency", testConcurrency},
	{"lower", testLower},
	{"shared_key", testSharedKey},
	{"peek", testPeek},
	{"reset", testReset},
}

// check compares a result with want; durations may differ by one microsecond, the resolution of
// the clocks, since waits are rounded up from floats. Result.At is compared when want names one.
func check(t *testing.T, what string, got, want Result) {
	t.Helper()
	if want.At.IsZero() {
		got.At = time.Time{}
	}
	opt := cmp.Comparer(func(a, b time.Duration) bool {
		d := a - b
		return d >= -time.Microsecond && d <= time.Microsecond
	})
	if diff := cmp.Diff(want, got, opt); diff != "" {
		t.Fatalf("%s: result mismatch (-want +got):\n%s", what, diff)
	}
}

func allowed(states ...State) Result {
	return Result{Outcome: Allowed, Blocking: -1, Buckets: states}
}

func testTokenBucketTakeDenyRetry(t *testing.T, s store, clk *clock) {
	spec := tokenBucket("tpm", 10, time.Minute, 3) // a token every 6 s
	check(t, "first take", take(t, s, req(spec)), allowed(State{Remaining: 7, Limit: 10, Reset: 18 * time.Second}))
	check(t, "drain", take(t, s, req(with(spec, 7))), allowed(State{Remaining: 0, Limit: 10, Reset: time.Minute}))
	denied := Result{Outcome: Denied, Wait: 24 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: 10, Reset: time.Minute, Wait: 24 * time.Second}}}
	check(t, "deny", take(t, s, req(with(spec, 4))), denied)
	check(t, "deny does not debit", take(t, s, req(with(spec, 4))), denied)

	clk.Advance(24 * time.Second * 95 / 100)
	if res := take(t, s, req(with(spec, 4))); res.Outcome != Denied || res.Wait > 1200*time.Millisecond+time.Microsecond || res.Wait < 1200*time.Millisecond {
		t.Fatalf("at 95%% of the wait: %+v, want denied with 1.2 s left", res)
	}
	clk.Advance(24*time.Second*5/100 - time.Microsecond)
	if res := take(t, s, req(with(spec, 4))); res.Outcome != Denied {
		t.Fatalf("1 µs before the wait: %+v, want denied", res)
	}
	clk.Advance(time.Microsecond)
	check(t, "retry at the wait", take(t, s, req(with(spec, 4))), allowed(State{Remaining: 0, Limit: 10, Reset: time.Minute}))
}

func testTokenBucketBurstAndRefill(t *testing.T, s store, clk *clock) {
	spec := tokenBucket("tpm", 10, time.Minute, 20)
	spec.Burst = 20
	check(t, "burst", take(t, s, req(spec)), allowed(State{Remaining: 0, Limit: 20, Reset: 2 * time.Minute}))
	for _, step := range []struct {
		advance time.Duration
		want    int64
	}{{time.Second, 0}, {5 * time.Second, 1}, {54 * time.Second, 10}, {59 * time.Second, 19}, {time.Second, 20}, {time.Hour, 20}} {
		clk.Advance(step.advance)
		if got := remaining(t, s, "p", spec); got != step.want {
			t.Fatalf("after %v more: remaining %d, want %d", step.advance, got, step.want)
		}
	}
}

func testTokenBucketLargeNumbers(t *testing.T, s store, clk *clock) {
	// 1e9 tokens a month: a token every 2678.4 µs.
	month := tokenBucket("month", 1e9, MaxPeriod, 1e9)
	check(t, "drain 1e9", take(t, s, req(month)), allowed(State{Remaining: 0, Limit: 1e9, Reset: MaxPeriod}))
	res := take(t, s, req(with(month, 1)))
	if res.Outcome != Denied || res.Wait != 2679*time.Microsecond {
		t.Fatalf("one token: %+v, want denied for 2679 µs", res)
	}
	clk.Advance(MaxPeriod / 2)
	if got := remaining(t, s, "p", month); got != 5e8 {
		t.Fatalf("after half the period: remaining %d, want 500000000", got)
	}
	for i := range 100 {
		if res := take(t, s, req(with(month, 1))); res.Outcome != Allowed || res.Buckets[0].Remaining != 5e8-int64(i)-1 {
			t.Fatalf("take %d of 1: %+v", i, res)
		}
	}

	// 1e12 tokens a second: a token every picosecond.
	fast := tokenBucket("fast", MaxAmount, MinPeriod, MaxAmount)
	check(t, "drain 1e12", take(t, s, req(fast)), allowed(State{Remaining: 0, Limit: MaxAmount, Reset: time.Second}))
	check(t, "deny 1e12", take(t, s, req(fast)), Result{Outcome: Denied, Wait: time.Second, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: MaxAmount, Reset: time.Second, Wait: time.Second}}})
	clk.Advance(time.Second)
	check(t, "retry 1e12", take(t, s, req(fast)), allowed(State{Remaining: 0, Limit: MaxAmount, Reset: time.Second}))
	clk.Advance(time.Microsecond)
	if got := remaining(t, s, "p", fast); got != 1e6 {
		t.Fatalf("1 µs after draining 1e12/s: remaining %d, want 1000000", got)
	}
}

func testSlidingWindowTakeDenyRetry(t *testing.T, s store, clk *clock) {
	spec := slidingWindow("rpm", 10, 10*time.Second, 6) // sub-windows of 1 s
	check(t, "first", take(t, s, req(spec)), allowed(State{Remaining: 4, Limit: 10, Reset: 11 * time.Second}))
	clk.Advance(4500 * time.Millisecond)
	check(t, "fill", take(t, s, req(with(spec, 4))), allowed(State{Remaining: 0, Limit: 10, Reset: 10500 * time.Millisecond}))
	// The 6 leave the window when the sub-window after t0+10 s starts, at t0+11 s.
	check(t, "deny", take(t, s, req(with(spec, 1))), Result{Outcome: Denied, Wait: 6500 * time.Millisecond, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: 10, Reset: 10500 * time.Millisecond, Wait: 6500 * time.Millisecond}}})
	// Needing more than the oldest sub-window frees waits for the next one.
	check(t, "deny 7", take(t, s, req(with(spec, 7))), Result{Outcome: Denied, Wait: 10500 * time.Millisecond, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: 10, Reset: 10500 * time.Millisecond, Wait: 10500 * time.Millisecond}}})
	clk.Advance(6500*time.Millisecond - time.Microsecond)
	if res := take(t, s, req(with(spec, 1))); res.Outcome != Denied || res.Wait != time.Microsecond {
		t.Fatalf("1 µs early: %+v, want denied for 1 µs", res)
	}
	clk.Advance(time.Microsecond)
	check(t, "retry", take(t, s, req(with(spec, 6))), allowed(State{Remaining: 0, Limit: 10, Reset: 11 * time.Second}))
}

// testSlidingWindowErrorBound drives random traffic and checks the documented bound against an
// exact log: no rolling window of Period ever admits more than Limit, and every denial is justified
// by the admissions of the last Period + Period/SlidingWindows.
func testSlidingWindowErrorBound(t *testing.T, s store, clk *clock) {
	const limit = 20
	period := 2 * time.Second
	sub := period / SlidingWindows
	spec := slidingWindow("rpm", limit, period, 1)
	type admission struct {
		at   time.Time
		cost int64
	}
	var log []admission
	sumSince := func(from, to time.Time) (n int64) { // admissions in (from, to]
		for _, a := range log {
			if a.at.After(from) && !a.at.After(to) {
				n += a.cost
			}
		}
		return n
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var admitted, denied int
	for range 300 {
		clk.Advance(time.Duration(rng.IntN(150_000)) * time.Microsecond)
		now := clk.Now()
		cost := int64(1 + rng.IntN(4))
		res := take(t, s, req(with(spec, cost)))
		switch res.Outcome {
		case Allowed:
			admitted++
			log = append(log, admission{now, cost})
			if n := sumSince(now.Add(-period), now); n > limit {
				t.Fatalf("at %v: %d admitted in the last %v, limit %d", now.Sub(t0), n, period, limit)
			}
		case Denied:
			denied++
			if n := sumSince(now.Add(-period-sub), now); n+cost <= limit {
				t.Fatalf("at %v: denied %d with only %d admitted in the last %v", now.Sub(t0), cost, n, period+sub)
			}
			if res.Wait <= 0 || res.Wait > period+sub {
				t.Fatalf("at %v: wait %v outside (0, %v]", now.Sub(t0), res.Wait, period+sub)
			}
		default:
			t.Fatalf("unexpected %v", res.Outcome)
		}
	}
	if admitted < 50 || denied < 50 {
		t.Fatalf("admitted %d, denied %d: the traffic does not exercise the limit", admitted, denied)
	}
}

func testQuotaDay(t *testing.T, s store, clk *clock) {
	spec := quota("day", 100, Day, 100)
	check(t, "use all", take(t, s, req(spec)), allowed(State{Remaining: 0, Limit: 100, Reset: time.Minute}))
	check(t, "deny", take(t, s, req(with(spec, 1))), Result{Outcome: Denied, Wait: time.Minute, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: 100, Reset: time.Minute, Wait: time.Minute}}})
	clk.Advance(time.Minute - time.Microsecond)
	if res := take(t, s, req(with(spec, 1))); res.Outcome != Denied || res.Wait != time.Microsecond {
		t.Fatalf("1 µs before midnight: %+v", res)
	}
	clk.Advance(time.Microsecond)
	check(t, "after midnight", take(t, s, req(with(spec, 1))), allowed(State{Remaining: 99, Limit: 100, Reset: 24 * time.Hour}))
}

// testQuotaZone: a quota in a zone resets at the zone's midnights, daylight-saving days
// included (the Gemini API's requests per day "reset at midnight Pacific time"): not at UTC's
// midnight, the spring day is 23 hours long and the autumn day 25.
func testQuotaZone(t *testing.T, s store, clk *clock) {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	day := quota("la-day", 10, Day, 10)
	day.Zone = la
	// 15:59 PST, a minute before UTC's midnight: that midnight resets nothing.
	clk.Set(time.Date(2026, 3, 7, 15, 59, 0, 0, la))
	check(t, "use all", take(t, s, req(day)), allowed(State{Remaining: 0, Limit: 10, Reset: 8*time.Hour + time.Minute}))
	clk.Advance(time.Minute)
	if res := take(t, s, req(with(day, 1))); res.Outcome != Denied || res.Wait != 8*time.Hour {
		t.Fatalf("at UTC midnight: %+v, want denied for 8 hours, until Pacific midnight", res)
	}
	clk.Set(time.Date(2026, 3, 7, 23, 59, 59, 0, la))
	if res := take(t, s, req(with(day, 1))); res.Outcome != Denied || res.Wait != time.Second {
		t.Fatalf("a second before Pacific midnight: %+v", res)
	}
	clk.Advance(time.Second)
	// 8 March 2026 springs forward at 02:00: its day is 23 hours.
	check(t, "spring midnight", take(t, s, req(with(day, 10))), allowed(State{Remaining: 0, Limit: 10, Reset: 23 * time.Hour}))
	clk.Set(time.Date(2026, 3, 8, 23, 59, 0, 0, la))
	if res := take(t, s, req(with(day, 1))); res.Outcome != Denied || res.Wait != time.Minute {
		t.Fatalf("a minute before the 23-hour day ends: %+v", res)
	}
	clk.Advance(time.Minute)
	check(t, "after the short day", take(t, s, req(with(day, 1))), allowed(State{Remaining: 9, Limit: 10, Reset: 24 * time.Hour}))
	// 1 November 2026 falls back at 02:00: its day is 25 hours.
	fall := quota("la-fall", 3, Day, 3)
	fall.Zone = la
	clk.Set(time.Date(2026, 11, 1, 0, 0, 0, 0, la))
	check(t, "autumn midnight", take(t, s, req(fall)), allowed(State{Remaining: 0, Limit: 3, Reset: 25 * time.Hour}))
	clk.Advance(24 * time.Hour)
	if res := take(t, s, req(with(fall, 1))); res.Outcome != Denied || res.Wait != time.Hour {
		t.Fatalf("24 hours into the 25-hour day: %+v", res)
	}
	// A month in the zone ends at its local midnight, as UTC's does at UTC's.
	month := quota("la-month", 2, Month, 2)
	month.Zone = la
	clk.Set(time.Date(2026, 3, 31, 23, 0, 0, 0, la))
	check(t, "month", take(t, s, req(month)), allowed(State{Remaining: 0, Limit: 2, Reset: time.Hour}))
	clk.Advance(time.Hour)
	if got := remaining(t, s, "p", month); got != 2 {
		t.Fatalf("a new Pacific month: %d remaining, want 2", got)
	}
}

func testQuotaMonth(t *testing.T, s store, clk *clock) {
	for i, at := range []time.Time{
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2000, 2, 29, 10, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC),
		time.Date(2024, 12, 31, 23, 59, 59, 999999000, time.UTC),
		time.Date(2025, 1, 31, 0, 0, 0, 0, time.UTC),
		time.Date(2100, 2, 28, 0, 0, 0, 0, time.UTC),
		time.Date(2255, 1, 15, 7, 8, 9, 0, time.UTC),
	} {
		clk.Set(at)
		spec := quota("month"+string(rune('a'+i)), 5, Month, 5)
		next := time.Date(at.Year(), at.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		check(t, at.String(), take(t, s, req(spec)), allowed(State{Remaining: 0, Limit: 5, Reset: next.Sub(at)}))
		if res := take(t, s, req(with(spec, 1))); res.Outcome != Denied || res.Wait != next.Sub(at) {
			t.Fatalf("%v: %+v, want denied until %v", at, res, next)
		}
		clk.Set(next)
		if got := remaining(t, s, "p", spec); got != 5 {
			t.Fatalf("%v: remaining %d on %v, want 5", at, got, next)
		}
	}
}

func testAllOrNothing(t *testing.T, s store, clk *clock) {
	a := tokenBucket("a", 100, time.Minute, 10)
	b := tokenBucket("b", 5, time.Minute, 5)
	take(t, s, req(b))
	check(t, "b cannot pay", take(t, s, req(a, with(b, 1))), Result{Outcome: Denied, Wait: 12 * time.Second, Blocking: 1,
		Buckets: []State{
			{Remaining: 100, Limit: 100},
			{Remaining: 0, Limit: 5, Reset: time.Minute, Wait: 12 * time.Second},
		}})
	if got := remaining(t, s, "p", a); got != 100 {
		t.Fatalf("a was debited by a denied decision: remaining %d", got)
	}
	clk.Advance(12 * time.Second)
	check(t, "both pay", take(t, s, req(a, with(b, 1))), allowed(
		State{Remaining: 90, Limit: 100, Reset: 6 * time.Second},
		State{Remaining: 0, Limit: 5, Reset: time.Minute},
	))
}

func testWaitIsMax(t *testing.T, s store, clk *clock) {
	a := tokenBucket("a", 10, time.Minute, 10)
	b := slidingWindow("b", 5, 10*time.Second, 5)
	c := quota("c", 1000, Day, 0)
	take(t, s, req(a, b))
	want := Result{Outcome: Denied, Wait: 11 * time.Second, Blocking: 1, Buckets: []State{
		{Remaining: 0, Limit: 10, Reset: time.Minute, Wait: 6 * time.Second},
		{Remaining: 0, Limit: 5, Reset: 11 * time.Second, Wait: 11 * time.Second},
		{Remaining: 1000, Limit: 1000, Reset: time.Minute},
	}}
	check(t, "deny", take(t, s, req(with(a, 1), with(b, 1), c)), want)
	clk.Advance(11*time.Second - time.Microsecond)
	if res := take(t, s, req(with(a, 1), with(b, 1), c)); res.Outcome != Denied || res.Blocking != 1 {
		t.Fatalf("1 µs early: %+v", res)
	}
	clk.Advance(time.Microsecond)
	if res := take(t, s, req(with(a, 1), with(b, 1), c)); res.Outcome != Allowed {
		t.Fatalf("at the wait: %+v", res)
	}
}

func testImpossible(t *testing.T, s store, clk *clock) {
	a := tokenBucket("a", 10, time.Minute, 10)
	take(t, s, req(a)) // a must wait, but impossibility wins
	for _, spec := range []Spec{
		tokenBucket("tb", 10, time.Minute, 11),
		{Name: "burst", Limit: 10, Burst: 15, Period: time.Minute, Cost: 16},
		slidingWindow("sw", 10, time.Minute, 11),
		quota("q", 10, Month, 11),
		{Name: "floor", Limit: 10, Period: time.Minute, Cost: 6, Floor: 0.5},
	} {
		want := Result{Outcome: Impossible, Blocking: 1, Buckets: []State{
			{Remaining: 0, Limit: 10, Reset: time.Minute, Wait: 6 * time.Second},
			{Remaining: spec.Capacity(), Limit: spec.Capacity()},
		}}
		if spec.Algorithm == Quota {
			want.Buckets[1].Reset = 24*time.Hour + time.Minute // until 1 March
		}
		check(t, spec.Name, take(t, s, req(with(a, 1), spec)), want)
		spec.Cost--
		if res := take(t, s, req(spec)); res.Outcome != Allowed {
			t.Fatalf("%s: a cost of capacity (above the floor) is not admitted: %+v", spec.Name, res)
		}
	}
}

func testReservationTokenBucket(t *testing.T, s store, clk *clock) {
	spec := tokenBucket("rps", 60, time.Minute, 60) // a token a second
	take(t, s, req(spec))
	r := func(cost int64, maxWait time.Duration) *Request {
		return &Request{Tag: "p", Buckets: []Spec{with(spec, cost)}, MaxWait: maxWait}
	}
	check(t, "first in line", take(t, s, r(5, 10*time.Second)), Result{Outcome: Delayed, Wait: 5 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -5, Limit: 60, Reset: 65 * time.Second, Wait: 5 * time.Second}}})
	check(t, "second in line", take(t, s, r(5, 10*time.Second)), Result{Outcome: Delayed, Wait: 10 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -10, Limit: 60, Reset: 70 * time.Second, Wait: 10 * time.Second}}})
	check(t, "beyond max wait", take(t, s, r(1, 10*time.Second)), Result{Outcome: Denied, Wait: 11 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -10, Limit: 60, Reset: 70 * time.Second, Wait: 11 * time.Second}}})
	clk.Advance(10 * time.Second)
	check(t, "after the reservations", take(t, s, r(1, 0)), Result{Outcome: Denied, Wait: time.Second, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: 60, Reset: time.Minute, Wait: time.Second}}})
}

func testReservationSlidingWindow(t *testing.T, s store, clk *clock) {
	spec := slidingWindow("rpm", 10, 10*time.Second, 10)
	take(t, s, req(spec))
	r := func(cost int64) *Request {
		return &Request{Tag: "p", Buckets: []Spec{with(spec, cost)}, MaxWait: 20 * time.Second}
	}
	// The reservation is admitted in the sub-window where it proceeds (t0+11 s), so it stays in the
	// window until t0+22 s, and the next caller waits for that.
	check(t, "first", take(t, s, r(5)), Result{Outcome: Delayed, Wait: 11 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -5, Limit: 10, Reset: 22 * time.Second, Wait: 11 * time.Second}}})
	check(t, "second", take(t, s, r(5)), Result{Outcome: Delayed, Wait: 11 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -10, Limit: 10, Reset: 22 * time.Second, Wait: 11 * time.Second}}})
	check(t, "third", take(t, s, r(1)), Result{Outcome: Denied, Wait: 22 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -10, Limit: 10, Reset: 22 * time.Second, Wait: 22 * time.Second}}})
	clk.Advance(11 * time.Second)
	if got := remaining(t, s, "p", spec); got != 0 {
		t.Fatalf("when the reservations proceed: remaining %d, want 0", got)
	}
}

func testReservationQuota(t *testing.T, s store, clk *clock) {
	spec := quota("day", 10, Day, 10)
	take(t, s, req(spec))
	r := func(cost int64) *Request {
		return &Request{Tag: "p", Buckets: []Spec{with(spec, cost)}, MaxWait: 2 * time.Minute}
	}
	check(t, "tomorrow", take(t, s, r(5)), Result{Outcome: Delayed, Wait: time.Minute, Blocking: 0,
		Buckets: []State{{Remaining: -5, Limit: 10, Reset: time.Minute, Wait: time.Minute}}})
	check(t, "the day after", take(t, s, r(6)), Result{Outcome: Denied, Wait: 24*time.Hour + time.Minute, Blocking: 0,
		Buckets: []State{{Remaining: -5, Limit: 10, Reset: time.Minute, Wait: 24*time.Hour + time.Minute}}})
	clk.Advance(time.Minute)
	if got := remaining(t, s, "p", spec); got != 5 {
		t.Fatalf("tomorrow: remaining %d, want 5 (the reservation counts against it)", got)
	}
}

func testPriorityFloor(t *testing.T, s store, clk *clock) {
	high := tokenBucket("tpm", 100, time.Minute, 30) // 100 tokens a minute: 0.6 s a token
	low := high
	low.Floor = 0.5
	check(t, "low above the floor", take(t, s, req(low)), allowed(State{Remaining: 70, Limit: 100, Reset: 18 * time.Second}))
	check(t, "low below the floor", take(t, s, req(low)), Result{Outcome: Denied, Wait: 6 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: 70, Limit: 100, Reset: 18 * time.Second, Wait: 6 * time.Second}}})
	check(t, "high ignores the floor", take(t, s, req(high)), allowed(State{Remaining: 40, Limit: 100, Reset: 36 * time.Second}))
	check(t, "low waits for the floor", take(t, s, req(with(low, 1))), Result{Outcome: Denied, Wait: 6600 * time.Millisecond, Blocking: 0,
		Buckets: []State{{Remaining: 40, Limit: 100, Reset: 36 * time.Second, Wait: 6600 * time.Millisecond}}})
	for _, spec := range []Spec{slidingWindow("sw", 100, time.Minute, 30), quota("q", 100, Day, 30)} {
		spec.Floor = 0.5
		if res := take(t, s, req(spec)); res.Outcome != Allowed {
			t.Fatalf("%s: low above the floor: %+v", spec.Name, res)
		}
		if res := take(t, s, req(spec)); res.Outcome != Denied {
			t.Fatalf("%s: low below the floor: %+v", spec.Name, res)
		}
		spec.Floor = 0
		if res := take(t, s, req(spec)); res.Outcome != Allowed || res.Buckets[0].Remaining != 40 {
			t.Fatalf("%s: high: %+v", spec.Name, res)
		}
	}
}

func testAdjustTokenBucket(t *testing.T, s store, clk *clock) {
	spec := tokenBucket("tpm", 10, time.Minute, 8)
	take(t, s, req(spec))
	for _, step := range []struct {
		delta int64
		want  int64
	}{{5, 7}, {100, 10}, {-15, -5}} {
		adjust(t, s, "p", Adjustment{Spec: spec, Delta: step.delta})
		if got := remaining(t, s, "p", spec); got != step.want {
			t.Fatalf("after adjusting by %d: remaining %d, want %d", step.delta, got, step.want)
		}
	}
	check(t, "in debt", take(t, s, req(with(spec, 1))), Result{Outcome: Denied, Wait: 36 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -5, Limit: 10, Reset: 90 * time.Second, Wait: 36 * time.Second}}})
}

func testAdjustSlidingWindow(t *testing.T, s store, clk *clock) {
	spec := slidingWindow("rpm", 10, 10*time.Second, 6)
	take(t, s, req(spec))
	clk.Advance(2 * time.Second)
	take(t, s, req(with(spec, 3)))
	// The refund gives back the 3 taken at t0+2 s, then 1 of the 6 taken at t0.
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: 4})
	if got := remaining(t, s, "p", spec); got != 5 {
		t.Fatalf("after the refund: remaining %d, want 5", got)
	}
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: -7})
	check(t, "in debt", take(t, s, req(with(spec, 1))), Result{Outcome: Denied, Wait: 9 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -2, Limit: 10, Reset: 11 * time.Second, Wait: 9 * time.Second}}})
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: 100})
	if got := remaining(t, s, "p", spec); got != 10 {
		t.Fatalf("after refunding everything: remaining %d, want 10", got)
	}
}

// testAdjustSlidingWindowAt refunds into the sub-window where the cost was counted (Result.At),
// not into a newer one: when that sub-window leaves the window, what stays counted is exactly
// what was not refunded.
func testAdjustSlidingWindowAt(t *testing.T, s store, clk *clock) {
	spec := slidingWindow("rpm", 10, 10*time.Second, 6)
	first := take(t, s, req(spec))
	if !first.At.Equal(t0) {
		t.Fatalf("first take counted at %v, want %v", first.At, t0)
	}
	clk.Advance(2 * time.Second)
	if second := take(t, s, req(with(spec, 3))); !second.At.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("second take counted at %v, want %v", second.At, t0.Add(2*time.Second))
	}
	// 4 of the first take's 6 come back from its own sub-window: 2 and 3 stay counted.
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: 4, At: first.At})
	if got := remaining(t, s, "p", spec); got != 5 {
		t.Fatalf("after the refund: remaining %d, want 5", got)
	}
	// The first take's sub-window leaves the window: the second's 3 stay (refunded from the
	// newest sub-window, the window would now count nothing and admit 3 more than its limit).
	clk.Advance(9 * time.Second)
	if got := remaining(t, s, "p", spec); got != 7 {
		t.Fatalf("once the first sub-window has left: remaining %d, want 7", got)
	}
	// A refund of a cost whose sub-window has left gives nothing back.
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: 2, At: first.At})
	if got := remaining(t, s, "p", spec); got != 7 {
		t.Fatalf("refund of a cost that has left the window: remaining %d, want 7", got)
	}
	// A reservation is counted where it proceeds, and refunded there.
	res := take(t, s, &Request{Tag: "p", Buckets: []Spec{with(spec, 10)}, MaxWait: 20 * time.Second})
	if res.Outcome != Delayed || !res.At.Equal(t0.Add(11*time.Second+res.Wait)) {
		t.Fatalf("reservation: %v counted at %v after %v, want delayed, counted when it proceeds", res.Outcome, res.At, res.Wait)
	}
	clk.Advance(res.Wait)
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: 10, At: res.At})
	if got := remaining(t, s, "p", spec); got != 10 {
		t.Fatalf("after refunding the reservation: remaining %d, want 10", got)
	}
	// One call refunds what was counted at one time.
	other := slidingWindow("rpm2", 10, 10*time.Second, 0)
	err := s.Adjust(context.Background(), "p", []Adjustment{{Spec: spec, Delta: 1, At: first.At}, {Spec: other, Delta: 1, At: res.At}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("two times in one adjust: %v, want ErrInvalid", err)
	}
}

func testAdjustQuota(t *testing.T, s store, clk *clock) {
	spec := quota("day", 10, Day, 4)
	take(t, s, req(spec))
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: 10})
	if got := remaining(t, s, "p", spec); got != 10 {
		t.Fatalf("refund above capacity: remaining %d, want 10", got)
	}
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: -25})
	// 25 used of 10 a day: 15 carried into tomorrow, 5 into the day after, when 1 more fits.
	check(t, "in debt", take(t, s, req(with(spec, 1))), Result{Outcome: Denied, Wait: 24*time.Hour + time.Minute, Blocking: 0,
		Buckets: []State{{Remaining: -15, Limit: 10, Reset: time.Minute, Wait: 24*time.Hour + time.Minute}}})
	clk.Advance(time.Minute)
	if got := remaining(t, s, "p", spec); got != -5 {
		t.Fatalf("tomorrow: remaining %d, want -5", got)
	}
}

// testMoneyBudget is a cost limit as the filter builds it: a monthly quota in a time zone in
// micro-units of money, taken in one call with a rule's token and request buckets (one shared
// key), reserved at the most each request can cost and settled by Adjust to what it cost.
func testMoneyBudget(t *testing.T, s store, clk *clock) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	clk.Set(time.Date(2026, 3, 4, 5, 6, 7, 0, paris))
	renew := time.Date(2026, 4, 1, 0, 0, 0, 0, paris).Sub(clk.Now())
	tokens := tokenBucket("rule", 1_000_000, time.Minute, 0)
	tokens.Slot = 1
	requests := tokenBucket("rule", 1000, time.Minute, 1)
	requests.Slot = 2
	budget := quota("budget:$", 250_000_000, Month, 10_000_123) // 250 USD; a request reserves 10.000123
	budget.Zone = paris
	call := func(cost int64) *Request {
		return req(with(tokens, 100), requests, with(budget, cost))
	}
	for i := range 24 {
		if res := take(t, s, call(10_000_123)); res.Outcome != Allowed {
			t.Fatalf("reservation %d: %+v", i, res)
		}
	}
	// 24 x 10.000123 = 240.002952 reserved: the 25th does not fit, and nothing of it is taken.
	res := take(t, s, call(10_000_123))
	if res.Outcome != Denied || res.Blocking != 2 || res.Wait != renew || res.Buckets[2].Remaining != 9_997_048 {
		t.Fatalf("25th: %+v, want denied by the budget until the Paris month ends (%v)", res, renew)
	}
	if got := remaining(t, s, "p", tokens); got != 1_000_000-2400 {
		t.Fatalf("tokens after the denial: %d", got)
	}
	// Settlement: one request cost 3.315 of its 10.000123, one 12.5 (more than reserved).
	adjust(t, s, "p", Adjustment{Spec: budget, Delta: 10_000_123 - 3_315_000})
	adjust(t, s, "p", Adjustment{Spec: budget, Delta: 10_000_123 - 12_500_000})
	if got := remaining(t, s, "p", budget); got != 9_997_048+6_685_123-2_499_877 {
		t.Fatalf("settled: remaining %d", got)
	}
	// Exactly what is left fits; a micro-unit more does not.
	left := int64(9_997_048 + 6_685_123 - 2_499_877)
	if res := take(t, s, req(with(budget, left+1))); res.Outcome != Denied {
		t.Fatalf("a micro-unit above what is left: %+v", res)
	}
	check(t, "exactly what is left", take(t, s, req(with(budget, left))), allowed(State{Remaining: 0, Limit: 250_000_000, Reset: renew}))
	// A failed call's refund gives everything back, never above the limit.
	adjust(t, s, "p", Adjustment{Spec: budget, Delta: left})
	if got := remaining(t, s, "p", budget); got != left {
		t.Fatalf("refund: remaining %d, want %d", got, left)
	}
	// The largest budget, a million units, is exact to the micro-unit.
	huge := quota("huge:$", MaxAmount, Month, MaxAmount-1)
	huge.Zone = paris
	take(t, s, req(huge))
	if res := take(t, s, req(with(huge, 2))); res.Outcome != Denied {
		t.Fatalf("2 micro-units above the largest budget: %+v", res)
	}
	check(t, "the last micro-unit", take(t, s, req(with(huge, 1))), allowed(State{Remaining: 0, Limit: MaxAmount, Reset: renew}))
	// The Paris month ends: the budget is whole again.
	clk.Set(time.Date(2026, 4, 1, 0, 0, 0, 0, paris))
	if got := remaining(t, s, "p", budget); got != 250_000_000 {
		t.Fatalf("a new month: remaining %d", got)
	}
}

func testCostZeroAndDebt(t *testing.T, s store, clk *clock) {
	spec := tokenBucket("tpm", 10, time.Minute, 0)
	check(t, "zero cost on a new bucket", take(t, s, req(spec)), allowed(State{Remaining: 10, Limit: 10}))
	adjust(t, s, "p", Adjustment{Spec: spec, Delta: -11})
	// A bucket in debt admits nothing, not even a zero cost, until the debt is paid.
	check(t, "zero cost in debt", take(t, s, req(spec)), Result{Outcome: Denied, Wait: 6 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -1, Limit: 10, Reset: 66 * time.Second, Wait: 6 * time.Second}}})
	clk.Advance(66 * time.Second)
	check(t, "full again", take(t, s, req(spec)), allowed(State{Remaining: 10, Limit: 10}))
}

func testClockBackwards(t *testing.T, s store, clk *clock) {
	spec := tokenBucket("tpm", 10, time.Minute, 10)
	take(t, s, req(spec))
	clk.Advance(-time.Hour) // a failover to a server whose clock is behind
	if res := take(t, s, req(with(spec, 1))); res.Outcome != Denied {
		t.Fatalf("clock went back an hour: %+v, want denied (no refill)", res)
	}
	clk.Advance(time.Hour + 6*time.Second)
	if res := take(t, s, req(with(spec, 1))); res.Outcome != Allowed || res.Buckets[0].Remaining != 0 {
		t.Fatalf("clock caught up: %+v, want one token refilled", res)
	}
}

// testHostileKeys checks that user-controlled tags and names cannot collide or break the hash tag:
// every (tag, name) pair is its own bucket, and a decision over hostile names is one slot (a
// cluster would answer CROSSSLOT otherwise).
func testHostileKeys(t *testing.T, s store, clk *clock) {
	long := strings.Repeat("x", 10<<10)
	parts := []string{"", "a", "a}{b", "a}", "{a", "{}", "a\nb", "a\r\n", "%", "%25", "#", "a b", "ü", long, long + "y", "\x00"}
	tags := []string{"", "}{", "a}{b", "{", "\n", long}
	for _, tag := range tags {
		var specs []Spec
		for _, name := range parts {
			specs = append(specs, tokenBucket(name, 1, time.Hour, 1))
		}
		specs = append(specs, slidingWindow("a", 1, time.Hour, 1)) // same name, other algorithm
		r := &Request{Tag: tag, Buckets: specs}
		if res := take(t, s, r); res.Outcome != Allowed {
			t.Fatalf("tag %.20q: first take of %d distinct buckets: %+v", tag, len(specs), res)
		}
		for i := range specs {
			res := take(t, s, &Request{Tag: tag, Buckets: specs[i : i+1]})
			if res.Outcome != Denied {
				t.Fatalf("tag %.20q name %.20q: second take %v, want denied", tag, specs[i].Name, res.Outcome)
			}
		}
	}
	// Fresh tags: if two tags collided, their buckets would already be empty.
	for _, tag := range []string{"x", "x}", "{x", "x\n", long + "z"} {
		if res := take(t, s, &Request{Tag: tag, Buckets: []Spec{tokenBucket("a", 1, time.Hour, 1)}}); res.Outcome != Allowed {
			t.Fatalf("tag %.20q collides: %+v", tag, res)
		}
	}
}

func testInvalid(t *testing.T, s store, clk *clock) {
	ok := tokenBucket("a", 10, time.Minute, 1)
	for name, r := range map[string]*Request{
		"no buckets":       {Tag: "p"},
		"too many buckets": {Tag: "p", Buckets: make([]Spec, MaxBuckets+1)},
		"negative wait":    {Tag: "p", Buckets: []Spec{ok}, MaxWait: -1},
		"zero limit":       req(tokenBucket("a", 0, time.Minute, 1)),
		"huge limit":       req(tokenBucket("a", MaxAmount+1, time.Minute, 1)),
		"negative cost":    req(with(ok, -1)),
		"huge cost":        req(with(ok, MaxAmount+1)),
		"short period":     req(tokenBucket("a", 10, time.Second-1, 1)),
		"long period":      req(slidingWindow("a", 10, MaxPeriod+1, 1)),
		"nan floor":        req(Spec{Name: "a", Limit: 1, Period: time.Second, Floor: math.NaN()}),
		"floor above 1":    req(Spec{Name: "a", Limit: 1, Period: time.Second, Floor: 1.5}),
		"negative burst":   req(Spec{Name: "a", Limit: 1, Period: time.Second, Burst: -1}),
		"bad algorithm":    req(Spec{Name: "a", Limit: 1, Period: time.Second, Algorithm: 9}),
		"bad calendar":     req(Spec{Name: "a", Limit: 1, Algorithm: Quota, Calendar: 9}),
		"duplicate":        req(ok, ok),
		"duplicate slot":   req(Spec{Name: "a", Limit: 1, Period: time.Second, Slot: 2}, Spec{Name: "a", Limit: 2, Period: time.Second, Slot: 2}),
		"slot too high":    req(Spec{Name: "a", Limit: 1, Period: time.Second, Slot: MaxSlots + 1}),
		"slot of a window": req(Spec{Name: "a", Limit: 1, Period: time.Second, Slot: 1, Algorithm: SlidingWindow}),
		"lease cost 2":     leased("a", with(concurrency("c", 2, time.Minute), 2)),
		"lease missing":    req(concurrency("c", 2, time.Minute)),
		"lease bad byte":   leased("a b", concurrency("c", 2, time.Minute)),
		"lease too long":   leased(strings.Repeat("a", 65), concurrency("c", 2, time.Minute)),
		"lease dash":       leased("-", concurrency("c", 2, time.Minute)),
		"lease burst":      leased("a", Spec{Name: "c", Algorithm: Concurrency, Limit: 2, Period: time.Minute, Burst: 3, Cost: 1}),
		"lease short ttl":  leased("a", concurrency("c", 2, time.Millisecond)),
	} {
		if _, err := s.Take(context.Background(), r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Take error %v, want ErrInvalid", name, err)
		}
	}
	for name, adj := range map[string][]Adjustment{
		"none":       nil,
		"huge delta": {{Spec: ok, Delta: -MaxAmount - 1}},
		"duplicate":  {{Spec: ok, Delta: 1}, {Spec: ok, Delta: 2}},
		"two leases": {{Spec: concurrency("c", 2, time.Minute), Delta: 1, Lease: "a"}, {Spec: concurrency("d", 2, time.Minute), Delta: 1, Lease: "b"}},
		"bad lease":  {{Spec: concurrency("c", 2, time.Minute), Delta: 1, Lease: "a{b"}},
	} {
		if err := s.Adjust(context.Background(), "p", adj); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Adjust error %v, want ErrInvalid", name, err)
		}
	}
	for name, lv := range map[string][]Level{
		"none":       nil,
		"huge level": {{Spec: ok, Remaining: MaxAmount + 1}},
		"duplicate":  {{Spec: ok, Remaining: 1}, {Spec: ok, Remaining: 2}},
	} {
		if err := s.Lower(context.Background(), "p", lv); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Lower error %v, want ErrInvalid", name, err)
		}
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Errorf("Ping: %v", err)
	}
}

func concurrency(name string, limit int64, ttl time.Duration) Spec {
	return Spec{Name: name, Algorithm: Concurrency, Limit: limit, Period: ttl, Cost: 1}
}

func leased(lease string, buckets ...Spec) *Request {
	return &Request{Tag: "p", Buckets: buckets, Lease: lease}
}

func testConcurrency(t *testing.T, s store, clk *clock) {
	c := concurrency("inflight", 2, 10*time.Second)
	check(t, "first lease", take(t, s, leased("a", c)), allowed(State{Remaining: 1, Limit: 2, Reset: 10 * time.Second}))
	check(t, "the same lease again is renewed", take(t, s, leased("a", c)), allowed(State{Remaining: 1, Limit: 2, Reset: 10 * time.Second}))
	clk.Advance(time.Second)
	check(t, "second lease", take(t, s, leased("b", c)), allowed(State{Remaining: 0, Limit: 2, Reset: 10 * time.Second}))
	full := Result{Outcome: Denied, Wait: time.Second, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: 2, Reset: 10 * time.Second, Wait: time.Second}}}
	check(t, "full", take(t, s, leased("c", c)), full)
	r := leased("c", c)
	r.MaxWait = 30 * time.Second
	check(t, "full denies even within max_wait", take(t, s, r), full)

	// All or nothing with the token buckets of the same decision.
	tpm := tokenBucket("tpm", 100, time.Minute, 40)
	res := take(t, s, leased("c", tpm, c))
	if res.Outcome != Denied || res.Blocking != 1 {
		t.Fatalf("tokens and a full concurrency bucket: %+v, want denied by bucket 1", res)
	}
	if got := remaining(t, s, "p", tpm); got != 100 {
		t.Fatalf("a denial debited the token bucket: remaining %d", got)
	}

	// Releasing a lease frees its slot; releasing it again, or a lease never taken, does nothing.
	adjust(t, s, "p", Adjustment{Spec: c, Delta: 1, Lease: "a"})
	adjust(t, s, "p", Adjustment{Spec: c, Delta: 1, Lease: "a"})
	adjust(t, s, "p", Adjustment{Spec: c, Delta: 1, Lease: "zz"})
	check(t, "after a release", take(t, s, leased("c", tpm, c)), allowed(
		State{Remaining: 60, Limit: 100, Reset: 24 * time.Second},
		State{Remaining: 0, Limit: 2, Reset: 10 * time.Second}))
	// Leases b and c expire at t0+11s and t0+11s: the wait is until the first one expires.
	clk.Advance(9500 * time.Millisecond)
	res = take(t, s, leased("d", c))
	if res.Outcome != Denied || res.Wait != 500*time.Millisecond {
		t.Fatalf("0.5 s before the leases expire: %+v, want denied for 0.5 s", res)
	}
	clk.Advance(500 * time.Millisecond)
	check(t, "leases expired", take(t, s, leased("d", c)), allowed(State{Remaining: 1, Limit: 2, Reset: 10 * time.Second}))
	// A zero-cost take peeks without a lease.
	peek := with(c, 0)
	check(t, "peek", take(t, s, req(peek)), allowed(State{Remaining: 1, Limit: 2, Reset: 10 * time.Second}))
	// A floor keeps the last slots for the classes without one.
	floored := c
	floored.Floor = 0.5
	if res := take(t, s, leased("e", floored)); res.Outcome != Denied {
		t.Fatalf("a floor of 0.5 on the last of 2 slots: %+v, want denied", res)
	}
	clk.Advance(10 * time.Second)
	check(t, "all expired", take(t, s, req(peek)), allowed(State{Remaining: 2, Limit: 2}))
}

func testLower(t *testing.T, s store, clk *clock) {
	ctx := context.Background()
	lower := func(l ...Level) {
		t.Helper()
		if err := s.Lower(ctx, "p", l); err != nil {
			t.Fatalf("Lower: %v", err)
		}
	}
	tb := tokenBucket("tpm", 100, time.Minute, 10)
	sw := slidingWindow("sw", 100, 10*time.Second, 10)
	qd := quota("qd", 100, Day, 10)
	c := concurrency("inflight", 2, 10*time.Second)
	take(t, s, leased("a", tb, sw, qd, c))
	for _, step := range []struct {
		what   string
		target int64
		want   int64
	}{{"lowered", 50, 50}, {"never raised", 80, 50}, {"into debt", -20, -20}} {
		lower(Level{Spec: tb, Remaining: step.target}, Level{Spec: sw, Remaining: step.target},
			Level{Spec: qd, Remaining: step.target}, Level{Spec: c, Remaining: 0})
		for _, spec := range []Spec{tb, sw, qd} {
			if got := remaining(t, s, "p", spec); got != step.want {
				t.Fatalf("%s: %s remaining %d, want %d", step.what, spec.Name, got, step.want)
			}
		}
	}
	if got := remaining(t, s, "p", with(c, 0)); got != 1 {
		t.Fatalf("a level never touches leases: remaining %d, want 1", got)
	}
	// From -20 at 100 per minute, a cost of 10 fits after 30 tokens: 18 s. This is how a
	// provider 429 pauses a bucket: the level c - retry_after x rate.
	check(t, "paused", take(t, s, req(with(tb, 10))), Result{Outcome: Denied, Wait: 18 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: -20, Limit: 100, Reset: 72 * time.Second, Wait: 18 * time.Second}}})
	clk.Advance(18 * time.Second)
	check(t, "after the pause", take(t, s, req(with(tb, 10))), allowed(State{Remaining: 0, Limit: 100, Reset: time.Minute}))
	// A missing bucket is full: lowering it creates it.
	fresh := tokenBucket("fresh", 100, time.Minute, 0)
	lower(Level{Spec: fresh, Remaining: 30})
	if got := remaining(t, s, "p", fresh); got != 30 {
		t.Fatalf("a fresh bucket lowered to 30: remaining %d", got)
	}
}

// testSharedKey: token buckets sharing a key (Spec.Slot) behave as buckets of their own,
// whichever of them a call names, and the same name without a slot is another bucket.
func testSharedKey(t *testing.T, s store, clk *clock) {
	ctx := context.Background()
	tpm := Spec{Name: "pair", Limit: 100, Period: time.Minute, Slot: 1}
	rpm := Spec{Name: "pair", Limit: 10, Period: time.Minute, Slot: 2}
	solo := Spec{Name: "pair", Limit: 100, Period: time.Minute}
	check(t, "both", take(t, s, req(with(tpm, 60), with(rpm, 1))), allowed(
		State{Remaining: 40, Limit: 100, Reset: 36 * time.Second},
		State{Remaining: 9, Limit: 10, Reset: 6 * time.Second}))
	check(t, "tokens alone, denied", take(t, s, req(with(tpm, 50))), Result{Outcome: Denied, Wait: 6 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: 40, Limit: 100, Reset: 36 * time.Second, Wait: 6 * time.Second}}})
	check(t, "requests alone", take(t, s, req(with(rpm, 9))), allowed(State{Remaining: 0, Limit: 10, Reset: time.Minute}))
	check(t, "no slot: another bucket", take(t, s, req(with(solo, 100))), allowed(State{Remaining: 0, Limit: 100, Reset: time.Minute}))
	clk.Advance(6 * time.Second) // tokens 40 → 50, requests 0 → 1
	if err := s.Adjust(ctx, "p", []Adjustment{{Spec: tpm, Delta: 50}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Lower(ctx, "p", []Level{{Spec: rpm, Remaining: 0}}); err != nil {
		t.Fatal(err)
	}
	// Requests first: a call may list a key's buckets in any order.
	check(t, "both, requests first", take(t, s, req(with(rpm, 1), with(tpm, 1))), Result{Outcome: Denied, Wait: 6 * time.Second, Blocking: 0,
		Buckets: []State{{Remaining: 0, Limit: 10, Reset: time.Minute, Wait: 6 * time.Second}, {Remaining: 100, Limit: 100}}})
	check(t, "solo untouched", take(t, s, req(with(solo, 0))), allowed(State{Remaining: 10, Limit: 100, Reset: 54 * time.Second}))
}

// peekAll peeks specs under tag "p", failing t on an error.
func peekAll(t *testing.T, s store, specs ...Spec) []Snapshot {
	t.Helper()
	got, err := s.Peek(context.Background(), "p", specs)
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	return got
}

func checkPeek(t *testing.T, what string, got, want []Snapshot) {
	t.Helper()
	opt := cmp.Comparer(func(a, b time.Duration) bool {
		d := a - b
		return d >= -time.Microsecond && d <= time.Microsecond
	})
	if diff := cmp.Diff(want, got, opt); diff != "" {
		t.Fatalf("%s: peek mismatch (-want +got):\n%s", what, diff)
	}
}

// snapshotOf is what a peek reports of a bucket a take left in state st, holding leases.
func snapshotOf(st State, leases int64) Snapshot {
	return Snapshot{Remaining: st.Remaining, Limit: st.Limit, Reset: st.Reset, Leases: leases}
}

// peekSet is one bucket of every algorithm and a shared key's pair.
func peekSet() []Spec {
	return []Spec{
		tokenBucket("tpm", 10, time.Minute, 3),
		slidingWindow("sw", 10, time.Minute, 2),
		quota("day", 10, Day, 4),
		concurrency("inflight", 2, 10*time.Second),
		{Name: "pair", Limit: 100, Period: time.Minute, Slot: 1, Cost: 60},
		{Name: "pair", Limit: 10, Period: time.Minute, Slot: 2, Cost: 1},
	}
}

// testPeek: a peek reports what the last take left, twice the same, and the next decision sees
// exactly that level: a peek debits nothing, refills nothing early, takes no lease.
func testPeek(t *testing.T, s store, clk *clock) {
	specs := peekSet()
	full := []Snapshot{
		{Remaining: 10, Limit: 10},
		{Remaining: 10, Limit: 10},
		{Remaining: 10, Limit: 10, Reset: time.Minute}, // t0 is a minute before midnight
		{Remaining: 2, Limit: 2},
		{Remaining: 100, Limit: 100},
		{Remaining: 10, Limit: 10},
	}
	checkPeek(t, "untouched buckets are full", peekAll(t, s, specs...), full)
	res := take(t, s, leased("a", specs...))
	if res.Outcome != Allowed {
		t.Fatalf("take: %+v, want allowed", res)
	}
	want := make([]Snapshot, len(specs))
	for i, st := range res.Buckets {
		want[i] = snapshotOf(st, 0)
	}
	want[3].Leases = 1
	checkPeek(t, "hardcoded token bucket", want[:1], []Snapshot{{Remaining: 7, Limit: 10, Reset: 18 * time.Second}})
	checkPeek(t, "first peek", peekAll(t, s, specs...), want)
	checkPeek(t, "second peek", peekAll(t, s, specs...), want)

	// The next decision starts from the level peeked.
	check(t, "take after peeks", take(t, s, req(with(specs[0], 7))), allowed(State{Remaining: 0, Limit: 10, Reset: time.Minute}))
	clk.Advance(6 * time.Second) // a token back
	checkPeek(t, "peek after a refill", peekAll(t, s, specs[0]), []Snapshot{{Remaining: 1, Limit: 10, Reset: 54 * time.Second}})
	check(t, "take after the refill", take(t, s, req(with(specs[0], 1))), allowed(State{Remaining: 0, Limit: 10, Reset: time.Minute}))

	// A peek takes no lease: the concurrency bucket still has one slot.
	check(t, "second lease", take(t, s, leased("b", specs[3])), allowed(State{Remaining: 0, Limit: 2, Reset: 10 * time.Second}))
	checkPeek(t, "two leases held", peekAll(t, s, specs[3]), []Snapshot{{Remaining: 0, Limit: 2, Reset: 10 * time.Second, Leases: 2}})
	clk.Advance(20 * time.Second)
	checkPeek(t, "leases expired", peekAll(t, s, specs[3]), []Snapshot{{Remaining: 2, Limit: 2}})

	// Peek ignores costs and floors, validates the buckets like a take.
	if _, err := s.Peek(context.Background(), "p", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("peek of no bucket: %v, want ErrInvalid", err)
	}
}

// testReset: a reset makes the buckets full; a shared key's other slots go with it; buckets not
// named keep their state.
func testReset(t *testing.T, s store, clk *clock) {
	ctx := context.Background()
	specs := peekSet()
	other := tokenBucket("other", 10, time.Minute, 5)
	if res := take(t, s, leased("a", append(specs, other)...)); res.Outcome != Allowed {
		t.Fatalf("take: %+v, want allowed", res)
	}
	if err := s.Reset(ctx, "p", specs); err != nil {
		t.Fatal(err)
	}
	checkPeek(t, "after a reset", peekAll(t, s, append(specs, other)...), []Snapshot{
		{Remaining: 10, Limit: 10},
		{Remaining: 10, Limit: 10},
		{Remaining: 10, Limit: 10, Reset: time.Minute},
		{Remaining: 2, Limit: 2},
		{Remaining: 100, Limit: 100},
		{Remaining: 10, Limit: 10},
		{Remaining: 5, Limit: 10, Reset: 30 * time.Second},
	})
	// Slot 1 alone takes slot 2 of its key with it.
	if res := take(t, s, req(specs[4], specs[5])); res.Outcome != Allowed {
		t.Fatalf("take pair: %+v", res)
	}
	if err := s.Reset(ctx, "p", specs[4:5]); err != nil {
		t.Fatal(err)
	}
	checkPeek(t, "a shared key's slots", peekAll(t, s, specs[4], specs[5]), []Snapshot{{Remaining: 100, Limit: 100}, {Remaining: 10, Limit: 10}})
	if err := s.Reset(ctx, "p", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reset of no bucket: %v, want ErrInvalid", err)
	}
}
