package bucket

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redisstats"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// TestRedisRetryAfter checks the returned wait against the server's real clock: retrying after
// exactly Wait succeeds, retrying after 95% of it fails.
func TestRedisRetryAfter(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cl := redistest.StartCluster(t)
	clients := map[string]redis.UniversalClient{"redis": srv.Client(), "cluster": cl.Client()}
	scenarios := []struct {
		name         string
		drain, probe []Spec
	}{
		{"token_bucket",
			[]Spec{tokenBucket("tb", 10, 4*time.Second, 10)},
			[]Spec{tokenBucket("tb", 10, 4*time.Second, 5)}}, // 2 s
		{"sliding_window",
			[]Spec{slidingWindow("sw", 10, 2*time.Second, 10)},
			[]Spec{slidingWindow("sw", 10, 2*time.Second, 4)}}, // 2 s to 2.2 s
		{"two_buckets",
			[]Spec{tokenBucket("tb", 10, 2*time.Second, 10), slidingWindow("sw", 10, 2*time.Second, 10)},
			[]Spec{tokenBucket("tb", 10, 2*time.Second, 4), slidingWindow("sw", 10, 2*time.Second, 1)}},
	}
	for name, c := range clients {
		for _, sc := range scenarios {
			t.Run(name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				retryAfter(t, c, sc.drain, sc.probe)
			})
		}
	}
}

func retryAfter(t *testing.T, c redis.UniversalClient, drain, probe []Spec) {
	ctx := context.Background()
	for range 3 {
		s := NewRedis(c, RedisOptions{Prefix: uniquePrefix()})
		if res := take(t, s, &Request{Tag: "p", Buckets: drain}); res.Outcome != Allowed {
			t.Fatalf("drain: %+v", res)
		}
		sent := time.Now()
		res, err := s.Take(ctx, &Request{Tag: "p", Buckets: probe})
		recv := time.Now()
		if err != nil || res.Outcome != Denied || res.Wait < time.Second {
			t.Fatalf("probe: %+v, %v; want denied for a second or more", res, err)
		}
		wait := res.Wait
		time.Sleep(time.Until(recv.Add(wait * 95 / 100)))
		early := take(t, s, &Request{Tag: "p", Buckets: probe})
		if time.Since(sent) >= wait {
			// The early probe reached Redis too late to prove anything (a loaded machine); again.
			t.Logf("early probe took too long (%v after the denial, wait %v); retrying", time.Since(sent), wait)
			continue
		}
		if early.Outcome != Denied {
			t.Fatalf("at 95%% of the wait %v: %+v, want denied", wait, early)
		}
		time.Sleep(time.Until(recv.Add(wait)))
		if res := take(t, s, &Request{Tag: "p", Buckets: probe}); res.Outcome != Allowed {
			t.Fatalf("after the wait %v: %+v, want allowed", wait, res)
		}
		return
	}
	t.Fatal("no conclusive early probe in 3 attempts")
}

// TestRedisScriptCacheLoss checks that SCRIPT FLUSH and a restart are invisible to callers.
func TestRedisScriptCacheLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	c, err := NewClient(srv.URL(), ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := NewRedis(c, RedisOptions{Prefix: "rl:"})
	r := req(tokenBucket("a", 10, time.Minute, 1))
	take(t, s, r)
	srv.Do(ctx, "SCRIPT", "FLUSH")
	if res := take(t, s, r); res.Buckets[0].Remaining != 8 {
		t.Fatalf("after SCRIPT FLUSH: %+v", res)
	}
	srv.Restart()
	if res := take(t, s, r); res.Buckets[0].Remaining != 9 {
		t.Fatalf("after a restart (state lost, script cache empty): %+v, want a fresh bucket", res)
	}

	cl := redistest.StartCluster(t)
	cc := cl.Client()
	cs := NewRedis(cc, RedisOptions{Prefix: "rl:"})
	take(t, cs, r)
	for _, n := range cl.Nodes {
		n.Do(ctx, "SCRIPT", "FLUSH")
	}
	if res := take(t, cs, r); res.Buckets[0].Remaining != 8 {
		t.Fatalf("cluster after SCRIPT FLUSH: %+v", res)
	}
}

