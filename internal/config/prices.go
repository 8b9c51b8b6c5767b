package config

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
)

// Money is an amount of currency units written as a decimal ("250", "2.50", "0.075"), kept as
// micro-units: read from the YAML text itself, never through a float.
type Money struct {
	// Micro is the amount in micro-units; Text is the value as written ("" when unset).
	Micro int64
	Text  string
}

// UnmarshalYAML keeps the scalar's text; compile parses it (so that every bad amount is
// reported with its key).
func (m *Money) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: an amount is a number like 250 or 2.50", n.Line)}}
	}
	m.Text = n.Value
	if m.Text == "" {
		m.Text = `""`
	}
	return nil
}

// set reports whether the amount was written.
func (m *Money) set() bool { return m.Text != "" }

// parse reads the amount into Micro, at most max micro-units; key names it in the error.
func (m *Money) parse(key string, max int64, bad func(key, format string, args ...any)) {
	v, err := price.ParseMoney(m.Text, max)
	if err != nil {
		bad(key, "%v", err)
		return
	}
	m.Micro = v
}

// PriceSpec is one entry of the price table: what a provider's models matching a glob cost, in
// currency units per million tokens (and per request).
type PriceSpec struct {
	// Provider and Model are globs (empty matches every provider, every model).
	Provider string `yaml:"provider"`
	Model    string `yaml:"model"`
	// Input is the price of uncached input tokens; required.
	Input Money `yaml:"input"`
	// CachedInput is the price of input read from the prompt cache; unset: Input.
	CachedInput Money `yaml:"cached_input"`
	// CacheWrite is the price of input written to the prompt cache; unset: Input.
	CacheWrite Money `yaml:"cache_write"`
	// CacheWrite1h is the price of input written to the prompt cache for an hour (Anthropic);
	// unset: CacheWrite.
	CacheWrite1h Money `yaml:"cache_write_1h"`
	// Output is the price of output tokens; required.
	Output Money `yaml:"output"`
	// Request is the price of each request; unset: none.
	Request Money `yaml:"request"`
	// Source is where the price comes from (a URL, a contract) and Date when it was read
	// (YYYY-MM-DD): required in the default table, recommended in a limits file.
	Source string `yaml:"source"`
	Date   string `yaml:"date"`
}

// CostSpec is a rule's money limit: at most Limit of Currency per Period.
type CostSpec struct {
	// Limit is the budget in currency units ("250", "12.50"), at most 1,000,000.
	Limit Money `yaml:"limit"`
	// Currency is the price table's: USD.
	Currency string `yaml:"currency"`
	// Algorithm is quota (the default: per calendar Period) or sliding_window (per rolling
	// Period).
	Algorithm string `yaml:"algorithm"`
	// Period is, for a quota, day or month: renewed at the period's start in Timezone; for a
	// sliding window, its length (day, 7d, 30d, 36h: at most 31 days).
	Period string `yaml:"period"`
	// Timezone is the IANA time zone whose midnights a quota's periods start at; empty is UTC.
	Timezone string `yaml:"timezone"`
	// AlertAt is the part of the budget (0 to 1) whose crossing is counted and logged, once per
	// period and scope; unset: DefaultAlertAt.
	AlertAt *float64 `yaml:"alert_at"`
}

// DefaultAlertAt is the part of a money budget whose crossing is counted and logged when a
// cost limit names none.
const DefaultAlertAt = 0.8

// Currency is the currency of the price table and of every cost limit.
const Currency = "USD"

// PriceEntry is one compiled entry of the price table.
type PriceEntry struct {
	Provider, Model Glob
	Price           price.Price
	// Source and Date say where the price comes from; Default: the entry is the embedded
	// table's.
	Source, Date string
	Default      bool
}

// PriceOf is the price of provider's model: the first entry of the limits file's prices, then
// of the default table, that matches both; ok is false when none does.
func (c *Config) PriceOf(provider, model string) (p *price.Price, ok bool) {
	for i := range c.Prices {
		e := &c.Prices[i]
		if e.Provider.Match(provider) && e.Model.Match(model) {
			return &e.Price, true
		}
	}
	return nil, false
}

// defaultPrices decodes the embedded default table (strict, like a limits file).
func defaultPrices() ([]PriceSpec, error) {
	dec := yaml.NewDecoder(bytes.NewReader(price.Defaults))
	dec.KnownFields(true)
	var specs []PriceSpec
	if err := dec.Decode(&specs); err != nil {
		return nil, fmt.Errorf("default price table: %w", err)
	}
	return specs, nil
}

