package bucket

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Bounds of a Spec, enforced by Take and Adjust. Within them every computation is exact to well
// below one token and one microsecond (see the package documentation).
const (
	// MaxAmount bounds Limit, Burst, Cost and Adjustment.Delta.
	MaxAmount = 1_000_000_000_000
	// MinPeriod and MaxPeriod bound Spec.Period of TokenBucket and SlidingWindow.
	MinPeriod = time.Second
	MaxPeriod = 31 * 24 * time.Hour
	// MaxWait bounds Request.MaxWait.
	MaxWait = MaxPeriod
	// MaxBuckets bounds the number of buckets in one Request or Adjust call.
	MaxBuckets = 32
	// MaxSlots bounds Spec.Slot: how many token buckets one key holds.
	MaxSlots = 4
	// SlidingWindows is the number of sub-windows a SlidingWindow's period is divided into: an
	// admission leaves the window between Period and Period + Period/SlidingWindows after it was made.
	SlidingWindows = 10
)

var (
	// ErrInvalid wraps every error about a malformed Request or Adjustment (reason code "invalid").
	ErrInvalid = errors.New("bucket: invalid request")
	// ErrReply wraps an unexpected reply from Redis (reason code "reply").
	ErrReply = errors.New("bucket: unexpected reply")
)

// validate reports the first problem of spec; amountOK checks the Cost (or Delta) it carries.
func (s *Spec) validate(amount int64, adjust bool) error {
	switch {
	case s.Limit <= 0 || s.Limit > MaxAmount:
		return fmt.Errorf("%w: bucket %q: limit %d outside 1..%d", ErrInvalid, s.Name, s.Limit, int64(MaxAmount))
	case s.Burst < 0 || s.Burst > MaxAmount:
		return fmt.Errorf("%w: bucket %q: burst %d outside 0..%d", ErrInvalid, s.Name, s.Burst, int64(MaxAmount))
	case !adjust && (amount < 0 || amount > MaxAmount):
		return fmt.Errorf("%w: bucket %q: cost %d outside 0..%d", ErrInvalid, s.Name, amount, int64(MaxAmount))
	case adjust && (amount < -MaxAmount || amount > MaxAmount):
		return fmt.Errorf("%w: bucket %q: delta %d outside -%d..%d", ErrInvalid, s.Name, amount, int64(MaxAmount), int64(MaxAmount))
	case !(s.Floor >= 0 && s.Floor <= 1): // also rejects NaN
		return fmt.Errorf("%w: bucket %q: floor %v outside 0..1", ErrInvalid, s.Name, s.Floor)
	case s.Slot > MaxSlots:
		return fmt.Errorf("%w: bucket %q: slot %d outside 0..%d", ErrInvalid, s.Name, s.Slot, MaxSlots)
	case s.Slot > 0 && s.Algorithm != TokenBucket:
		return fmt.Errorf("%w: bucket %q: only a token bucket has a slot", ErrInvalid, s.Name)
	}
	switch s.Algorithm {
	case TokenBucket, SlidingWindow:
		if s.Period < MinPeriod || s.Period > MaxPeriod {
			return fmt.Errorf("%w: bucket %q: period %v outside %v..%v", ErrInvalid, s.Name, s.Period, MinPeriod, MaxPeriod)
		}
	case Quota:
		if s.Calendar != Day && s.Calendar != Month {
			return fmt.Errorf("%w: bucket %q: unknown calendar %d", ErrInvalid, s.Name, s.Calendar)
		}
	case Concurrency:
		if s.Period < MinPeriod || s.Period > MaxPeriod {
			return fmt.Errorf("%w: bucket %q: lease time to live %v outside %v..%v", ErrInvalid, s.Name, s.Period, MinPeriod, MaxPeriod)
		}
		if s.Burst != 0 {
			return fmt.Errorf("%w: bucket %q: a concurrency bucket has no burst", ErrInvalid, s.Name)
		}
		if !adjust && amount > 1 {
			return fmt.Errorf("%w: bucket %q: a concurrency bucket costs 0 or 1, not %d", ErrInvalid, s.Name, amount)
		}
	default:
		return fmt.Errorf("%w: bucket %q: unknown algorithm %d", ErrInvalid, s.Name, s.Algorithm)
	}
	return nil
}

