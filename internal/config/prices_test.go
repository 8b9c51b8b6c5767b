package config

import (
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Every default price compiles, cites its source and date, and is found by its models.
func TestDefaultPrices(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("rules: [{name: r, requests: {limit: 1, period: minute}}]"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	specs, err := defaultPrices()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Prices) != len(specs) || len(specs) < 15 {
		t.Fatalf("%d compiled prices for %d default entries", len(c.Prices), len(specs))
	}
	for _, e := range c.Prices {
		if !e.Default || !strings.HasPrefix(e.Source, "https://") || e.Date == "" {
			t.Errorf("%s %s: source %q date %q", e.Provider, e.Model, e.Source, e.Date)
		}
	}
	for _, tc := range []struct {
		provider, model string
		want            price.Price
	}{
		{"openai", "gpt-4o-mini-2024-07-18", price.Price{Input: 150_000, CachedInput: 75_000, CacheWrite: 150_000, CacheWrite1h: 150_000, Output: 600_000}},
		{"openai", "gpt-4o", price.Price{Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 2_500_000, CacheWrite1h: 2_500_000, Output: 10_000_000}},
		{"anthropic", "claude-sonnet-4-5", price.Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, CacheWrite1h: 6_000_000, Output: 15_000_000}},
		{"anthropic", "claude-opus-4-1-20250805", price.Price{Input: 15_000_000, CachedInput: 1_500_000, CacheWrite: 18_750_000, CacheWrite1h: 30_000_000, Output: 75_000_000}},
		{"anthropic", "claude-opus-4-5", price.Price{Input: 5_000_000, CachedInput: 500_000, CacheWrite: 6_250_000, CacheWrite1h: 10_000_000, Output: 25_000_000}},
		{"gemini", "gemini-2.5-flash", price.Price{Input: 300_000, CachedInput: 30_000, CacheWrite: 300_000, CacheWrite1h: 300_000, Output: 2_500_000}},
		// Dated ids, as the APIs name them, and a model whose family follows it.
		{"anthropic", "claude-sonnet-4-5-20250929", price.Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, CacheWrite1h: 6_000_000, Output: 15_000_000}},
		{"anthropic", "claude-haiku-4-5-20251001", price.Price{Input: 1_000_000, CachedInput: 100_000, CacheWrite: 1_250_000, CacheWrite1h: 2_000_000, Output: 5_000_000}},
		{"gemini", "gemini-2.5-flash-lite", price.Price{Input: 100_000, CachedInput: 10_000, CacheWrite: 100_000, CacheWrite1h: 100_000, Output: 400_000}},
	} {
		got, ok := c.PriceOf(tc.provider, tc.model)
		if !ok || *got != tc.want {
			t.Errorf("PriceOf(%s, %s) = %+v, %v; want %+v", tc.provider, tc.model, got, ok, tc.want)
		}
	}
	if _, ok := c.PriceOf("openai", "some-unlisted-model"); ok {
		t.Error("an unlisted model has a price")
	}
	// Azure, Bedrock and Vertex have no default price (defaults.yaml's header): the models they
	// serve are not priced at OpenAI's, Anthropic's or the Gemini API's rates.
	for _, m := range [][2]string{
		{"azure", "gpt-4o"},
		{"bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"},
		{"vertex", "claude-sonnet-4-5@20250929"},
		{"vertex", "gemini-2.5-flash"},
	} {
		if p, ok := c.PriceOf(m[0], m[1]); ok {
			t.Errorf("the default table prices %s %s: %+v", m[0], m[1], p)
		}
	}
}

