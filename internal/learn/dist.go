package learn

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Bins and Resolution shape the histogram: bin i holds the ratios r with
// floor(log2(r)*Resolution) == i-Bins/2, so a bin is 2^(1/Resolution) wide (about 1.1%) and the
// bins cover 2^-6 to 2^6. Ratios outside fall in the first or last bin.
const (
	Resolution = 64
	Bins       = 12 * Resolution
)

// minWeight is the decayed weight below which a bin is dropped (in memory and in the store).
const minWeight = 1e-3

// Dist is a decayed distribution of ratios: weights per bin, as of At. A sample's weight halves
// every half-life (given to each call). The zero value is empty. It is not safe for concurrent
// use.
type Dist struct {
	W  [Bins]float64
	At time.Time
}

// Bin is the bin of ratio r; ok is false for a ratio that says nothing (zero, negative, NaN,
// infinite).
func Bin(r float64) (i int, ok bool) {
	if !(r > 0) || math.IsInf(r, 1) {
		return 0, false
	}
	b := math.Floor(math.Log2(r)*Resolution) + Bins/2
	return int(min(max(b, 0), Bins-1)), true
}

// Upper is the upper edge of bin i: the ratio a quantile falling in it is read as, so that a
// quantile never reads below the samples it covers.
func Upper(i int) float64 {
	return math.Exp2(float64(i+1-Bins/2) / Resolution)
}

// Decay ages d to now with halfLife: every weight times 2^-(elapsed/halfLife). Time never runs
// backwards: an earlier now changes nothing. A non-positive halfLife keeps weights whole.
func (d *Dist) Decay(now time.Time, halfLife time.Duration) {
	if d.At.IsZero() || !now.After(d.At) {
		if d.At.IsZero() {
			d.At = now
		}
		return
	}
	if halfLife > 0 {
		f := math.Exp2(-float64(now.Sub(d.At)) / float64(halfLife))
		for i := range d.W {
			if d.W[i] != 0 {
				d.W[i] *= f
				if d.W[i] < minWeight {
					d.W[i] = 0
				}
			}
		}
	}
	d.At = now
}

// Add records ratio r at now (after decaying d to now); a ratio that says nothing is ignored.
func (d *Dist) Add(r float64, now time.Time, halfLife time.Duration) {
	i, ok := Bin(r)
	if !ok {
		return
	}
	d.Decay(now, halfLife)
	d.W[i]++
}

// Merge adds the weights of o to d, both decayed to the later of their times.
func (d *Dist) Merge(o *Dist, halfLife time.Duration) {
	o2 := *o
	if o2.At.After(d.At) {
		d.Decay(o2.At, halfLife)
	} else {
		o2.Decay(d.At, halfLife)
	}
	for i, w := range o2.W {
		if w > 0 && !math.IsInf(w, 0) {
			d.W[i] += w
		}
	}
}

// Samples is the decayed number of samples d holds.
func (d *Dist) Samples() float64 {
	var n float64
	for _, w := range d.W {
		n += w
	}
	return n
}

// Quantile is the ratio below which a fraction q of d's weight lies, read at its bin's upper edge
// (so never below it); 0 when d is empty.
func (d *Dist) Quantile(q float64) float64 {
	n := d.Samples()
	if !(n > 0) {
		return 0
	}
	q = min(max(q, 0), 1)
	target, acc := q*n, 0.0
	last := 0
	for i, w := range d.W {
		if w <= 0 {
			continue
		}
		acc += w
		last = i
		if acc >= target {
			return Upper(i)
		}
	}
	return Upper(last)
}

// Policy turns a learned distribution into the factor admission multiplies a static estimate by.
// A plain value; Validate before use.
type Policy struct {
	// Quantile is the quantile of the ratio priced at (0.95: 95% of requests cost at most their
	// price).
	Quantile float64
	// MinSamples is the decayed sample count below which the static estimate stands.
	MinSamples float64
	// Min and Max clamp the factor: the learned price is between Min and Max times the static one.
	Min, Max float64
	// HalfLife is how fast old samples lose weight.
	HalfLife time.Duration
}

// DefaultPolicy is the policy a limits file that says nothing gets.
var DefaultPolicy = Policy{Quantile: 0.99, MinSamples: 50, Min: 0.5, Max: 1.5, HalfLife: time.Minute}

// Factor is what a static estimate is multiplied by under p with d (decayed to now): the clamped
// quantile once d holds MinSamples, else 1 (learned false). It is never NaN, never below Min and
// never above Max when learned.
func (p *Policy) Factor(d *Dist, now time.Time) (f float64, learned bool) {
	if d == nil {
		return 1, false
	}
	c := *d
	c.Decay(now, p.HalfLife)
	if c.Samples() < p.MinSamples || c.Samples() <= 0 {
		return 1, false
	}
	q := c.Quantile(p.Quantile)
	if !(q > 0) {
		return 1, false
	}
	return min(max(q, p.Min), p.Max), true
}

// Price is est (a static estimate in tokens) times factor, rounded up; never negative, and 0
// only for 0.
func Price(est int64, factor float64) int64 {
	if est <= 0 {
		return 0
	}
	if !(factor > 0) || math.IsInf(factor, 0) {
		return est
	}
	v := math.Ceil(float64(est) * factor)
	if v >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return max(int64(v), 1)
}

// Validate reports every problem of p at once.
func (p *Policy) Validate() error {
	var errs []error
	if !(p.Quantile > 0 && p.Quantile <= 1) {
		errs = append(errs, fmt.Errorf("quantile %v: want above 0 and at most 1", p.Quantile))
	}
	if !(p.MinSamples >= 1) || math.IsInf(p.MinSamples, 0) {
		errs = append(errs, fmt.Errorf("min_samples %v: want at least 1", p.MinSamples))
	}
	if !(p.Min > 0 && p.Min <= 1) {
		errs = append(errs, fmt.Errorf("min_factor %v: want above 0 and at most 1", p.Min))
	}
	if !(p.Max >= 1 && p.Max <= 16) {
		errs = append(errs, fmt.Errorf("max_factor %v: want between 1 and 16", p.Max))
	}
	if p.HalfLife < time.Second {
		errs = append(errs, fmt.Errorf("half_life %v: want at least 1s", p.HalfLife))
	}
	return errors.Join(errs...)
}

// OutputReason is the Key.Reason of a model's completion tokens: their distribution is kept as
// the ratio of the tokens to OutputScale, so that the histogram's bins (2^-6 to 2^6) cover 16 to
// 65,536 tokens; a completion outside counts in the first or last bin.
const (
	OutputReason = "output"
	OutputScale  = 1024
)

// Output is the completion tokens a learned ratio q of OutputReason stands for, rounded up; at
// least 1.
func Output(q float64) int64 {
	return Price(OutputScale, q)
}