// compilePrices compiles the file's prices, then the default table's, into c.Prices.
func (f *File) compilePrices(c *Config, bad func(key, format string, args ...any)) {
	for i := range f.Prices {
		if e, ok := compilePrice(&f.Prices[i], fmt.Sprintf("prices[%d]", i), false, bad); ok {
			c.Prices = append(c.Prices, e)
		}
	}
	defs, err := defaultPrices()
	if err != nil {
		bad("prices", "%v", err)
		return
	}
	for i := range defs {
		if e, ok := compilePrice(&defs[i], fmt.Sprintf("default price table[%d]", i), true, bad); ok {
			c.Prices = append(c.Prices, e)
		}
	}
}

func compilePrice(p *PriceSpec, key string, def bool, bad func(key, format string, args ...any)) (PriceEntry, bool) {
	n := 0
	b := func(k, format string, args ...any) { n++; bad(key+"."+k, format, args...) }
	e := PriceEntry{Provider: NewGlob(p.Provider), Model: NewGlob(p.Model), Source: p.Source, Date: p.Date, Default: def}
	for _, m := range [...]struct {
		name     string
		v        *Money
		to       *int64
		required bool
	}{
		{"input", &p.Input, &e.Price.Input, true}, {"cached_input", &p.CachedInput, &e.Price.CachedInput, false},
		{"cache_write", &p.CacheWrite, &e.Price.CacheWrite, false}, {"cache_write_1h", &p.CacheWrite1h, &e.Price.CacheWrite1h, false},
		{"output", &p.Output, &e.Price.Output, true},
		{"request", &p.Request, &e.Price.Request, false},
	} {
		switch {
		case m.v.set():
			m.v.parse(m.name, price.MaxPrice, b)
			*m.to = m.v.Micro
		case m.required:
			b(m.name, "required (currency units per million tokens, like 2.50)")
		}
	}
	if !p.CachedInput.set() {
		e.Price.CachedInput = e.Price.Input
	}
	if !p.CacheWrite.set() {
		e.Price.CacheWrite = e.Price.Input
	}
	if !p.CacheWrite1h.set() {
		e.Price.CacheWrite1h = e.Price.CacheWrite
	}
	if p.Date != "" {
		if _, err := time.Parse(time.DateOnly, p.Date); err != nil {
			b("date", "%q is not a date like 2026-12-06", p.Date)
		}
	}
	if def && (p.Source == "" || p.Date == "") {
		b("source", "the default table cites a source and a date for every price")
	}
	return e, n == 0
}

// compileCost compiles a rule's cost limit; key is the rule's path and m its match. c holds the
// compiled prices.
func compileCost(cs *CostSpec, key string, m *Match, c *Config) (*Limit, float64, []error) {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.cost.%s: %s", key, k, fmt.Sprintf(format, args...)))
	}
	l := &Limit{Algorithm: bucket.Quota}
	alertAt := DefaultAlertAt
	if cs.AlertAt != nil {
		alertAt = *cs.AlertAt
		if !(alertAt > 0 && alertAt <= 1) {
			bad("alert_at", "%v is not in (0, 1]", alertAt)
		}
	}
	if !cs.Limit.set() {
		bad("limit", "required (an amount of %s, like 250)", Currency)
	} else if cs.Limit.parse("limit", bucket.MaxAmount, bad); cs.Limit.Micro <= 0 && len(errs) == 0 {
		bad("limit", "must be above zero")
	}
	l.Limit = cs.Limit.Micro
	if cs.Currency != Currency {
		bad("currency", "%q: the price table is in %s", cs.Currency, Currency)
	}
	switch cs.Algorithm {
	case "", "quota":
		l.Calendar, l.Zone = calendar(cs.Period, cs.Timezone, "a money budget renews per calendar day or month, at its start in timezone (or use algorithm: sliding_window)", bad)
	case "sliding_window":
		l.Algorithm = bucket.SlidingWindow
		if cs.Timezone != "" {
			bad("timezone", "applies to algorithm: quota only (calendar periods)")
		}
		l.Period = window(cs.Period, bad)
	default:
		bad("algorithm", "%q is not quota or sliding_window", cs.Algorithm)
	}
	// A rule naming one model must find its price now: a request to it would otherwise be
	// refused at every call. When the rule names one provider too, the price must be that
	// provider's (the default table prices no Azure, Bedrock or Vertex model).
	if model := m.Model; model != "" && !strings.ContainsAny(model, "*?") {
		prov := m.Provider
		if strings.ContainsAny(prov, "*?") {
			prov = ""
		}
		found := false
		for i := range c.Prices {
			e := &c.Prices[i]
			if e.Model.Match(model) && (prov == "" || e.Provider.Match(prov)) {
				found = true
				break
			}
		}
		switch {
		case found:
		case prov != "":
			bad("limit", "no price for model %q of provider %q: add it under prices", model, prov)
		default:
			bad("limit", "no price for model %q: add it under prices", model)
		}
	}
	if len(errs) > 0 {
		return nil, 0, errs
	}
	return l, alertAt, nil
}