// Azure, Bedrock and Vertex are priced in the limits file, with globs over the model names the
// limiter sees (docs/configuration.md, money budgets): the model of an Azure deployment (by
// pricing.azure_deployments), a Bedrock model id, inference profile or ARN, and Vertex's
// publisher model or its OpenAI-compatible name. The amounts are the test's, not prices.
func TestProviderPricesInFile(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
prices:
  - {provider: azure, model: "gpt-4o-mini*", input: 1, output: 1, source: test, date: 2026-12-06}
  - {provider: azure, model: "gpt-4o*", input: 2, output: 2, source: test, date: 2026-12-06}
  - {provider: bedrock, model: "*global.anthropic.claude-sonnet-4-5*", input: 3, output: 3, source: test, date: 2026-12-06}
  - {provider: bedrock, model: "*anthropic.claude-sonnet-4-5*", input: 4, output: 4, source: test, date: 2026-12-06}
  - {provider: bedrock, model: "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3", input: 5, output: 5,
     source: test, date: 2026-12-06}
  - {provider: vertex, model: "claude-sonnet-4-5*", input: 6, output: 6, source: test, date: 2026-12-06}
  - {provider: vertex, model: "*gemini-2.5-flash-lite*", input: 7, output: 7, source: test, date: 2026-12-06}
  - {provider: vertex, model: "*gemini-2.5-flash*", input: 8, output: 8, source: test, date: 2026-12-06}
pricing:
  azure_deployments: {prod-4o: gpt-4o}
rules: [{name: r, requests: {limit: 1, period: minute}}]
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		provider, model string
		want            int64 // input price in currency units; 0: no price
	}{
		// Azure: the deployment's model from azure_deployments; an unmapped deployment is
		// looked up by its own name, which no model glob should price.
		{"azure", "gpt-4o", 2},
		{"azure", "gpt-4o-mini", 1},
		{"azure", "my-deployment", 0},
		// Bedrock: a Region's own id, the geographic and global cross-Region profiles, the ARNs
		// of a foundation model and of a system profile, and an application profile's ARN,
		// which names no model.
		{"bedrock", "anthropic.claude-sonnet-4-5-20250929-v1:0", 4},
		{"bedrock", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", 4},
		{"bedrock", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0", 4},
		{"bedrock", "global.anthropic.claude-sonnet-4-5-20250929-v1:0", 3},
		{"bedrock", "arn:aws:bedrock:us-east-1::foundation-model/anthropic.claude-sonnet-4-5-20250929-v1:0", 4},
		{"bedrock", "arn:aws:bedrock:us-east-1:123456789012:inference-profile/global.anthropic.claude-sonnet-4-5-20250929-v1:0", 3},
		{"bedrock", "arn:aws:bedrock:us-east-1:123456789012:application-inference-profile/a1b2c3", 5},
		{"bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0", 0},
		// Vertex: Claude's publisher model with its @version, Gemini's, and Gemini by Vertex's
		// OpenAI-compatible endpoint (the body's google/ model).
		{"vertex", "claude-sonnet-4-5@20250929", 6},
		{"vertex", "gemini-2.5-flash", 8},
		{"vertex", "gemini-2.5-flash-lite", 7},
		{"vertex", "google/gemini-2.5-flash", 8},
		{"vertex", "gemini-2.5-pro", 0},
	} {
		p, ok := c.PriceOf(tc.provider, tc.model)
		switch {
		case tc.want == 0 && ok:
			t.Errorf("PriceOf(%s, %s) = %+v, want none", tc.provider, tc.model, *p)
		case tc.want != 0 && (!ok || p.Input != tc.want*1_000_000):
			t.Errorf("PriceOf(%s, %s) = %+v, %v; want input %d", tc.provider, tc.model, p, ok, tc.want)
		}
	}
	for j := range c.Prices {
		for i := range c.Prices[:j] {
			if covers(c.Prices[i].Provider, c.Prices[j].Provider) && covers(c.Prices[i].Model, c.Prices[j].Model) {
				t.Errorf("entry %d (%s %s) is shadowed by entry %d", j, c.Prices[j].Provider, c.Prices[j].Model, i)
			}
		}
	}
}

// No default entry is shadowed by an earlier one: each matches some provider and model that no
// entry before it matches, so specific models come before their families.
func TestDefaultPricesNotShadowed(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("rules: [{name: r, requests: {limit: 1, period: minute}}]"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for j, later := range c.Prices {
		for _, g := range []Glob{later.Provider, later.Model} {
			if strings.Contains(g.String(), "?") {
				t.Fatalf("default entry %d (%s %s): covers cannot decide a glob with ?", j, later.Provider, later.Model)
			}
		}
		for i, earlier := range c.Prices[:j] {
			if covers(earlier.Provider, later.Provider) && covers(earlier.Model, later.Model) {
				t.Errorf("default entry %d (%s %s) is shadowed by entry %d (%s %s)",
					j, later.Provider, later.Model, i, earlier.Provider, earlier.Model)
			}
		}
	}
}

// covers reports whether every string that b matches, a matches too, for globs without '?': a
// matches b's pattern with each '*' read as a byte no pattern holds, which only a's own '*' can
// take (so a takes whatever b's '*' stands for).
func covers(a, b Glob) bool {
	if b.Any() {
		return a.Any()
	}
	return a.Match(strings.ReplaceAll(b.String(), "*", "\x00"))
}

// covers decides glob inclusion both ways, stars inside and at either end.
func TestCovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"gpt-4o*", "gpt-4o-mini*", true}, {"gpt-4o-mini*", "gpt-4o*", false},
		{"*anthropic.claude-sonnet-4*", "global.anthropic.claude-sonnet-4-5*", true},
		{"global.anthropic.claude-sonnet-4*", "*anthropic.claude-sonnet-4*", false},
		{"claude-opus-4-*", "claude-opus-4-1*", true}, {"claude-opus-4-1*", "claude-opus-4-*", false},
		{"*x*", "*", false}, {"*", "gpt-4o", true}, {"", "gpt-4o*", true}, {"gpt-4o", "*", false},
		{"openai", "openai", true}, {"openai", "azure", false}, {"a*b", "a*c*b", true}, {"a*c*b", "a*b", false},
	} {
		if got := covers(NewGlob(tc.a), NewGlob(tc.b)); got != tc.want {
			t.Errorf("covers(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

// A file's prices come before the defaults; unset cache prices are the input price.
func TestFilePricesOverride(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
prices:
  - {provider: openai, model: "gpt-4o", input: 2, output: 8, request: 0.001, source: contract, date: 2026-11-01}
  - {model: "ft:*", input: "3.000001", output: 12}
rules:
  - name: budget
    per: [tenant]
    cost: {limit: 250, currency: USD, period: month, timezone: Europe/Paris}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.PriceOf("openai", "gpt-4o")
	if want := (price.Price{Input: 2_000_000, CachedInput: 2_000_000, CacheWrite: 2_000_000, CacheWrite1h: 2_000_000, Output: 8_000_000, Request: 1000}); *got != want {
		t.Errorf("override: %+v, want %+v", *got, want)
	}
	if got, _ := c.PriceOf("azure", "ft:mine"); got.Input != 3_000_001 {
		t.Errorf("ft: %+v", got)
	}
	if got, _ := c.PriceOf("openai", "gpt-4o-2024-08-06"); got.Input != 2_500_000 {
		t.Errorf("the default still applies to other models: %+v", got)
	}
	l := c.Rules[0].Limit(provider.Cost)
	if l == nil || l.Algorithm != bucket.Quota || l.Limit != 250_000_000 || l.Calendar != bucket.Month || l.Zone == nil || l.Zone.String() != "Europe/Paris" {
		t.Fatalf("cost limit %+v", l)
	}
	paris, _ := time.LoadLocation("Europe/Paris")
	if l.Zone.String() != paris.String() {
		t.Error("zone")
	}
}

// A cost limit over a rolling window is a sliding window of its length.
func TestCostRollingWindow(t *testing.T) {
	t.Parallel()
	for period, want := range map[string]time.Duration{"30d": 30 * 24 * time.Hour, "day": 24 * time.Hour, "36h": 36 * time.Hour, "31d": 31 * 24 * time.Hour} {
		c, err := Parse([]byte("rules: [{name: r, per: [tenant], cost: {limit: 100, currency: USD, period: "+period+", algorithm: sliding_window}}]\n"), "t.yaml")
		if err != nil {
			t.Fatalf("%s: %v", period, err)
		}
		l := c.Rules[0].Limit(provider.Cost)
		if l == nil || l.Algorithm != bucket.SlidingWindow || l.Period != want || l.Limit != 100_000_000 || l.Zone != nil {
			t.Errorf("%s: cost limit %+v, want a sliding window of %v", period, l, want)
		}
	}
}

// Every problem of prices and cost limits is reported at once, with its key.
func TestCostProblems(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`
prices:
  - {model: a, input: 1.5e3, output: -1}
  - {model: b, input: "0.0000001"}
  - {model: c, input: 1, output: 1, date: yesterday}
rules:
  - {name: a, cost: {limit: 0, currency: USD, period: month}}
  - {name: b, cost: {limit: 10.5, currency: EUR, period: week, timezone: Mars/Olympus}}
  - {name: c, match: {model: unlisted-model}, cost: {limit: 1, currency: USD, period: day}}
  - {name: d, per: [tenant], limits_from: plan, cost: {limit: 1, currency: USD, period: day}}
  - {name: e, cost: {currency: USD, period: day}}
  - {name: f, cost: {limit: 1000000.01, currency: USD, period: day, alert_at: 1.5}}
  - {name: g, match: {provider: vertex, model: gemini-2.5-flash}, cost: {limit: 1, currency: USD, period: day}}
  - {name: h, match: {provider: "*", model: gemini-2.5-flash}, cost: {limit: 1, currency: USD, period: day}}
  - {name: i, cost: {limit: 1, currency: USD, period: 32d, algorithm: sliding_window, timezone: UTC}}
  - {name: j, cost: {limit: 1, currency: USD, period: month, algorithm: sliding_window}}
  - {name: k, cost: {limit: 1, currency: USD, period: day, algorithm: token_bucket}}
  - {name: l, cost: {limit: 1, currency: USD, period: -3d, algorithm: sliding_window}}
plans: {free: {tokens: {limit: 1, period: minute}}}
tenant_plans: {default: free}
`), "t.yaml")
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`prices[0].input: "1.5e3" is not an amount`,
		`prices[0].output: "-1" is not an amount`,
		`prices[1].input: "0.0000001" is not an amount`,
		`prices[1].output: required`,
		`prices[2].date: "yesterday" is not a date`,
		`rules[0].cost.limit: must be above zero`,
		`rules[1].cost.currency: "EUR": the price table is in USD`,
		`rules[1].cost.period: "week": a money budget renews per calendar day or month`,
		`rules[1].cost.timezone: "Mars/Olympus" is not an IANA time zone`,
		`rules[2].cost.limit: no price for model "unlisted-model"`,
		`rules[3].cost: a rule with limits_from: plan`,
		`rules[4].cost.limit: required`,
		`rules[5].cost.limit: "1000000.01" is above 1000000.00`,
		`rules[5].cost.alert_at: 1.5 is not in (0, 1]`,
		`rules[6].cost.limit: no price for model "gemini-2.5-flash" of provider "vertex"`,
		`rules[8].cost.period: "32d" is not second, minute, hour, day, or a duration from 1s to 744h (31d)`,
		`rules[8].cost.timezone: applies to algorithm: quota only`,
		`rules[9].cost.period: month is a calendar period: use algorithm: quota`,
		`rules[10].cost.algorithm: "token_bucket" is not quota or sliding_window`,
		`rules[11].cost.period: "-3d" is not second`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "rules[7]") {
		t.Errorf("a rule of any provider finds the Gemini API's price: %v", err)
	}
}

// The price package saturates at the store's largest amount.
func TestPriceMaxIsStoreMax(t *testing.T) {
	t.Parallel()
	if price.MaxAmount != bucket.MaxAmount {
		t.Fatalf("price.MaxAmount %d != bucket.MaxAmount %d", int64(price.MaxAmount), int64(bucket.MaxAmount))
	}
}
