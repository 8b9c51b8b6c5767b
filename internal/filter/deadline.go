package filter

import (
	"context"
	"runtime"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// Bounder prices a request at an upper bound of its Estimate without counting its text, in
// about the time of a parse. *tokens.Pricer implements it. An Estimator without it is always
// asked for the exact price.
type Bounder interface {
	Bound(in *tokens.Input) tokens.Estimate
}

// Defaults of the Options that bound a check's time.
const (
	// DefaultExpensiveBytes: bodies from this size on are priced under the deadline and the
	// pricing slots. Below it, an exact count costs at most a few milliseconds whatever the text.
	DefaultExpensiveBytes = 64 << 10
	// DefaultPricingTimeout is the longest an exact count may take before the upper bound
	// answers instead.
	DefaultPricingTimeout = 250 * time.Millisecond
)

// Causes of a price at the upper bound: the label of llm_ratelimit_pricing_bounded_total.
const (
	boundBusy = "busy" // every pricing slot was taken: no wait, the bound at once
	boundSlow = "slow" // the exact count did not finish within its time
	boundLate = "late" // the check had no time left for an exact count
)

// attemptDeadline is when the answer must be sent: ctx's deadline (Envoy's grpc-timeout) or
// CheckTimeout after the check arrived, whichever is first; zero when neither is set.
func (f *Filter) attemptDeadline(ctx context.Context, start time.Time) time.Time {
	dl, ok := ctx.Deadline()
	if f.opts.CheckTimeout > 0 {
		if a := start.Add(f.opts.CheckTimeout); !ok || a.Before(dl) {
			return a
		}
	}
	if !ok {
		return time.Time{}
	}
	return dl
}

// price prices in with p's estimator. A body of ExpensiveBytes or more is counted exactly only
// when a pricing slot is free and the count finishes within PricingTimeout and the time the check
// has left (less the store's time and the answer's margin); otherwise it is priced at the
// estimator's upper bound, at once. So no body can make a check miss its deadline, and at most
// PricingSlots exact counts of large bodies run at once on a replica. Small bodies take the
// exact path without any of it.
func (f *Filter) price(ctx context.Context, p *Policy, in *tokens.Input, start time.Time) tokens.Estimate {
	if len(in.Body) < f.opts.ExpensiveBytes || f.opts.PricingSlots < 0 {
		return p.Estimator.Estimate(in)
	}
	b, ok := p.Estimator.(Bounder)
	if !ok {
		return p.Estimator.Estimate(in)
	}
	budget := f.opts.PricingTimeout
	if dl := f.attemptDeadline(ctx, start); !dl.IsZero() {
		budget = min(budget, dl.Sub(f.opts.Now())-f.opts.StoreTimeout-f.opts.HoldMargin)
	}
	if budget <= 0 {
		f.m.bounded(boundLate)
		return b.Bound(in)
	}
	if f.pricing.Add(1) > int64(f.opts.PricingSlots) {
		f.pricing.Add(-1)
		f.m.bounded(boundBusy)
		return b.Bound(in)
	}
	// The count runs on its own goroutine, which keeps its slot until it ends: a count abandoned
	// at its deadline still occupies a slot, so abandoned counts can never pile up.
	done := make(chan tokens.Estimate, 1)
	go func() {
		defer f.pricing.Add(-1)
		done <- p.Estimator.Estimate(in)
	}()
	t := time.NewTimer(budget)
	defer t.Stop()
	select {
	case est := <-done:
		return est
	case <-t.C:
	case <-ctx.Done():
	}
	f.m.bounded(boundSlow)
	return b.Bound(in)
}

// defaultPricingSlots is one exact count of a large body per processor the Go runtime may use.
func defaultPricingSlots() int { return max(runtime.GOMAXPROCS(0), 1) }
