package bucket

import (
	"time"
)

// Algorithm selects how a bucket refills.
type Algorithm uint8

const (
	// TokenBucket is a continuous-refill bucket: capacity Burst, refilled at Limit per Period.
	TokenBucket Algorithm = iota
	// SlidingWindow admits at most Limit in any rolling Period.
	SlidingWindow
	// Quota admits at most Limit per calendar period (UTC day or month), reset at the boundary.
	Quota
	// Concurrency admits at most Limit requests in flight: each admitted request holds a lease
	// (Request.Lease) until it is released (Adjust with a positive Delta) or Period passes, so a
	// release that never comes frees the slot after Period. Cost is 0 or 1. A full bucket denies
	// even within MaxWait, with a wait of at most one second.
	Concurrency
)

// String returns the configuration name of the algorithm.
func (a Algorithm) String() string {
	switch a {
	case TokenBucket:
		return "token_bucket"
	case SlidingWindow:
		return "sliding_window"
	case Quota:
		return "quota"
	case Concurrency:
		return "concurrency"
	}
	return "unknown"
}

// Calendar is the period of a Quota bucket.
type Calendar uint8

const (
	// Day resets at 00:00 UTC.
	Day Calendar = iota
	// Month resets at 00:00 UTC on the first of the month.
	Month
)

// Spec describes one bucket of a decision and what the request costs in it.
type Spec struct {
	// Name identifies the bucket within its Request.Tag. It may hold any bytes (user-controlled
	// tenant ids, model names): the store escapes or hashes it into a safe key.
	Name string
	// Algorithm is the refill rule; the zero value is TokenBucket.
	Algorithm Algorithm
	// Limit is the amount admitted per Period (tokens or requests). Must be > 0.
	Limit int64
	// Period is the refill period for TokenBucket and the window for SlidingWindow
	// (1 s to 31 days). Ignored by Quota.
	Period time.Duration
	// Calendar is the reset period of a Quota bucket.
	Calendar Calendar
	// Zone is the time zone whose midnights a Quota's calendar periods start at (the Gemini
	// API's requests per day "reset at midnight Pacific time": America/Los_Angeles); nil is UTC.
	// Its offsets are computed in Go, daylight saving included, at each call, and passed to the
	// store (zoneOffsets).
	Zone *time.Location
	// Burst is the capacity of a TokenBucket; 0 means Limit.
	Burst int64
	// Cost is what this request takes from the bucket (>= 0).
	Cost int64
	// Floor is the fraction of capacity (0 to 1) that this request may not take: a low-priority
	// request is admitted only while the bucket stays at or above Floor x capacity after paying.
	Floor float64
	// Slot, from 1 to MaxSlots, keeps a TokenBucket in that slot of one Redis key shared with the
	// TokenBuckets of the same Name and other slots (a rule's tokens and requests): one key to
	// read and write for all of them, which costs Redis about a sixth less per decision than a
	// key each (docs/performance.md). Zero keeps it under a key of its own. The buckets of a key
	// are independent, each with its own level and parameters, so the slot is part of the
	// bucket's identity: the same Name in another slot, or in none, is another bucket. A
	// Request, Adjust or Lower call that lists a key's buckets next to each other, in any order,
	// writes the key once.
	Slot uint8
}

// Capacity returns the most the bucket can ever hold.
func (s *Spec) Capacity() int64 {
	if s.Algorithm == TokenBucket && s.Burst > 0 {
		return s.Burst
	}
	return s.Limit
}

// Request is one decision: every bucket pays its Cost, or none does.
type Request struct {
	// Tag groups the buckets of one decision into one Redis Cluster hash slot (for example the
	// provider name). Every key of the decision carries it.
	Tag string
	// Buckets are checked and debited together.
	Buckets []Spec
	// MaxWait is the longest delay the caller accepts: when every bucket can pay within it, the
	// buckets go into debt and the result is Delayed with the wait. Zero means no waiting.
	MaxWait time.Duration
	// Lease names the in-flight lease that the request's Concurrency buckets take: unique per
	// request, 1 to 64 bytes of [A-Za-z0-9_-]. Required when a Concurrency bucket costs 1.
	// Taking the same lease again renews it instead of counting it twice.
	Lease string
}