// Algorithm codes: the letter of a bucket's algorithm, and of a quota's calendar, in the
// script's arguments (bucket.lua spells the same letters), in the stored keys and in the
// reservation that the response path reads. This is the one definition in Go.
const (
	CodeTokenBucket   = 't'
	CodeSlidingWindow = 's'
	CodeDaily         = 'd' // a Quota per Day
	CodeMonthly       = 'm' // a Quota per Month
	CodeConcurrency   = 'c'
)

// Code is the algorithm code of s.
func (s *Spec) Code() byte {
	switch s.Algorithm {
	case SlidingWindow:
		return CodeSlidingWindow
	case Quota:
		if s.Calendar == Month {
			return CodeMonthly
		}
		return CodeDaily
	case Concurrency:
		return CodeConcurrency
	}
	return CodeTokenBucket
}

// SetCode sets the algorithm (and a quota's calendar) of s from its code; false for a byte
// that is not one.
func (s *Spec) SetCode(c byte) bool {
	switch c {
	case CodeTokenBucket:
		s.Algorithm = TokenBucket
	case CodeSlidingWindow:
		s.Algorithm = SlidingWindow
	case CodeDaily:
		s.Algorithm, s.Calendar = Quota, Day
	case CodeMonthly:
		s.Algorithm, s.Calendar = Quota, Month
	case CodeConcurrency:
		s.Algorithm = Concurrency
	default:
		return false
	}
	return true
}

// sameBucket reports whether a and b name the same stored bucket.
func sameBucket(a, b *Spec) bool {
	return a.Name == b.Name && a.Code() == b.Code() && a.Slot == b.Slot
}

// continues reports whether bucket i of a call (spec(i)) is stored in the key of the bucket
// before it (Spec.Slot): the script gets that key once, and its alg digit says so.
func continues(spec func(int) *Spec, i int) bool {
	if i == 0 {
		return false
	}
	a, b := spec(i-1), spec(i)
	return a.Slot > 0 && b.Slot > 0 && a.Name == b.Name
}

// spec is bucket i of r, for continues and Redis.keys.
func (r *Request) spec(i int) *Spec { return &r.Buckets[i] }

// validate checks the whole request without allocating when it is valid.
func (r *Request) validate() error {
	if len(r.Buckets) == 0 || len(r.Buckets) > MaxBuckets {
		return fmt.Errorf("%w: %d buckets, want 1..%d", ErrInvalid, len(r.Buckets), MaxBuckets)
	}
	if r.MaxWait < 0 || r.MaxWait > MaxWait {
		return fmt.Errorf("%w: max wait %v outside 0..%v", ErrInvalid, r.MaxWait, MaxWait)
	}
	if r.Lease != "" && !validLease(r.Lease) {
		return fmt.Errorf("%w: lease %q is not 1 to 64 of [A-Za-z0-9_-]", ErrInvalid, r.Lease)
	}
	for i := range r.Buckets {
		b := &r.Buckets[i]
		if err := b.validate(b.Cost, false); err != nil {
			return err
		}
		if b.Algorithm == Concurrency && b.Cost > 0 && r.Lease == "" {
			return fmt.Errorf("%w: bucket %q: a concurrency bucket needs the request's lease", ErrInvalid, b.Name)
		}
		for j := range i {
			if sameBucket(&r.Buckets[j], b) {
				return fmt.Errorf("%w: bucket %q appears twice", ErrInvalid, b.Name)
			}
		}
	}
	return nil
}