// TestRedisStorage checks what a bucket leaves in Redis: its expiry (once full again, plus the
// margin), its deletion when full, and its size, logged for the package documentation.
func TestRedisStorage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c, clk := fakeTimeServer(t, "rl:")
	key := func(spec Spec) string {
		return s.keys("openai", 1, func(int) *Spec { return &spec })[0]
	}
	pttl := func(spec Spec) time.Duration {
		d, err := c.PTTL(ctx, key(spec)).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	r := func(specs ...Spec) *Request { return &Request{Tag: "openai", Buckets: specs} }

	tb := tokenBucket("tenant-42:gpt-4o:tpm", 30000, time.Minute, 3000)
	sw := slidingWindow("tenant-42:gpt-4o:rpm", 500, time.Minute, 1)
	day := quota("tenant-42:day", 1_000_000, Day, 3000)
	month := quota("tenant-42:month", 1_000_000, Month, 3000)
	take(t, s, r(tb, sw, day, month))
	// Fill every sub-window of the sliding window: its largest size.
	for range SlidingWindows {
		clk.Advance(6 * time.Second)
		take(t, s, r(sw))
	}
	for _, tc := range []struct {
		spec Spec
		ttl  time.Duration // expected PTTL, to the margin
		max  int64         // MEMORY USAGE bound
	}{
		{tb, 0, 160},
		{sw, 66 * time.Second, 256},
		{day, 0, 140},
		{month, 0, 140},
	} {
		got := pttl(tc.spec)
		if tc.ttl != 0 && (got <= tc.ttl || got > tc.ttl+time.Second) {
			t.Errorf("%s: PTTL %v, want %v plus the 1 s margin", tc.spec.Name, got, tc.ttl)
		}
		size, err := c.MemoryUsage(ctx, key(tc.spec), 0).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("MEMORY USAGE %-40q %4d bytes (%s)", key(tc.spec), size, tc.spec.Algorithm)
		if size > tc.max {
			t.Errorf("%s: MEMORY USAGE %d bytes, want at most %d", tc.spec.Name, size, tc.max)
		}
	}

	// Expiries right after a take, on a fresh clock.
	clk.Set(t0)
	s = newFakeTimeRedis(c, RedisOptions{Prefix: "rl2:"}, clk.Now)
	tb.Cost, day.Cost = 3000, 4
	take(t, s, r(tb, day))
	// A token bucket's expiry is set 10 s later than needed, and kept by the writes it covers.
	for _, step := range []struct {
		cost     int64
		ttl      time.Duration
		describe string
	}{
		{3000, 17 * time.Second, "6 s to refill, the 1 s margin and 10 s of slack"},
		{1000, 17 * time.Second, "kept: 8 s to refill and the margin fit in it"},
		{5000, 29 * time.Second, "set again: 18 s to refill, the margin and the slack"},
	} {
		if step.cost != 3000 {
			take(t, s, r(with(tb, step.cost)))
		}
		if got := pttl(tb); got <= step.ttl-time.Second || got > step.ttl {
			t.Errorf("token bucket after a take of %d: PTTL %v, want %v (%s)", step.cost, got, step.ttl, step.describe)
		}
		if n := c.StrLen(ctx, key(tb)).Val(); n != 24 {
			t.Errorf("token bucket: a %d-byte value, want 24", n)
		}
	}
	if got := pttl(day); got <= time.Minute || got > time.Minute+time.Second {
		t.Errorf("%s: PTTL %v, want a minute plus the 1 s margin", day.Name, got)
	}
	// A month's debt keeps the key until it is paid: 3.5e6 used of 1e6 a month is paid on 1 June.
	adjust(t, s, "openai", Adjustment{Spec: month, Delta: -3_500_000})
	want := time.Date(2024, 6, 1, 0, 0, 0, 0, time.UTC).Sub(t0)
	if got := pttl(month); got <= want || got > want+time.Second {
		t.Errorf("month in debt: PTTL %v, want %v plus the margin", got, want)
	}
	// A refund to full deletes the key.
	adjust(t, s, "openai", Adjustment{Spec: tb, Delta: 9000}, Adjustment{Spec: day, Delta: 4})
	for _, spec := range []Spec{tb, day} {
		if n := c.Exists(ctx, key(spec)).Val(); n != 0 {
			t.Errorf("%s: a full bucket is still stored", spec.Name)
		}
	}
	// A decision that debits nothing writes nothing.
	before := c.DBSize(ctx).Val()
	take(t, s, r(with(sw, 0), with(tb, 0)))
	if after := c.DBSize(ctx).Val(); after != before {
		t.Errorf("a zero-cost take created %d keys", after-before)
	}
}

