package learn

import (
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestBinUpper(t *testing.T) {
	t.Parallel()
	for _, r := range []float64{1e-9, 0.02, 0.5, 0.625, 1, 1.6, 2, 63, 1e9} {
		i, ok := Bin(r)
		if !ok {
			t.Fatalf("Bin(%v) not ok", r)
		}
		if r >= math.Exp2(-6) && r < math.Exp2(6) {
			if up := Upper(i); up < r || up > r*math.Exp2(1.0/Resolution)*1.000001 {
				t.Errorf("Upper(Bin(%v)) = %v: want within one bin above", r, up)
			}
		}
	}
	for _, r := range []float64{0, -1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, ok := Bin(r); ok {
			t.Errorf("Bin(%v) ok: want ignored", r)
		}
	}
}

func TestQuantile(t *testing.T) {
	t.Parallel()
	var d Dist
	if q := d.Quantile(0.99); q != 0 {
		t.Fatalf("empty quantile %v", q)
	}
	for i := range 100 {
		d.Add(0.5+float64(i)/100, t0, time.Minute) // 0.50 .. 1.49
	}
	if n := d.Samples(); n != 100 {
		t.Fatalf("samples %v, want 100", n)
	}
	for _, tc := range []struct{ q, lo, hi float64 }{
		{0.5, 0.99, 1.02}, {0.95, 1.44, 1.47}, {0.99, 1.48, 1.51}, {1, 1.49, 1.51}, {0, 0.5, 0.51},
	} {
		if got := d.Quantile(tc.q); got < tc.lo || got > tc.hi {
			t.Errorf("Quantile(%v) = %v, want in [%v, %v]", tc.q, got, tc.lo, tc.hi)
		}
	}
}

func TestDecay(t *testing.T) {
	t.Parallel()
	var d Dist
	for range 64 {
		d.Add(0.6, t0, time.Minute)
	}
	d.Decay(t0.Add(time.Minute), time.Minute)
	if n := d.Samples(); math.Abs(n-32) > 1e-9 {
		t.Fatalf("after one half-life: %v samples, want 32", n)
	}
	d.Decay(t0, time.Minute) // time never runs backwards
	if n := d.Samples(); math.Abs(n-32) > 1e-9 {
		t.Fatalf("after an earlier now: %v samples, want 32", n)
	}
	// A shift up is priced at once: 5% new weight moves the p95 (the 1.5x jump of the docs).
	for range 4 {
		d.Add(0.9, t0.Add(time.Minute), time.Minute)
	}
	if q := d.Quantile(0.95); q < 0.9 {
		t.Fatalf("p95 after a shift up: %v, want >= 0.9", q)
	}
	// A shift down is relearned once the old weight is below 1-q: about 4.3 half-lives for p95.
	var e Dist
	for range 64 {
		e.Add(0.9, t0, time.Minute)
	}
	now := t0
	for range 5 * 60 {
		now = now.Add(time.Second)
		e.Add(0.6, now, time.Minute)
	}
	if q := e.Quantile(0.95); q > 0.61 {
		t.Fatalf("p95 five half-lives after a shift down: %v, want about 0.6", q)
	}
	d.Decay(t0.Add(time.Hour), time.Minute)
	if n := d.Samples(); n != 0 {
		t.Fatalf("after an hour: %v samples, want 0 (dropped below minWeight)", n)
	}
}

func TestMerge(t *testing.T) {
	t.Parallel()
	var a, b Dist
	a.Add(1, t0, time.Minute)
	b.Add(1, t0.Add(time.Minute), time.Minute)
	a.Merge(&b, time.Minute)
	if n, at := a.Samples(), a.At; math.Abs(n-1.5) > 1e-9 || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("merged: %v samples at %v, want 1.5 at t0+1m", n, at)
	}
	var c Dist
	c.Merge(&a, time.Minute) // into an empty one
	if n := c.Samples(); math.Abs(n-1.5) > 1e-9 {
		t.Fatalf("merged into empty: %v", n)
	}
}

