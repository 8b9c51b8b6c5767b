package price

import (
	"math"
	"testing"
)

func TestParseMoney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"250", 250_000_000, true}, {"2.50", 2_500_000, true}, {"0.075", 75_000, true}, {".5", 500_000, true},
		{"0.000001", 1, true}, {"1000000", 1_000_000_000_000, true},
		{"1000000.000001", 0, false}, {"0.0000001", 0, false}, {"-1", 0, false}, {"1e3", 0, false},
		{"", 0, false}, {".", 0, false}, {"2.", 0, false}, {"1,5", 0, false}, {"99999999999999999999", 0, false},
	} {
		got, err := ParseMoney(tc.in, MaxAmount)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseMoney(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestFormatMoney(t *testing.T) {
	t.Parallel()
	for in, want := range map[int64]string{250_000_000: "250.00", 75_000: "0.075", 1: "0.000001", 0: "0.00", -2_500_000: "-2.50"} {
		if got := FormatMoney(in); got != want {
			t.Errorf("FormatMoney(%d) = %q, want %q", in, got, want)
		}
	}
}

// Cost prices each part of a usage at its own price and rounds the request's sum up once.
func TestCost(t *testing.T) {
	t.Parallel()
	// Claude Sonnet 4.5's prices (USD per million): 3 input, 0.30 cache reads, 3.75 writes, 15 output.
	sonnet := Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, CacheWrite1h: 6_000_000, Output: 15_000_000}
	for _, tc := range []struct {
		name string
		p    Price
		u    Usage
		want int64
	}{
		// 1000 x 3 + 200 x 15 = 6000 micro-USD.
		{"plain", sonnet, Usage{Input: 1000, Output: 200}, 6000},
		// 100 plain x 3 + 800 read x 0.30 + 100 written x 3.75 + 10 out x 15 = 300 + 240 + 375 + 150.
		{"cached", sonnet, Usage{Input: 1000, CacheRead: 800, CacheWrite: 100, Output: 10}, 1065},
		// 40 of the 100 written for an hour: 60 x 3.75 + 40 x 6 = 225 + 240 in place of 375.
		{"cached for an hour", sonnet, Usage{Input: 1000, CacheRead: 800, CacheWrite: 100, CacheWrite1h: 40, Output: 10}, 1155},
		{"hour above the writes", sonnet, Usage{Input: 100, CacheWrite: 10, CacheWrite1h: 50}, 330},
		// gpt-4o-mini: 7 x 0.15 = 1.05 micro-USD, rounded up to 2.
		{"rounded up", Price{Input: 150_000, Output: 600_000}, Usage{Input: 7}, 2},
		{"per request", Price{Input: 1_000_000, Output: 1_000_000, Request: 5000}, Usage{Input: 1, Output: 1}, 5002},
		{"nothing", sonnet, Usage{}, 0},
		{"negative counts", sonnet, Usage{Input: -5, Output: -1, CacheRead: -3}, 0},
		{"cache above input", sonnet, Usage{Input: 10, CacheRead: 100}, 30},
		{"saturates", Price{Input: 100_000_000_000, Output: 100_000_000_000}, Usage{Input: math.MaxInt64, Output: math.MaxInt64}, MaxAmount},
	} {
		if got := tc.p.Cost(tc.u); got != tc.want {
			t.Errorf("%s: Cost = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// Max is never below the cost of any usage within its counts.
func TestMaxBoundsCost(t *testing.T) {
	t.Parallel()
	prices := []Price{
		{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, CacheWrite1h: 6_000_000, Output: 15_000_000},
		{Input: 150_000, CachedInput: 75_000, CacheWrite: 150_000, Output: 600_000, Request: 7},
		{Input: 1, Output: 1},
	}
	for _, p := range prices {
		for _, prompt := range []int64{0, 1, 7, 1000, 123_457} {
			for _, out := range []int64{0, 1, 99, 4096} {
				m := p.Max(prompt, out)
				for _, u := range []Usage{
					{Input: prompt, Output: out}, {Input: prompt, CacheWrite: prompt, Output: out},
					{Input: prompt, CacheWrite: prompt, CacheWrite1h: prompt, Output: out},
					{Input: prompt, CacheRead: prompt / 2, CacheWrite: prompt / 2, Output: out}, {Input: prompt / 3, Output: out / 2},
				} {
					if c := p.Cost(u); c > m {
						t.Errorf("%+v: Cost(%+v) = %d above Max(%d, %d) = %d", p, u, c, prompt, out, m)
					}
				}
			}
		}
	}
	// Sonnet, 1000 prompt tokens all written to the cache for an hour, 500 output: 6000 + 7500.
	if got := prices[0].Max(1000, 500); got != 13500 {
		t.Errorf("Max = %d, want 13500", got)
	}
}

func FuzzCost(f *testing.F) {
	f.Add(int64(1000), int64(10), int64(10), int64(100), int64(3_000_000), int64(15_000_000))
	f.Fuzz(func(t *testing.T, in, read, write, out, pin, pout int64) {
		p := Price{Input: pin, CachedInput: pin / 10, CacheWrite: pin, Output: pout}
		c := p.Cost(Usage{Input: in, CacheRead: read, CacheWrite: write, Output: out})
		if c < 0 || c > MaxAmount {
			t.Fatalf("cost %d out of [0, MaxAmount]", c)
		}
		if m := p.Max(in, out); read >= 0 && write >= 0 && read+write <= in && m < c && in >= 0 {
			t.Fatalf("Max %d below Cost %d", m, c)
		}
	})
}