// TestRedisSharedKey checks the storage of token buckets that share a key (Spec.Slot): one key
// and one SET for a decision's pair, an expiry that covers every slot, the slots a call does not
// touch kept as they were, and the key deleted only when it holds nothing but full buckets.
func TestRedisSharedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c, clk := fakeTimeServer(t, "sk:")
	tpm := Spec{Name: "rule|t2:42", Limit: 30000, Period: time.Minute, Slot: 1}
	rpm := Spec{Name: "rule|t2:42", Limit: 500, Period: time.Minute, Slot: 2}
	key := s.keys("openai", 1, func(int) *Spec { return &tpm })[0]
	if got := s.keys("openai", 1, func(int) *Spec { return &rpm })[0]; got != key || key != "sk:{openai}G:rule%7Ct2:42" {
		t.Fatalf("keys %q and %q, want both sk:{openai}G:rule%%7Ct2:42", key, got)
	}
	pair := func(tokens, requests int64) *Request {
		return &Request{Tag: "openai", Buckets: []Spec{with(tpm, tokens), with(rpm, requests)}}
	}
	pttl := func() time.Duration { return c.PTTL(ctx, key).Val() }
	sets := func() int64 {
		calls, err := redisstats.Calls(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		return calls["set"]
	}

	before := sets()
	res := take(t, s, pair(3000, 1))
	if n := sets() - before; n != 1 {
		t.Errorf("a take of a shared key's two buckets ran %d SETs, want 1", n)
	}
	if res.Buckets[0].Remaining != 27000 || res.Buckets[1].Remaining != 499 {
		t.Errorf("remaining %d and %d, want 27000 and 499", res.Buckets[0].Remaining, res.Buckets[1].Remaining)
	}
	if n := c.DBSize(ctx).Val(); n != 1 {
		t.Errorf("%d keys, want 1", n)
	}
	if n := c.StrLen(ctx, key).Val(); n != 40 {
		t.Errorf("a %d-byte value, want 40", n)
	}
	size, err := c.MemoryUsage(ctx, key, 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("MEMORY USAGE %q %d bytes (two token buckets)", key, size)
	if size > 160 {
		t.Errorf("MEMORY USAGE %d bytes, want at most 160", size)
	}
	// 6 s to refill the tokens (the requests need 0.12 s), the 1 s margin and 10 s of slack.
	if got := pttl(); got <= 16*time.Second || got > 17*time.Second {
		t.Errorf("PTTL %v, want 17 s", got)
	}
	// The requests alone, now the slower to refill: the expiry covers them, the tokens are kept.
	take(t, s, &Request{Tag: "openai", Buckets: []Spec{with(rpm, 299)}})
	if got := pttl(); got <= 46*time.Second || got > 47*time.Second {
		t.Errorf("after the requests alone: PTTL %v, want 47 s (36 s to refill 300 of 500, margin, slack)", got)
	}
	if got := remaining(t, s, "openai", tpm); got != 27000 {
		t.Errorf("tokens after a take of the requests alone: %d, want 27000", got)
	}
	// A refund of the tokens alone to full keeps the key, which still holds the requests' debt.
	adjust(t, s, "openai", Adjustment{Spec: tpm, Delta: 3000})
	if got := remaining(t, s, "openai", rpm); got != 200 {
		t.Errorf("requests after a refund of the tokens alone: %d, want 200", got)
	}
	if got := remaining(t, s, "openai", tpm); got != 30000 {
		t.Errorf("tokens after their refund: %d, want 30000", got)
	}
	// Both full in one call: the key goes.
	adjust(t, s, "openai", Adjustment{Spec: tpm, Delta: 1}, Adjustment{Spec: rpm, Delta: 300})
	if n := c.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("a key of full buckets is still stored")
	}
	// A call whose buckets of one key are apart writes it twice; the second write keeps the
	// first's expiry, which the tokens need (50 s to refill, the margin and the slack).
	other := tokenBucket("other", 10, time.Minute, 1)
	take(t, s, &Request{Tag: "openai", Buckets: []Spec{with(tpm, 25000), other, with(rpm, 1)}})
	if got := pttl(); got <= 60*time.Second || got > 61*time.Second {
		t.Errorf("buckets of one key apart in a call: PTTL %v, want 61 s", got)
	}
	// A bucket in slot 4 alone: slots 1 to 3 are written full.
	far := Spec{Name: "far", Limit: 10, Period: time.Minute, Slot: 4, Cost: 10}
	near := Spec{Name: "far", Limit: 10, Period: time.Minute, Slot: 1}
	take(t, s, &Request{Tag: "openai", Buckets: []Spec{far}})
	farKey := s.keys("openai", 1, func(int) *Spec { return &far })[0]
	if n := c.StrLen(ctx, farKey).Val(); n != 72 {
		t.Errorf("slot 4 alone: a %d-byte value, want 72", n)
	}
	if got := remaining(t, s, "openai", near); got != 10 {
		t.Errorf("slot 1 of a key written by slot 4: %d, want 10", got)
	}
	if got := remaining(t, s, "openai", far); got != 0 {
		t.Errorf("slot 4: %d, want 0", got)
	}
	clk.Advance(30 * time.Second)
	if got := remaining(t, s, "openai", far); got != 5 {
		t.Errorf("slot 4 after 30 s: %d, want 5", got)
	}
	// A rule's four first windows debited together, in the order a rule lists them (input,
	// output, requests, tokens): one value of four slots, each at its place.
	quad := []Spec{
		{Name: "quad", Limit: 3000, Period: time.Minute, Slot: 3, Cost: 300},
		{Name: "quad", Limit: 400, Period: time.Minute, Slot: 4, Cost: 40},
		{Name: "quad", Limit: 50, Period: time.Minute, Slot: 2, Cost: 1},
		{Name: "quad", Limit: 6000, Period: time.Minute, Slot: 1, Cost: 600},
	}
	take(t, s, &Request{Tag: "openai", Buckets: quad})
	take(t, s, &Request{Tag: "openai", Buckets: quad})
	quadKey := s.keys("openai", 1, func(int) *Spec { return &quad[0] })[0]
	if n := c.StrLen(ctx, quadKey).Val(); n != 72 {
		t.Errorf("four slots: a %d-byte value, want 72", n)
	}
	if got := c.PTTL(ctx, quadKey).Val(); got <= 0 || got > 61*time.Second {
		t.Errorf("four slots: PTTL %v", got)
	}
	for _, q := range quad {
		alone := q
		alone.Cost = 0
		if got, want := remaining(t, s, "openai", alone), q.Limit-2*q.Cost; got != want {
			t.Errorf("slot %d after two debits of %d: %d, want %d", q.Slot, q.Cost, got, want)
		}
	}
}

