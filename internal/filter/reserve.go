package filter

import (
	"math/rand/v2"
	"strconv"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// newLeaseID is the default Options.LeaseID: 64 random bits in hex.
func newLeaseID() string {
	return strconv.FormatUint(rand.Uint64()|1<<63, 16)
}

// needsLease reports whether req takes a lease (a Concurrency bucket that costs 1).
func needsLease(req *bucket.Request) bool {
	for i := range req.Buckets {
		if req.Buckets[i].Algorithm == bucket.Concurrency && req.Buckets[i].Cost > 0 {
			return true
		}
	}
	return false
}

// appendReservation appends the encoding of what the request holds in the shared store, for the
// response path (internal/reconcile): nothing unless the enforced buckets were debited there.
func (pl *plan) appendReservation(b []byte, est *tokens.Estimate) []byte {
	var buf [8]reservation.Bucket // on the stack: Append keeps nothing of r
	r, ok := pl.reservation(est, buf[:0])
	if !ok {
		return b
	}
	return reservation.Append(b, &r)
}

// reservation is what the request holds in the shared store, its buckets appended to buf; ok
// is false unless the enforced buckets were debited there.
func (pl *plan) reservation(est *tokens.Estimate, buf []reservation.Bucket) (r reservation.Reservation, ok bool) {
	if !pl.debited || len(pl.enforced.Buckets) == 0 {
		return r, false
	}
	r = reservation.Reservation{Tag: pl.enforced.Tag, Lease: pl.enforced.Lease, Model: est.Model,
		Prompt: est.PromptTokens, Output: est.OutputTokens, Weight: pl.prof.Weight(), CacheReadsFree: pl.prof.CacheReadsFree,
		CharsCounted: pl.prof.Counting == provider.MaxOfChars}
	if n := len(pl.enforced.Buckets); n <= cap(buf) {
		r.Buckets = buf[:n]
	} else {
		r.Buckets = make([]reservation.Bucket, n)
	}
	for i, s := range pl.enforced.Buckets {
		if s.Algorithm == bucket.SlidingWindow {
			r.At = pl.result.At
		}
		b := &r.Buckets[i]
		*b = reservation.Bucket{Spec: s}
		b.Spec.Floor = 0
		if i < len(pl.owners) {
			o := &pl.owners[i]
			b.Kind = o.kind
			tokenish := reservation.Tokenish(o.kind)
			// Only the answer to the operator's own credential speaks of the operator's budget.
			b.Feedback = (tokenish || o.kind == reservation.KindRequests) && o.rule.Feedback && pl.own
			// A dimension the provider settles to the actual usage gives back what it did not
			// use, whatever the rule says: the provider's own budget has it back.
			if d, ok := reservation.Dimension(o.kind); ok && tokenish {
				b.Refund = o.rule.Refund || pl.prof.Settles.Has(d)
			}
			if o.kind == reservation.KindCost {
				// Money settles to what the usage costs: the reservation is the most it could.
				b.Refund = true
				r.Price = pl.price
			}
		}
	}
	return r, true
}

// localShare is the buckets of a decision taken from the local fallback store: leases are only
// peeked (cost 0), since the response path releases them in the shared store, never here.
func localShare(specs []bucket.Spec) []bucket.Spec {
	out := specs
	for i := range specs {
		if specs[i].Algorithm == bucket.Concurrency && specs[i].Cost > 0 {
			if &out[0] == &specs[0] {
				out = append([]bucket.Spec(nil), specs...)
			}
			out[i].Cost = 0
		}
	}
	return out
}
