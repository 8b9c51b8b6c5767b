package reconcile

import (
	"errors"
	"fmt"
	"math"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Settlement says how a response settles its reservation. It is a plain value, compiled from the
// limits file once per load; a Server swaps it whole (SetSettlement) on a reload.
type Settlement struct {
	// KeepOnClientError is the part (0 to 1) of a refundable reservation kept when the provider
	// answers 4xx, 429 included: a client cannot hold a shared budget with requests it knows will
	// be refused, then have them given back for free.
	KeepOnClientError float64
	// UsageFactor bounds the usage a response may report at this many times its reservation
	// (prompt plus reserved output); 0: no bound from the reservation.
	UsageFactor float64
	// MaxUsage bounds the usage a response may report, whatever its reservation: above every
	// model's context window plus its largest output.
	MaxUsage int64
	// Decode is the set of content-codings decoded on the response path. A reply in another
	// coding keeps its reservation.
	Decode Encodings
	// Declared maps each provider the limits file declares to the family whose dialect it
	// speaks (provider.Declared.Family): how its responses are read. Read only once set.
	Declared map[string]provider.ID
}

// DefaultSettlement is the settlement of a limits file that names none: see each field's default
// in internal/config.
func DefaultSettlement() Settlement {
	return Settlement{KeepOnClientError: 0.25, UsageFactor: 8, MaxUsage: 2_000_000, Decode: AllEncodings}
}

// Validate reports every value out of range at once.
func (s Settlement) Validate() error {
	var errs []error
	if !(s.KeepOnClientError >= 0 && s.KeepOnClientError <= 1) {
		errs = append(errs, fmt.Errorf("keep_on_client_error: %v is not in [0, 1]", s.KeepOnClientError))
	}
	if !(s.UsageFactor == 0 || (s.UsageFactor >= 1 && s.UsageFactor <= 1e6)) {
		errs = append(errs, fmt.Errorf("usage_factor: %v is not 0 or in [1, 1e6]", s.UsageFactor))
	}
	if s.MaxUsage < 1 || s.MaxUsage > bucket.MaxAmount {
		errs = append(errs, fmt.Errorf("max_usage_tokens: %d is not in [1, %d]", s.MaxUsage, int64(bucket.MaxAmount)))
	}
	if s.Decode&^AllEncodings != 0 {
		errs = append(errs, errors.New("decode: unknown coding"))
	}
	return errors.Join(errs...)
}

// Reasons a reported usage was clamped (metric label values).
const (
	clampFactor  = "over_reservation_factor" // above usage_factor x the reservation
	clampCeiling = "over_max_usage"          // above max_usage_tokens
)

// bound is the most usage a response reserved at reserved may report, and the reason a usage
// above it is clamped.
func (s *Settlement) bound(reserved int64) (int64, string) {
	b, why := s.MaxUsage, clampCeiling
	if s.UsageFactor > 0 && reserved > 0 {
		if f := math.Ceil(s.UsageFactor * float64(reserved)); f < float64(b) {
			b, why = int64(f), clampFactor
		}
	}
	return b, why
}

// kept is what a refundable reservation of cost keeps on a provider 4xx: the kept part rounded
// up, so that a request's single unit (a request count, a tiny reservation) is never given back
// while any part is kept.
func (s *Settlement) kept(cost int64) int64 {
	if cost <= 0 || s.KeepOnClientError <= 0 {
		return 0
	}
	return min(cost, int64(math.Ceil(s.KeepOnClientError*float64(cost))))
}