// TestRedisForeignValue checks that a token bucket's or a quota's key holding something the
// script did not write (a string of another length, a hash as earlier builds wrote) reads as a full
// bucket and is overwritten by the next debit, instead of failing every decision until it expires.
func TestRedisForeignValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	c := srv.Client()
	s := NewRedis(c, RedisOptions{Prefix: "fv:"})
	tb := tokenBucket("tpm", 1000, time.Minute, 100)
	day := quota("day", 1000, Day, 100)
	key := func(spec Spec) string {
		return s.keys("p", 1, func(int) *Spec { return &spec })[0]
	}
	for _, tc := range []struct {
		name  string
		plant func(key string) error
	}{
		{"short string", func(k string) error { return c.Set(ctx, k, "garbage", 0).Err() }},
		{"hash", func(k string) error { return c.HSet(ctx, k, "l", "3", "t", "1").Err() }},
	} {
		for _, spec := range []Spec{tb, day} {
			if err := tc.plant(key(spec)); err != nil {
				t.Fatal(err)
			}
			if res := take(t, s, req(spec)); res.Outcome != Allowed || res.Buckets[0].Remaining != 900 {
				t.Errorf("%s in %s: %+v, want allowed with 900 left", tc.name, spec.Name, res.Buckets[0])
			}
			want := int64(16) // a quota
			if spec.Algorithm == TokenBucket {
				want = 24
			}
			if typ, n := c.Type(ctx, key(spec)).Val(), c.StrLen(ctx, key(spec)).Val(); typ != "string" || n != want {
				t.Errorf("%s in %s: left a %s of %d bytes, want a string of %d", tc.name, spec.Name, typ, n, want)
			}
			if got := remaining(t, s, "p", spec); got != 900 {
				t.Errorf("%s in %s: %d left after the debit, want 900", tc.name, spec.Name, got)
			}
			c.Del(ctx, key(spec))
		}
	}
}

