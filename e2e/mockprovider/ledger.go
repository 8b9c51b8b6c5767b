package main

import (
	"net/http"
	"sort"
	"strings"
	"sync"
)

// listPrice is what a provider bills for one model, in micro-dollars per million tokens: the
// mock's own copy of the providers' public price lists, kept apart from the limiter's table so
// that the e2e suite compares two independent computations of the same bill.
type listPrice struct {
	prefix                            string
	input, cachedInput, write, output int64
}

// prices are the providers' list prices, longest prefix first:
//   - OpenAI, https://platform.openai.com/docs/pricing: gpt-4o-mini $0.15 input, $0.075 cached
//     input, $0.60 output; gpt-4o $2.50, $1.25, $10.00. OpenAI bills no cache writes apart.
//   - Anthropic, https://docs.anthropic.com/en/docs/about-claude/pricing ("Model pricing": base
//     input, 5m cache writes, cache hits, output): Claude Sonnet 4.x $3, $3.75, $0.30, $15;
//     Claude Haiku 4.5 $1, $1.25, $0.10, $5.
var prices = []listPrice{
	{"gpt-4o-mini", 150_000, 75_000, 150_000, 600_000},
	{"gpt-4o", 2_500_000, 1_250_000, 2_500_000, 10_000_000},
	{"claude-sonnet-4", 3_000_000, 300_000, 3_750_000, 15_000_000},
	{"claude-haiku-4-5", 1_000_000, 100_000, 1_250_000, 5_000_000},
}

// bill is what one answered request costs, in micro-dollars, and whether the mock knows the
// model's price: every token class at its own price (the uncached part of the prompt, cache
// reads, cache writes, the output), the sum rounded up to the micro-dollar once per request. The
// providers publish prices per million tokens, not a rounding; the mock bills whole
// micro-dollars per request, the same unit and rounding the limiter keeps budgets in.
func bill(model string, prompt, cacheRead, cacheWrite, output int64) (int64, bool) {
	for _, p := range prices {
		if !strings.HasPrefix(model, p.prefix) {
			continue
		}
		plain := prompt - cacheRead - cacheWrite
		sum := plain*p.input + cacheRead*p.cachedInput + cacheWrite*p.write + output*p.output
		return (sum + 999_999) / 1_000_000, true
	}
	return 0, false
}

// Ledger is the provider's bill: what each API key was charged, request by request. Safe for
// concurrent use.
type Ledger struct {
	mu    sync.Mutex
	byKey map[string]*account
}

// account is one API key's bill.
type account struct {
	Micros   int64 `json:"micros"`
	Requests int64 `json:"requests"`
	// Unpriced counts the answered requests of models the mock has no price for (billed 0).
	Unpriced int64 `json:"unpriced"`
}

// Charge bills one answered request to key and returns its cost in micro-dollars.
func (l *Ledger) Charge(key, model string, prompt, cacheRead, cacheWrite, output int64) int64 {
	c, ok := bill(model, prompt, cacheRead, cacheWrite, output)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byKey == nil {
		l.byKey = map[string]*account{}
	}
	a := l.byKey[key]
	if a == nil {
		a = &account{}
		l.byKey[key] = a
	}
	a.Micros += c
	a.Requests++
	if !ok {
		a.Unpriced++
	}
	return c
}

// serve answers GET /ledger: each key's bill and the total, in micro-dollars.
func (l *Ledger) serve(w http.ResponseWriter) {
	l.mu.Lock()
	keys := make([]string, 0, len(l.byKey))
	out := map[string]any{}
	accounts := map[string]account{}
	var total int64
	for k, a := range l.byKey {
		keys = append(keys, k)
		accounts[k] = *a
		total += a.Micros
	}
	l.mu.Unlock()
	sort.Strings(keys)
	out["keys"], out["total_micros"] = accounts, total
	writeJSON(w, http.StatusOK, out)
}
