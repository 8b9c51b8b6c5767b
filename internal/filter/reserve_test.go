package filter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
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
credentials: {injected: true}
`, Options{LeaseID: func() string { n++; return "lease" + strings.Repeat("x", n) }})

	var held []*reservation.Reservation
	for range 2 {
		resp := e.check(t, "chat")
		if d := decision(resp); d != decisionAllowed {
			t.Fatalf("decision %q, want allowed", d)
		}
		r := reservationOf(t, resp)
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

// Provider feedback is marked in the reservation only for a request that carried the operator's
// own credential, and nothing else: a client's own key has its own budget at the provider, and
// its 429s or remaining headers must not correct the shared bucket.
func TestFeedbackOnlyFromOwnCredential(t *testing.T) {
	t.Parallel()
	sum := sha256.Sum256([]byte("peppersk-own"))
	limits := `rules:
  - name: mirror
    match: {provider: openai}
    tokens: {limit: 100000, period: minute}
    provider_feedback: true
credentials: {salt: pepper, sha256: ["` + hex.EncodeToString(sum[:]) + `"]}
`
	e := newEnv(t, limits, Options{})
	for _, tc := range []struct {
		name string
		hdrs map[string]string
		want bool
	}{
		{"own_bearer", map[string]string{"authorization": "Bearer sk-own"}, true},
		{"own_x_api_key", map[string]string{"x-api-key": "sk-own"}, true},
		{"own_api_key", map[string]string{"api-key": "sk-own"}, true},
		{"foreign", map[string]string{"authorization": "Bearer sk-foreign"}, false},
		{"none", nil, false},
		{"own_and_foreign", map[string]string{"authorization": "Bearer sk-own", "x-api-key": "sk-foreign"}, false},
		{"repeated_joined", map[string]string{"authorization": "Bearer sk-own,Bearer sk-foreign"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := loadRequest(t, "chat")
			for k, v := range tc.hdrs {
				req.Attributes.Request.Http.Headers[k] = v
			}
			resp := e.answer(t, context.Background(), req).Response()
			r := reservationOf(t, resp)
			if got := r.Buckets[0].Feedback; got != tc.want {
				t.Errorf("feedback %v, want %v", got, tc.want)
			}
		})
	}
	// Control: Envoy injects the operator's credential (credentials.injected): every request's
	// answer is the operator's.
	inj := newEnv(t, strings.Replace(limits, "credentials: {", "credentials: {injected: true, ", 1), Options{})
	resp := inj.check(t, "chat")
	r, err := reservation.Decode(resp.GetDynamicMetadata().GetFields()[reservation.MetadataKey].GetStringValue())
	if err != nil || !r.Buckets[0].Feedback {
		t.Errorf("injected: %+v %v, want feedback", r, err)
	}
}

// A reservation in a sliding window carries where the store counted it, so that the response
// path refunds into that sub-window; one without a sliding window carries no time.
func TestReservationCarriesWhereSlidingWindowsCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `rules:
  - name: rolling
    match: {provider: openai}
    tokens: {limit: 100000, period: hour, algorithm: sliding_window}
    refund: true
  - name: steady
    match: {provider: anthropic}
    tokens: {limit: 100000, period: minute}
`, Options{})
	r := reservationOf(t, e.check(t, "chat"))
	if want := e.clock.Now(); !r.At.Equal(want) {
		t.Errorf("sliding window: counted at %v, want the decision's %v", r.At, want)
	}
	if !r.Buckets[0].Refund || r.Buckets[0].Spec.Algorithm != bucket.SlidingWindow {
		t.Errorf("bucket %+v, want a refundable sliding window", r.Buckets[0])
	}
	if r := reservationOf(t, e.check(t, "messages")); !r.At.IsZero() {
		t.Errorf("token bucket: counted at %v, want no time", r.At)
	}
}