// TestRedisEarlierValue checks that a token bucket as builds before the stored expiry wrote it
// (16 bytes: level and time, no expiry) keeps its level, and is rewritten with its expiry.
func TestRedisEarlierValue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c, clk := fakeTimeServer(t, "ev:")
	tb := tokenBucket("tpm", 6000, time.Minute, 100) // 100 a second
	key := s.keys("p", 1, func(int) *Spec { return &tb })[0]
	var v []byte
	v = binary.LittleEndian.AppendUint64(v, math.Float64bits(500))
	v = binary.LittleEndian.AppendUint64(v, math.Float64bits(float64(t0.UnixMicro())))
	if err := c.Set(ctx, key, v, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // refills 100
	if res := take(t, s, req(tb)); res.Outcome != Allowed || res.Buckets[0].Remaining != 500 {
		t.Errorf("take: %+v, want allowed with 500 left", res.Buckets[0])
	}
	if n := c.StrLen(ctx, key).Val(); n != 24 {
		t.Errorf("rewritten as %d bytes, want 24", n)
	}
	// 5500 to refill at 100 a second: 55 s, the 1 s margin and 10 s of slack.
	if got := c.PTTL(ctx, key).Val(); got <= 65*time.Second || got > 66*time.Second {
		t.Errorf("PTTL %v, want 66 s", got)
	}
}