// validLease reports whether id can name a lease: 1 to 64 of [A-Za-z0-9_-], not starting with
// '-', so that it is one word of the script's arguments.
func validLease(id string) bool {
	if len(id) == 0 || len(id) > 64 || id[0] == '-' { // "-" stands for no lease in the script
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// validateAdjustments checks adj and returns the lease they release ("" for none).
// validateAdjustments checks adj and returns the lease it releases ("" for none) and the time
// its refunds were counted at (zero when unknown), which every adjustment naming one shares.
func validateAdjustments(adj []Adjustment) (lease string, at time.Time, err error) {
	if len(adj) == 0 || len(adj) > MaxBuckets {
		return "", at, fmt.Errorf("%w: %d adjustments, want 1..%d", ErrInvalid, len(adj), MaxBuckets)
	}
	for i := range adj {
		a := &adj[i]
		if err := a.validate(a.Delta, true); err != nil {
			return "", at, err
		}
		if a.Lease != "" {
			if !validLease(a.Lease) {
				return "", at, fmt.Errorf("%w: lease %q is not 1 to 64 of [A-Za-z0-9_-]", ErrInvalid, a.Lease)
			}
			if lease != "" && lease != a.Lease {
				return "", at, fmt.Errorf("%w: one call releases one lease, not %q and %q", ErrInvalid, lease, a.Lease)
			}
			lease = a.Lease
		}
		if !a.At.IsZero() {
			if a.At.UnixMicro() <= 0 {
				return "", at, fmt.Errorf("%w: adjustment of %q counted at %v, before 1970", ErrInvalid, a.Name, a.At)
			}
			if !at.IsZero() && !at.Equal(a.At) {
				return "", at, fmt.Errorf("%w: one call refunds what was counted at one time, not %v and %v", ErrInvalid, at, a.At)
			}
			at = a.At
		}
		for j := range i {
			if sameBucket(&adj[j].Spec, &a.Spec) {
				return "", at, fmt.Errorf("%w: bucket %q adjusted twice", ErrInvalid, a.Name)
			}
		}
	}
	return lease, at, nil
}

func validateLevels(lv []Level) error {
	if len(lv) == 0 || len(lv) > MaxBuckets {
		return fmt.Errorf("%w: %d levels, want 1..%d", ErrInvalid, len(lv), MaxBuckets)
	}
	for i := range lv {
		l := &lv[i]
		if err := l.validate(l.Remaining, true); err != nil {
			return err
		}
		for j := range i {
			if sameBucket(&lv[j].Spec, &l.Spec) {
				return fmt.Errorf("%w: bucket %q lowered twice", ErrInvalid, l.Name)
			}
		}
	}
	return nil
}

// params are a spec's numbers as the script sees them: doubles, time in microseconds.
type params struct {
	alg     byte
	limit   float64
	period  float64 // microseconds; a quota: its zone (zoneOffsets)
	cap     float64
	amount  float64 // cost, or adjustment delta
	reserve float64 // floor x capacity
	slot    uint8   // token bucket: its slot in a shared key, 0 for a key of its own
}

func paramsOf(s *Spec, amount int64, now time.Time) params {
	c := s.Capacity()
	p := params{
		alg:     s.Code(),
		limit:   float64(s.Limit),
		cap:     float64(c),
		amount:  float64(amount),
		reserve: s.Floor * float64(c),
		slot:    s.Slot,
	}
	if s.Algorithm != Quota {
		p.period = float64(s.Period / time.Microsecond)
	} else {
		p.period = zoneOffsets(s, now)
	}
	return p
}

// zoneBias makes a zone offset in seconds (at most 18 hours either way) a positive 17-bit field.
const zoneBias = 1 << 16

// zoneOffsets packs what a zoned Quota's store needs of its zone at now, in the place of the
// period a quota has no use for: the zone's UTC offset at now, which puts now in its local day
// or month, and its offset at the start of the next period, where the resets and waits the
// store reports begin: (offNow + 2^16) x 2^17 + (offNext + 2^16), in seconds, exact in a
// double. 0 is UTC. Both come from the time package's zone rules, so a period across a
// daylight-saving change is 23 or 25 hours long. A reset further ahead than the next period
// (a debt of several periods) is reckoned with the next period's offset.
func zoneOffsets(s *Spec, now time.Time) float64 {
	if s.Zone == nil {
		return 0
	}
	t := now.In(s.Zone)
	_, offNow := t.Zone()
	y, m, d := t.Date()
	next := time.Date(y, m, d+1, 0, 0, 0, 0, s.Zone)
	if s.Calendar == Month {
		next = time.Date(y, m+1, 1, 0, 0, 0, 0, s.Zone)
	}
	_, offNext := next.Zone()
	return float64(offNow+zoneBias)*(2*zoneBias) + float64(offNext+zoneBias)
}

// unpackZone is zoneOffsets' two offsets in microseconds (0, 0 for UTC), as bucket.lua reads them.
func unpackZone(z float64) (now, next float64) {
	if z == 0 {
		return 0, 0
	}
	a := math.Floor(z / (2 * zoneBias))
	return (a - zoneBias) * 1e6, (z - a*2*zoneBias - zoneBias) * 1e6
}

// durationUS converts whole microseconds to a Duration, saturating instead of overflowing.
func durationUS(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}