func TestFactor(t *testing.T) {
	t.Parallel()
	p := Policy{Quantile: 0.95, MinSamples: 10, Min: 0.5, Max: 1.5, HalfLife: time.Minute}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var d Dist
	if f, ok := p.Factor(nil, t0); f != 1 || ok {
		t.Fatalf("nil: %v %v", f, ok)
	}
	for range 9 {
		d.Add(0.7, t0, time.Minute)
	}
	if f, ok := p.Factor(&d, t0); f != 1 || ok {
		t.Fatalf("below the floor: %v %v, want 1 false", f, ok)
	}
	d.Add(0.7, t0, time.Minute)
	if f, ok := p.Factor(&d, t0); !ok || f < 0.7 || f > 0.71 {
		t.Fatalf("at the floor: %v %v, want about 0.7 true", f, ok)
	}
	if f, ok := p.Factor(&d, t0.Add(time.Minute)); f != 1 || ok {
		t.Fatalf("decayed below the floor: %v %v, want 1 false", f, ok)
	}
	var lo, hi Dist
	for range 10 {
		lo.Add(0.01, t0, time.Minute)
		hi.Add(100, t0, time.Minute)
	}
	if f, _ := p.Factor(&lo, t0); f != 0.5 {
		t.Errorf("clamped low: %v, want 0.5", f)
	}
	if f, _ := p.Factor(&hi, t0); f != 1.5 {
		t.Errorf("clamped high: %v, want 1.5", f)
	}
}

func TestPrice(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		est  int64
		f    float64
		want int64
	}{
		{1000, 0.625, 625}, {1000, 0.6251, 626}, {0, 0.5, 0}, {-5, 0.5, 0}, {1, 0.01, 1},
		{1000, math.NaN(), 1000}, {1000, math.Inf(1), 1000}, {1000, -1, 1000}, {math.MaxInt64, 1.5, math.MaxInt64 / 2},
	} {
		if got := Price(tc.est, tc.f); got != tc.want {
			t.Errorf("Price(%d, %v) = %d, want %d", tc.est, tc.f, got, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultPolicy.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Policy{Quantile: 1.5, MinSamples: 0, Min: 0, Max: 0.5, HalfLife: 0}
	err := bad.Validate()
	for _, want := range []string{"quantile", "min_samples", "min_factor", "max_factor", "half_life"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want it to name %s", err, want)
		}
	}
}

// FuzzFactor: whatever ratios a provider reports (zero, huge, negative, NaN), the factor is never
// NaN and never outside [Min, Max], and a price is never below Min times the static one.
func FuzzFactor(f *testing.F) {
	f.Add(1.0, 0.0, -1.0, 1e308, int64(1000), int64(3))
	f.Add(math.NaN(), math.Inf(1), 5e-324, 0.625, int64(1), int64(1000))
	f.Fuzz(func(t *testing.T, a, b, c, d float64, est int64, secs int64) {
		p := Policy{Quantile: 0.99, MinSamples: 1, Min: 0.5, Max: 1.5, HalfLife: time.Minute}
		var dist Dist
		now := t0
		for _, r := range []float64{a, b, c, d} {
			now = now.Add(time.Duration(secs%3600) * time.Second)
			dist.Add(r, now, p.HalfLife)
		}
		fac, learned := p.Factor(&dist, now)
		if math.IsNaN(fac) || fac < p.Min || fac > p.Max || (!learned && fac != 1) {
			t.Fatalf("factor %v learned %v", fac, learned)
		}
		if est > 0 {
			if got := Price(est, fac); got < 1 || float64(got) < float64(est)*p.Min*(1-1e-12) {
				t.Fatalf("Price(%d, %v) = %d below the floor", est, fac, got)
			}
		} else if got := Price(est, fac); got != 0 {
			t.Fatalf("Price(%d) = %d", est, got)
		}
	})
}