// TestDifferential drives the Memory and Redis stores with the same random operations on the same
// clock and requires identical results, bit for bit.
func TestDifferential(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	clk := newClock(t0)
	mem := NewMemory(MemoryOptions{Now: clk.Now})
	red := newFakeTimeRedis(srv.Client(), RedisOptions{Prefix: "diff:"}, clk.Now)
	specs := []Spec{
		tokenBucket("tb", 100, time.Minute, 0),
		{Name: "burst", Limit: 7, Burst: 30, Period: 7 * time.Second},
		{Name: "big", Limit: 999_999_937, Period: 29 * 24 * time.Hour},
		slidingWindow("sw", 50, 10*time.Second, 0),
		slidingWindow("sw3", 13, 3*time.Second+7*time.Microsecond, 0),
		quota("day", 200, Day, 0),
		quota("month", 1000, Month, 0),
		// Token buckets sharing one key, in any order and subset; slot 3 is never written, and
		// "pair" without a slot is a bucket of its own.
		{Name: "pair", Limit: 100, Period: time.Minute, Slot: 1},
		{Name: "pair", Limit: 5, Period: 10 * time.Second, Slot: 2},
		{Name: "pair", Limit: 1000, Burst: 2000, Period: 7 * time.Second, Slot: 4},
		{Name: "pair", Limit: 60, Period: time.Minute},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	ctx := context.Background()
	for i := range 2000 {
		switch rng.IntN(10) {
		case 0:
			clk.Advance(time.Duration(rng.Int64N(int64(6 * time.Hour))).Truncate(time.Microsecond))
		default:
			clk.Advance(time.Duration(rng.Int64N(int64(2 * time.Second))).Truncate(time.Microsecond))
		}
		var picked []Spec
		for _, j := range rng.Perm(len(specs))[:1+rng.IntN(3)] {
			s := specs[j]
			c := s.Capacity()
			s.Cost = rng.Int64N(c/3 + 2)
			if rng.IntN(20) == 0 {
				s.Cost = c + 1
			}
			if rng.IntN(4) == 0 {
				s.Floor = float64(rng.IntN(10)) / 10
			}
			picked = append(picked, s)
		}
		if rng.IntN(8) == 0 {
			lv := make([]Level, len(picked))
			for j, s := range picked {
				lv[j] = Level{Spec: s, Remaining: rng.Int64N(3*s.Capacity()) - s.Capacity()}
			}
			em, er := mem.Lower(ctx, "d", lv), red.Lower(ctx, "d", lv)
			if em != nil || er != nil {
				t.Fatalf("op %d: Lower: memory %v, redis %v", i, em, er)
			}
			continue
		}
		if rng.IntN(5) == 0 {
			adj := make([]Adjustment, len(picked))
			for j, s := range picked {
				adj[j] = Adjustment{Spec: s, Delta: rng.Int64N(2*s.Capacity()) - s.Capacity()}
			}
			em, er := mem.Adjust(ctx, "d", adj), red.Adjust(ctx, "d", adj)
			if em != nil || er != nil {
				t.Fatalf("op %d: Adjust: memory %v, redis %v", i, em, er)
			}
			continue
		}
		r := &Request{Tag: "d", Buckets: picked}
		if rng.IntN(3) == 0 {
			r.MaxWait = time.Duration(rng.Int64N(int64(30 * time.Second))).Truncate(time.Microsecond)
		}
		want, werr := mem.Take(ctx, r)
		got, gerr := red.Take(ctx, r)
		if werr != nil || gerr != nil {
			t.Fatalf("op %d: Take: memory %v, redis %v", i, werr, gerr)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("op %d at %v: %+v\nmemory and redis differ (-memory +redis):\n%s", i, clk.Now(), r, diff)
		}
	}
}

// TestKeys checks the key layout: one hash tag per decision, injective escaping, bounded length.
func TestKeys(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("t", 10<<10)
	parts := []string{"", "a", "A", "a}{b", "{", "}", "%", "%25", "%7B", "#", "#0", "a\nb", "a b", "ü", "\x00", long, long + "x", "tenant-42:gpt-4o"}
	seen := map[string]string{}
	for _, tag := range parts {
		for _, name := range parts {
			spec := Spec{Name: name}
			k := string(appendKey(nil, "rl:", tag, &spec))
			if len(k) != keyLen("rl:", tag, &spec) {
				t.Errorf("keyLen(%.20q, %.20q) = %d, key is %d bytes", tag, name, keyLen("rl:", tag, &spec), len(k))
			}
			if prev, dup := seen[k]; dup {
				t.Errorf("key %q for (%.20q, %.20q) collides with %s", k, tag, name, prev)
			}
			seen[k] = fmt.Sprintf("(%.20q, %.20q)", tag, name)
			if len(k) > 3+2+2+2*maxPart {
				t.Errorf("key %.40q is %d bytes", k, len(k))
			}
			// The hash tag, as Redis Cluster finds it, is exactly the encoded tag.
			open := strings.IndexByte(k, '{')
			end := strings.IndexByte(k[open+1:], '}')
			if got, want := k[open+1:open+1+end], string(appendPart(nil, tag)); end <= 0 || got != want {
				t.Errorf("key %q: hash tag %q, want %q", k, got, want)
			}
			for _, c := range []byte(k) {
				if c < 0x21 || c > 0x7e {
					t.Errorf("key %q holds byte %#x", k, c)
				}
			}
		}
	}
	if got := string(appendKey(nil, "rl:", "openai", &Spec{Name: "tenant-42:gpt-4o:tpm"})); got != "rl:{openai}T:tenant-42:gpt-4o:tpm" {
		t.Errorf("readable key = %q", got)
	}
	s := NewRedis(nil, RedisOptions{Prefix: "a{b}c:"})
	if got := s.keys("x", 1, func(int) *Spec { return &Spec{Name: "n"} })[0]; got != "a%7Bb%7Dc:{x}T:n" {
		t.Errorf("braces in the prefix: key %q", got)
	}
}

// TestRedisOneRoundTrip checks that a decision is one FCALL, whatever its number of buckets.
func TestRedisOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := redistest.StartServer(t)
	c := srv.Client()
	s := NewRedis(c, RedisOptions{Prefix: "rt:"})
	take(t, s, req(benchSpecs(1)...)) // loads the library (FCALL, FUNCTION LOAD, then EVAL)
	srv.Do(ctx, "CONFIG", "RESETSTAT")
	for range 10 {
		take(t, s, &Request{Tag: "openai", Buckets: benchSpecs(4)})
	}
	// Commands the script runs count too; anything else would be an extra round trip.
	inScript := map[string]bool{"time": true, "mget": true, "set": true, "hgetall": true, "hset": true, "hdel": true, "del": true, "pexpire": true}
	calls, err := redisstats.Calls(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for name, n := range calls {
		if name != "fcall" && name != "info" && name != "config|resetstat" && !inScript[name] {
			t.Errorf("a decision ran %s: %d calls", name, n)
		}
	}
	if calls["fcall"] != 10 {
		t.Fatalf("10 decisions of 4 buckets: %d FCALL, want 10", calls["fcall"])
	}
}

// TestFakeTimeLibrary checks that the tests' clock works in the function library, not only in
// the script: the conformance suite then runs the code as FCALL runs it.
func TestFakeTimeLibrary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c, clk := fakeTimeServer(t, "ft:")
	tb := tokenBucket("tpm", 6000, time.Minute, 600) // 100 a second
	take(t, s, req(tb))                              // loads the library
	before, err := redisstats.Calls(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(3 * time.Second)
	if res := take(t, s, req(tb)); res.Buckets[0].Remaining != 5100 {
		t.Errorf("3 s after a take of 600: %d left, want 5100 (the fake clock's refill)", res.Buckets[0].Remaining)
	}
	after, err := redisstats.Calls(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if n := after["fcall"] - before["fcall"]; n != 1 || s.lib.scriptsOnly.Load() {
		t.Errorf("%d FCALL, scripts only %v: the fake-time library did not run as a function", n, s.lib.scriptsOnly.Load())
	}
}

// TestRedisWithoutFunctions checks the script fallback where the function cannot run: a server
// without FCALL (as before Redis 7; here the command is renamed away) and an ACL user denied
// FUNCTION. Decisions are made all the same, the store stops trying FCALL, and each decision is
// applied once.
func TestRedisWithoutFunctions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	noFCall := redistest.StartServer(t, redistest.WithArgs("--rename-command", "FCALL", ""))
	acl := redistest.StartServer(t)
	if err := acl.Client().Do(ctx, "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-function").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: acl.Addr(), Username: "limited", Password: "pw"})
	t.Cleanup(func() { _ = limited.Close() })
	for name, c := range map[string]redis.UniversalClient{"no FCALL": noFCall.Client(), "ACL denies": limited} {
		t.Run(name, func(t *testing.T) {
			s := NewRedis(c, RedisOptions{Prefix: uniquePrefix()})
			s.lib = newLibrary("", luaSource, "")
			day := quota("day", 1000, Day, 10)
			for i := range 3 {
				if res := take(t, s, req(day)); res.Outcome != Allowed || res.Buckets[0].Remaining != int64(990-10*i) {
					t.Fatalf("take %d: %+v", i, res)
				}
			}
			if !s.lib.scriptsOnly.Load() {
				t.Error("the store still tries FCALL")
			}
			calls, err := redisstats.Calls(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if calls["fcall"] > 1 || calls["evalsha"] != 3 {
				t.Errorf("3 decisions: %d FCALL, %d EVALSHA, want at most the first FCALL and 3 EVALSHA", calls["fcall"], calls["evalsha"])
			}
		})
	}
}

