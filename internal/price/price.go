package price

import (
	_ "embed"
	"fmt"
	"math/bits"
	"strings"
)

// MaxAmount is the largest amount of money the package returns, in micro-units: the store's
// largest amount (bucket.MaxAmount; config holds them equal), 1,000,000 currency units.
const MaxAmount = 1_000_000_000_000

// MaxPrice bounds one price, in micro-units per million tokens (or per request): 100,000
// currency units, far above any model's. internal/config refuses a price above it.
const MaxPrice = 100_000_000_000

// Price is what one model costs. Token prices are in micro-units per million tokens (2.50 USD per
// million is 2,500,000); Request is in micro-units per request. A Price is a plain value, safe for
// concurrent use.
type Price struct {
	// Input is the price of input tokens neither read from nor written to the prompt cache.
	Input int64
	// CachedInput is the price of input tokens read from the prompt cache.
	CachedInput int64
	// CacheWrite is the price of input tokens written to the prompt cache (for five minutes,
	// where the provider prices lifetimes apart).
	CacheWrite int64
	// CacheWrite1h is the price of input tokens written to the prompt cache for an hour
	// (Anthropic's 1-hour cache writes).
	CacheWrite1h int64
	// Output is the price of output tokens (reasoning tokens included: providers bill them as
	// output).
	Output int64
	// Request is the price of one request, for a provider that charges per request.
	Request int64
}

// Usage is what a response consumed, in the provider's counts: Input is every prompt token (cache
// reads and writes included), CacheRead and CacheWrite the parts of it read from and written to
// the prompt cache, CacheWrite1h the part of CacheWrite written for an hour, Output the
// generated tokens.
type Usage struct {
	Input, CacheRead, CacheWrite, CacheWrite1h, Output int64
}

// Cost is what u costs at p, in micro-units: the uncached input at Input, cache reads at
// CachedInput, cache writes at CacheWrite (those written for an hour at CacheWrite1h), the output
// at Output, rounded up to the micro-unit, plus Request. Negative counts count as zero, cache parts above the input are taken as they are
// (the input is then counted as their sum).
func (p *Price) Cost(u Usage) int64 {
	read, write := max(u.CacheRead, 0), max(u.CacheWrite, 0)
	plain := max(u.Input, 0) - read - write
	if plain < 0 {
		plain = 0
	}
	hour := min(max(u.CacheWrite1h, 0), write)
	var s sum
	s.add(plain, p.Input)
	s.add(read, p.CachedInput)
	s.add(write-hour, p.CacheWrite)
	s.add(hour, p.CacheWrite1h)
	s.add(max(u.Output, 0), p.Output)
	return s.micro(p.Request)
}

// Max is the most a request of prompt input tokens that may generate output tokens can cost at
// p: every input token at the dearest of its input prices (a prompt may be written to the cache,
// for an hour; reads only cost less), every output token at Output, plus Request. It is never below
// Cost of any usage within those counts.
func (p *Price) Max(prompt, output int64) int64 {
	var s sum
	s.add(max(prompt, 0), max(p.Input, p.CacheWrite, p.CacheWrite1h, p.CachedInput))
	s.add(max(output, 0), p.Output)
	return s.micro(p.Request)
}

// sum is a 128-bit sum of products of tokens and prices.
type sum struct{ hi, lo uint64 }

func (s *sum) add(n, price int64) {
	if n <= 0 || price <= 0 {
		return
	}
	hi, lo := bits.Mul64(uint64(n), uint64(price))
	var c uint64
	s.lo, c = bits.Add64(s.lo, lo, 0)
	s.hi += hi + c
}

// micro is the sum over a million, rounded up, plus extra, saturated at MaxAmount.
func (s *sum) micro(extra int64) int64 {
	const million = 1_000_000
	if s.hi >= million {
		return MaxAmount // the quotient would not fit in 64 bits
	}
	q, r := bits.Div64(s.hi, s.lo, million)
	if r > 0 {
		q++
	}
	if q > MaxAmount {
		return MaxAmount
	}
	return min(int64(q)+max(extra, 0), MaxAmount)
}

// ParseMoney reads a decimal amount of currency units ("250", "2.50", "0.075") as micro-units,
// exactly: at most six decimals, no sign, no exponent, at most max micro-units.
func ParseMoney(s string, max int64) (int64, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" && frac == "" || dot && frac == "" || len(frac) > 6 {
		return 0, fmt.Errorf("%q is not an amount like 250 or 2.50 (at most 6 decimals)", s)
	}
	var v int64
	for _, c := range whole + frac + strings.Repeat("0", 6-len(frac)) {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not an amount like 250 or 2.50 (at most 6 decimals)", s)
		}
		if v > (max-int64(c-'0'))/10 {
			return 0, fmt.Errorf("%q is above %s", s, FormatMoney(max))
		}
		v = v*10 + int64(c-'0')
	}
	return v, nil
}

// FormatMoney writes micro-units as a decimal amount of currency units with its significant
// decimals, at least two ("250.00", "0.075").
func FormatMoney(m int64) string {
	sign := ""
	if m < 0 {
		sign, m = "-", -m
	}
	frac := fmt.Sprintf("%06d", m%1_000_000)
	frac = strings.TrimRight(frac, "0")
	for len(frac) < 2 {
		frac += "0"
	}
	return fmt.Sprintf("%s%d.%s", sign, m/1_000_000, frac)
}

// Defaults is the default price table as YAML: a list of entries, each a provider and a model
// glob (the first entry matching a request applies), the prices in currency units per million
// tokens (and per request), the page each price comes from and the date it was read.
// internal/config compiles it after the limits file's own entries.
//
//go:embed defaults.yaml
var Defaults []byte
