package bucket

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// A money budget across a Sentinel failover: reservations taken and settled on the master,
// replicated, survive its death; the settlements after the promotion apply once, on the new
// master; a settlement that fails while no master answers is not applied (the reservation
// stays: an over-charge, never a lost one) and is never applied twice (the service's client
// does not retry: MaxRetries -1, as internal/server builds it).
func TestMoneyBudgetAcrossSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinel(t, master, "main")
	waitUntil(t, 15*time.Second, "sentinel to see the replica", func() bool {
		v, err := sentinel.Client().Do(ctx, "SENTINEL", "replicas", "main").Slice()
		return err == nil && len(v) > 0
	})
	client, err := NewClient(sentinel.URL(), ClientOptions{MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s := NewRedis(client, RedisOptions{Prefix: uniquePrefix()})
	budget := Spec{Name: "team-budget:$|t6:team-a", Algorithm: Quota, Calendar: Month, Limit: 100_000}
	reserve := func(i int) {
		t.Helper()
		res, err := s.Take(ctx, &Request{Tag: "openai", Buckets: []Spec{with(budget, 1000)}})
		if err != nil || res.Outcome != Allowed {
			t.Fatalf("reservation %d: %+v, %v", i, res, err)
		}
	}
	// Each request reserved 1000 micro-units and cost 400: settling gives 600 back.
	settle := func() error {
		return s.Adjust(ctx, "openai", []Adjustment{{Spec: budget, Delta: 600}})
	}
	for i := range 10 {
		reserve(i)
	}
	for range 5 {
		if err := settle(); err != nil {
			t.Fatal(err)
		}
	}
	// The replica holds every write acknowledged so far (replication is asynchronous: WAIT
	// stands for the time a real replica takes to catch up).
	if n, err := master.Client().Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT: %d, %v", n, err)
	}
	master.Kill()
	// No master: the settlement fails and changes nothing.
	if err := settle(); err == nil {
		t.Fatal("a settlement succeeded with the master dead and no replica promoted")
	}
	waitUntil(t, 30*time.Second, "the replica's promotion", func() bool {
		addr, err := sentinel.Client().Do(ctx, "SENTINEL", "get-master-addr-by-name", "main").StringSlice()
		return err == nil && strings.Join(addr, ":") == replica.Addr()
	})
	waitUntil(t, 10*time.Second, "the store to follow the new master", func() bool {
		_, err := s.Peek(ctx, "openai", []Spec{budget})
		return err == nil
	})
	// Four of the five in flight settle on the new master; the one whose settlement failed
	// keeps its reservation.
	for range 4 {
		if err := settle(); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := s.Peek(ctx, "openai", []Spec{budget})
	if err != nil {
		t.Fatal(err)
	}
	// 9 requests at 400 and one still at its reservation of 1000.
	if want := int64(100_000 - 9*400 - 1000); snap[0].Remaining != want {
		t.Fatalf("remaining %d after the failover, want %d", snap[0].Remaining, want)
	}
	// The budget still refuses what it cannot hold, on the new master.
	res, err := s.Take(ctx, &Request{Tag: "openai", Buckets: []Spec{with(budget, 95_401)}})
	if err != nil || res.Outcome != Denied {
		t.Fatalf("a reservation above what is left: %+v, %v", res, err)
	}
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