// TestRedisPeekWritesNothing: a peek creates no key, and leaves every key's value and absolute
// expiry as they were, on a single node and on a Cluster (whose replies come from the tag's
// shard).
func TestRedisPeekWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	single := redistest.StartServer(t).Client()
	cluster := redistest.StartCluster(t).Client()
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
	}{{"redis", single}, {"cluster", cluster}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := newClock(t0)
			prefix := uniquePrefix()
			s := newFakeTimeRedis(tc.client, RedisOptions{Prefix: prefix}, clk.Now)
			specs := peekSet()
			// state is every key of specs: its type, value (DUMP) and absolute expiry.
			state := func() map[string]string {
				out := map[string]string{}
				for _, k := range s.keys("p", len(specs), func(i int) *Spec { return &specs[i] }) {
					n, err := tc.client.Exists(ctx, k).Result()
					if err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						continue
					}
					dump, err := tc.client.Dump(ctx, k).Result()
					if err != nil {
						t.Fatal(err)
					}
					exp, err := tc.client.Do(ctx, "PEXPIRETIME", k).Int64()
					if err != nil {
						t.Fatal(err)
					}
					out[k] = fmt.Sprintf("%x@%d", dump, exp)
				}
				return out
			}
			if _, err := s.Peek(ctx, "p", specs); err != nil {
				t.Fatal(err)
			}
			if got := state(); len(got) != 0 {
				t.Fatalf("a peek of absent buckets created keys: %v", got)
			}
			if res := take(t, s, leased("a", specs...)); res.Outcome != Allowed {
				t.Fatalf("take: %+v", res)
			}
			before := state()
			if len(before) != 5 { // the pair shares one key
				t.Fatalf("after a take: %d keys, want 5: %v", len(before), before)
			}
			clk.Advance(3 * time.Second)
			if _, err := s.Peek(ctx, "p", specs); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, state()); diff != "" {
				t.Fatalf("a peek changed keys (-before +after):\n%s", diff)
			}
		})
	}
}

// An op the script does not know is the call's error, never a take.
func TestRedisUnknownOp(t *testing.T) {
	t.Parallel()
	s, c, _ := fakeTimeServer(t, uniquePrefix())
	spec := tokenBucket("tpm", 10, time.Minute, 3)
	keys := s.keys("p", 1, func(int) *Spec { return &spec })
	a := appendHeader(nil, 'X', 1, 0, "")
	a = appendParams(a, paramsOf(&spec, 3, s.clock()), false)
	if _, err := s.run(context.Background(), "p", keys, a); err == nil || !strings.Contains(err.Error(), "unknown op") {
		t.Fatalf("op X: %v, want an unknown op error", err)
	}
	if n, err := c.Exists(context.Background(), keys[0]).Result(); err != nil || n != 0 {
		t.Fatalf("op X wrote the bucket: %d %v", n, err)
	}
}
