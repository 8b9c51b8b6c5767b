package filter

import (
	"context"
	"strings"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// A rule's max_concurrent is a lease taken with the tokens at Check, carried in the reservation,
// and its slot comes back once the response path releases the lease.
func TestMaxConcurrentLease(t *testing.T) {
	t.Parallel()
	n := 0
	e := newEnv(t, `rules:
  - name: inflight
    match: {provider: openai}
    per: [model]
    tokens: {limit: 100000, period: minute}
    max_concurrent: 2
    lease_ttl: 90s
    provider_feedback: true
`, Options{LeaseID: func() string { n++; return "lease" + strings.Repeat("x", n) }})

	var held []*reservation.Reservation
	for range 2 {
		resp := e.check(t, "chat")
		if d := decision(resp); d != decisionAllowed {
			t.Fatalf("decision %q, want allowed", d)
		}
		r, err := reservation.Decode(resp.GetDynamicMetadata().GetFields()[reservation.MetadataKey].GetStringValue())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	r := held[0]
	if r.Lease != "leasex" || held[1].Lease != "leasexx" || len(r.Buckets) != 2 {
		t.Fatalf("reservation %+v", r)
	}
	tok, c := r.Buckets[0], r.Buckets[1]
	if tok.Kind != reservation.KindTokens || !tok.Feedback || tok.Spec.Cost != 64 ||
		c.Kind != reservation.KindConcurrency || c.Spec.Algorithm != bucket.Concurrency || c.Spec.Limit != 2 || c.Spec.Period.Seconds() != 90 || c.Spec.Cost != 1 {
		t.Fatalf("buckets %+v", r.Buckets)
	}

	resp := e.check(t, "chat")
	if d := decision(resp); d != decisionDenied {
		t.Fatalf("third request in flight: %q, want denied", d)
	}
	msg := resp.GetDeniedResponse().GetBody()
	if !strings.Contains(msg, "inflight (concurrent requests in flight): Limit 2, Remaining 0, Requested 1") {
		t.Errorf("denial message %s", msg)
	}
	if got := headerOf(resp, "retry-after"); got != "1" {
		t.Errorf("retry-after %q, want 1", got)
	}

	// The response path releases the first lease: a slot is free again.
	if err := e.store.Adjust(context.Background(), r.Tag, []bucket.Adjustment{{Spec: c.Spec, Delta: 1, Lease: r.Lease}}); err != nil {
		t.Fatal(err)
	}
	if d := decision(e.check(t, "chat")); d != decisionAllowed {
		t.Fatalf("after a release: %q, want allowed", d)
	}
}