// Outcome is the result of a decision.
type Outcome uint8

const (
	// Allowed means every bucket paid now.
	Allowed Outcome = iota
	// Delayed means every bucket paid in advance; the caller must wait Result.Wait before
	// proceeding (a reservation within MaxWait).
	Delayed
	// Denied means no bucket paid; Result.Wait is when every bucket could pay.
	Denied
	// Impossible means no bucket paid and the cost can never fit: it exceeds a bucket's capacity
	// (above its floor). Result.Wait is zero; Result.Blocking names the bucket.
	Impossible
)

// String returns a stable name used in logs and metrics.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Delayed:
		return "delayed"
	case Denied:
		return "denied"
	case Impossible:
		return "impossible"
	}
	return "unknown"
}

// State is one bucket's state after a decision.
type State struct {
	// Remaining is what the bucket holds now (negative while in debt), rounded down.
	Remaining int64
	// Limit is the bucket's capacity.
	Limit int64
	// Reset is the time until the bucket is full again (TokenBucket, SlidingWindow) or until the
	// quota period resets (Quota).
	Reset time.Duration
	// Wait is how long until this bucket alone could pay its cost; zero when it can pay now.
	Wait time.Duration
}

// Result is the outcome of a Request.
type Result struct {
	Outcome Outcome
	// Wait is the delay before proceeding (Delayed) or before a retry can succeed (Denied):
	// the largest per-bucket wait.
	Wait time.Duration
	// Blocking is the index in Request.Buckets of the bucket that limits the decision (the longest
	// wait, or the one that can never fit); -1 when allowed.
	Blocking int
	// At is the store's time the decision counts at (Redis TIME, the Memory store's clock): the
	// decision's time, plus Wait when Delayed. A SlidingWindow counts the cost in the sub-window
	// holding At; Adjustment.At takes it to refund the cost there.
	At time.Time
	// Buckets holds the state of each bucket, in Request order.
	Buckets []State
}

// Adjustment changes a bucket after the fact: a positive Delta gives tokens back (never above
// capacity), a negative one charges extra (the bucket may go into debt).
type Adjustment struct {
	// Spec identifies the bucket and its parameters; its Cost is ignored.
	Spec
	Delta int64
	// Lease is the lease that a positive Delta releases on a Concurrency bucket. Every
	// adjustment of one call names the same lease (or none).
	Lease string
	// At is the Result.At of the Take whose cost a positive Delta gives back. A SlidingWindow
	// takes the refund from the sub-window holding At, then from older ones, never from a newer
	// one (which would under-count the window once At's sub-window has left it); nothing is
	// given back of a cost whose sub-window has left the window. Zero (unknown) refunds the
	// most recent sub-windows first. Every adjustment of one call that names an At names the
	// same one.
	At time.Time
}

// Level is what a provider reports of one bucket: Remaining tokens (or requests) as of now.
// Lowering a bucket to a Level charges it the difference when it holds more, and leaves it alone
// when it holds less: a report can never raise a bucket, so never above its configured limit.
// Remaining may be negative: a provider 429 with retry-after r is the level c - r x rate, from
// which the bucket can pay c again exactly after r. Concurrency buckets are left alone.
type Level struct {
	// Spec identifies the bucket and its parameters; its Cost is ignored.
	Spec
	Remaining int64
}

// Snapshot is one bucket as Peek reads it: its state now, without a decision.
type Snapshot struct {
	// Remaining is what the bucket holds now (negative while in debt), rounded down.
	Remaining int64
	// Limit is the bucket's capacity.
	Limit int64
	// Reset is the time until the bucket is full again (TokenBucket, SlidingWindow,
	// Concurrency) or until the quota period resets (Quota).
	Reset time.Duration
	// Leases is the number of live leases of a Concurrency bucket (its requests in flight); 0
	// for the other algorithms.
	Leases int64
}
