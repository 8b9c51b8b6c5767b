package filter

import (
	"math/rand/v2"
	"strconv"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// limit is the configured limit of the bucket o owns.
func (o owner) limit() *config.Limit {
	switch o.kind {
	case reservation.KindRequests:
		return o.rule.Requests
	case reservation.KindConcurrency:
		return o.rule.Concurrent
	}
	return o.rule.Tokens
}

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
	if !pl.debited || len(pl.enforced.Buckets) == 0 {
		return b
	}
	var buf [8]reservation.Bucket // on the stack: Append keeps nothing of r
	r := reservation.Reservation{Tag: pl.enforced.Tag, Lease: pl.enforced.Lease, Model: est.Model,
		Prompt: est.PromptTokens, Output: est.OutputTokens}
	if n := len(pl.enforced.Buckets); n <= len(buf) {
		r.Buckets = buf[:n]
	} else {
		r.Buckets = make([]reservation.Bucket, n)
	}
	for i, s := range pl.enforced.Buckets {
		b := &r.Buckets[i]
		b.Spec = s
		b.Spec.Floor = 0
		if i < len(pl.owners) {
			b.Kind = pl.owners[i].kind
			// Only the answer to the operator's own credential speaks of the operator's budget.
			b.Feedback = b.Kind == reservation.KindTokens && pl.owners[i].rule.Feedback && pl.own
			b.Refund = b.Kind == reservation.KindTokens && pl.owners[i].rule.Refund
		}
	}
	return reservation.Append(b, &r)
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
