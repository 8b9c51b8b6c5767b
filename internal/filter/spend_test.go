package filter

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// A budget of 0.05 USD a month per tenant, in Paris time, next to a rate rule.
const spendLimits = `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: gpt-4o
    match: {provider: openai}
    tokens: {limit: 1000000, period: minute}
  - name: team-budget
    per: [tenant]
    cost: {limit: 0.05, currency: USD, period: month, timezone: Europe/Paris}
  - name: trial
    match: {model: "gpt-trial*"}
    shadow: true
    cost: {limit: 1, currency: USD, period: day}
`

func TestMaxSpend(t *testing.T) {
	t.Parallel()
	p := price.Price{Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 2_500_000, Output: 10_000_000}
	for _, tc := range []struct {
		name string
		est  tokens.Estimate
		want int64
	}{
		// 100 x 2.5 + 50 x 10.
		{"max_tokens", tokens.Estimate{PromptTokens: 100, OutputTokens: 50}, 750},
		// No maximum: the context window may all be output.
		{"no maximum", tokens.Estimate{PromptTokens: 100, OutputTokens: 4096, OutputUnset: true, Context: 128_000}, 250 + 1_280_000},
		{"no maximum, no window known", tokens.Estimate{PromptTokens: 100, OutputTokens: 4096, OutputUnset: true}, 250 + 40_960},
		// An expected cache read is still reserved whole.
		{"cache read expected", tokens.Estimate{PromptTokens: 100, OutputTokens: 50, CacheRead: 80}, 750},
	} {
		if got := maxSpend(&p, &tc.est); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A tenant's requests reserve the most each can cost in its budget, with the rate rules' buckets
// in the same take, until the budget cannot hold the next: then a 429 that names the budget and
// its renewal, in OpenAI's insufficient_quota shape, that the SDKs do not retry.
func TestSpendBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, spendLimits, Options{})
	tenant := map[string]string{"x-tenant-id": "team-a"}
	body := `{"model":"gpt-4o","max_tokens":1000,"messages":[{"role":"user","content":"Hello"}]}`
	var reserved int64
	admitted := 0
	for ; admitted < 10; admitted++ {
		resp := e.answer(t, context.Background(), chat(body, tenant)()).Response()
		if decisionOf(resp) != decisionAllowed {
			break
		}
		md := resp.GetDynamicMetadata().GetFields()
		r := reservationOf(t, resp)
		if r.Price == nil || r.Price.Input != 2_500_000 || r.Price.Output != 10_000_000 {
			t.Fatalf("reservation price %+v", r.Price)
		}
		prompt := int64(md["prompt_tokens"].GetNumberValue())
		want := prompt*25/10 + 1000*10 // micro-USD: 2.5 and 10 per token
		var kinds []byte
		for _, b := range r.Buckets {
			kinds = append(kinds, b.Kind)
			if b.Kind == reservation.KindCost {
				if b.Spec.Cost != want || !b.Refund || b.Spec.Algorithm != bucket.Quota || b.Spec.Calendar != bucket.Month ||
					b.Spec.Zone.String() != "Europe/Paris" || b.Spec.Limit != 50_000 {
					t.Fatalf("cost bucket %+v, want cost %d", b, want)
				}
				reserved += b.Spec.Cost
			}
		}
		if string(kinds) != "t$" {
			t.Fatalf("buckets %q: the rate rule's and the budget's, in one take", kinds)
		}
		if md["spend_reserved_micros"].GetNumberValue() != float64(want) {
			t.Errorf("metadata spend_reserved_micros %v, want %d", md["spend_reserved_micros"], want)
		}
	}
	// 10,0xx micro-USD each: four fit in 50,000, the fifth does not.
	if admitted != 4 {
		t.Fatalf("admitted %d, want 4", admitted)
	}
	resp := e.answer(t, context.Background(), chat(body, tenant)()).Response()
	if d := decisionOf(resp); d != decisionSpent {
		t.Fatalf("decision %q, want %q", d, decisionSpent)
	}
	denied := resp.GetDeniedResponse()
	if denied.GetStatus().GetCode() != 429 {
		t.Errorf("status %v", denied.GetStatus())
	}
	if headerOf(resp, "x-should-retry") != "false" || headerOf(resp, "retry-after") != "" || headerOf(resp, "retry-after-ms") != "" {
		t.Errorf("headers: x-should-retry %q retry-after %q", headerOf(resp, "x-should-retry"), headerOf(resp, "retry-after"))
	}
	var body2 struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal([]byte(denied.GetBody()), &body2); err != nil {
		t.Fatal(err)
	}
	if body2.Error.Type != "insufficient_quota" || body2.Error.Code != "insufficient_quota" {
		t.Errorf("error %+v", body2.Error)
	}
	// The clock is 2026-03-04 UTC: the month renews on April 1st at midnight in Paris, summer
	// time by then.
	for _, want := range []string{"Budget team-budget is spent", price.FormatMoney(reserved) + " of 0.05 USD used per month (Europe/Paris)", "renews at 2026-04-01T00:00:00+02:00"} {
		if !strings.Contains(body2.Error.Message, want) {
			t.Errorf("message %q lacks %q", body2.Error.Message, want)
		}
	}
	// Another tenant has its own budget.
	other := e.answer(t, context.Background(), chat(body, map[string]string{"x-tenant-id": "team-b"})()).Response()
	if d := decisionOf(other); d != decisionAllowed {
		t.Errorf("another tenant: %q", d)
	}
}

// A budget over a rolling window: spent, it names when enough of it leaves the window for the
// request; its settled refunds land where their requests were counted, so what the window still
// counts leaves it on time.
func TestSpendRollingWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: weekly
    per: [tenant]
    cost: {limit: 0.05, currency: USD, period: 7d, algorithm: sliding_window}
`, Options{})
	tenant := map[string]string{"x-tenant-id": "team-a"}
	body := `{"model":"gpt-4o","max_tokens":1000,"messages":[{"role":"user","content":"Hello"}]}`
	var held []*reservation.Reservation
	for i := range 5 {
		resp := e.answer(t, context.Background(), chat(body, tenant)()).Response()
		if d := decisionOf(resp); d != decisionAllowed {
			if i == 4 && d == decisionSpent {
				msg := resp.GetDeniedResponse().GetBody()
				for _, want := range []string{"Budget weekly is spent", "USD used in the last 7 days", "frees up at "} {
					if !strings.Contains(msg, want) {
						t.Errorf("message %s lacks %q", msg, want)
					}
				}
				// The window has 10 sub-windows of 16h48m: the first request's sub-window leaves
				// it from 7 days after the request to one sub-window later.
				_, at, _ := strings.Cut(msg, "frees up at ")
				frees, err := time.Parse(time.RFC3339, strings.TrimSuffix(strings.Split(at, `"`)[0], "."))
				first := e.clock.Now().Add(-4 * time.Hour)
				if err != nil || frees.Before(first.Add(7*24*time.Hour-time.Second)) || frees.After(first.Add(7*24*time.Hour+16*time.Hour+48*time.Minute)) {
					t.Errorf("frees up at %v (%v), want within a sub-window after %v", frees, err, first.Add(7*24*time.Hour))
				}
				if headerOf(resp, "x-should-retry") != "false" {
					t.Errorf("x-should-retry %q", headerOf(resp, "x-should-retry"))
				}
				break
			}
			t.Fatalf("request %d: %q", i, d)
		}
		r := reservationOf(t, resp)
		if b := r.Buckets[0]; b.Kind != reservation.KindCost || b.Spec.Algorithm != bucket.SlidingWindow || b.Spec.Period != 7*24*time.Hour || r.At.IsZero() {
			t.Fatalf("reservation %+v, bucket %+v", r, b)
		}
		held = append(held, r)
		e.clock.Add(time.Hour)
	}
	if len(held) != 4 {
		t.Fatalf("admitted %d, want 4 of about 0.01 USD in 0.05", len(held))
	}
	// The first request cost a hundredth of what it reserved: the rest comes back where it was
	// counted, and a fifth request fits.
	first := held[0].Buckets[0]
	if err := e.store.Adjust(context.Background(), held[0].Tag, []bucket.Adjustment{{Spec: first.Spec, Delta: first.Spec.Cost - first.Spec.Cost/100, At: held[0].At}}); err != nil {
		t.Fatal(err)
	}
	if d := decisionOf(e.answer(t, context.Background(), chat(body, tenant)()).Response()); d != decisionAllowed {
		t.Fatalf("after the refund: %q", d)
	}
}

// Anthropic's Messages API answers a spent budget in its own shape: a 429 rate_limit_error
// that x-should-retry: false keeps the SDK from retrying.
func TestSpentAnthropic(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
rules:
  - name: claude-budget
    cost: {limit: 0.01, currency: USD, period: day}
`, Options{})
	body := `{"model":"claude-sonnet-4-5","max_tokens":1000,"messages":[{"role":"user","content":"Hi"}]}`
	resp := e.answer(t, context.Background(), messages(body)).Response()
	// 1000 output at 15 USD a million is 0.015: it can never fit a 0.01 budget.
	if d := decisionOf(resp); d != decisionTooLarge {
		t.Fatalf("decision %q, want %q", d, decisionTooLarge)
	}
	body = `{"model":"claude-sonnet-4-5","max_tokens":400,"messages":[{"role":"user","content":"Hi"}]}`
	if d := decisionOf(e.answer(t, context.Background(), messages(body)).Response()); d != decisionAllowed {
		t.Fatalf("first: %q", d)
	}
	resp = e.answer(t, context.Background(), messages(body)).Response()
	if d := decisionOf(resp); d != decisionSpent {
		t.Fatalf("second: %q", d)
	}
	var b struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &b); err != nil {
		t.Fatal(err)
	}
	if b.Type != "error" || b.Error.Type != "rate_limit_error" || !strings.Contains(b.Error.Message, "Budget claude-budget is spent") ||
		!strings.Contains(b.Error.Message, "renews at 2026-03-05T00:00:00Z") {
		t.Errorf("body %+v", b)
	}
	if headerOf(resp, "x-should-retry") != "false" || headerOf(resp, "retry-after") != "" {
		t.Error("a spent budget must not be retried")
	}
}

// A model without a price under an enforced cost limit is refused, never counted as free; under
// a shadow one it is let through.
func TestUnpricedModel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, spendLimits, Options{})
	resp := e.answer(t, context.Background(), chat(`{"model":"gpt-unlisted","max_tokens":10,"messages":[]}`, nil)()).Response()
	if d := decisionOf(resp); d != decisionUnpriced {
		t.Fatalf("decision %q, want %q", d, decisionUnpriced)
	}
	if resp.GetDeniedResponse().GetStatus().GetCode() != 403 || headerOf(resp, "x-should-retry") != "false" ||
		!strings.Contains(resp.GetDeniedResponse().GetBody(), `no price for model \"gpt-unlisted\"`) {
		t.Errorf("answer %v", resp.GetDeniedResponse())
	}
	e = newEnv(t, `
rules:
  - name: trial
    shadow: true
    cost: {limit: 1, currency: USD, period: day}
`, Options{})
	resp = e.answer(t, context.Background(), chat(`{"model":"gpt-unlisted","max_tokens":10,"messages":[]}`, nil)()).Response()
	if d := decisionOf(resp); d == decisionUnpriced || resp.GetDeniedResponse() != nil {
		t.Errorf("a shadow cost rule refused: %q", d)
	}
}

// The Cost dimension has no rate-limit headers in any dialect.
func TestCostHasNoRateHeaders(t *testing.T) {
	t.Parallel()
	for _, id := range []provider.ID{provider.OpenAI, provider.Azure, provider.Anthropic, provider.Bedrock, provider.Gemini, provider.Vertex} {
		for _, api := range []provider.API{provider.ChatCompletions, provider.Messages, provider.Responses} {
			if h, ok := dialects.Of(id).RateHeaders(api, provider.Cost); ok {
				t.Errorf("%s %s: %+v", id, api, h)
			}
		}
	}
}

// The take that carries a budget across its alert_at is counted and logged, once per period and
// scope, with the tenant's hash; the money reserved is counted per rule.
func TestSpendThreshold(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zapcore.WarnLevel)
	e := newEnv(t, `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: team-budget
    per: [tenant]
    cost: {limit: 0.05, currency: USD, period: month, alert_at: 0.5}
`, Options{Metrics: NewMetrics(reg), Logger: zap.New(core)})
	body := `{"model":"gpt-4o","max_tokens":1000,"messages":[{"role":"user","content":"Hello"}]}`
	ask := func(tenant string) string {
		return decisionOf(e.answer(t, context.Background(), chat(body, map[string]string{"x-tenant-id": tenant})()).Response())
	}
	// About 0.01002 a request: the third crosses 0.025.
	for i, want := range []int{0, 0, 1, 1} {
		if d := ask("team-a"); d != decisionAllowed {
			t.Fatalf("request %d: %q", i, d)
		}
		if got := samples(t, reg, "llm_ratelimit_spend_threshold_crossed_total")["rule=team-budget"]; got != float64(want) {
			t.Fatalf("after request %d: %v crossings, want %d", i, got, want)
		}
	}
	if logs.Len() != 1 {
		t.Fatalf("%d warnings, want 1: %v", logs.Len(), logs.All())
	}
	fields := logs.All()[0].ContextMap()
	if logs.All()[0].Message != "spend threshold crossed" || fields["rule"] != "team-budget" || fields["tenant_hash"] != tenantHash("team-a") ||
		fields["limit"] != "0.05" {
		t.Errorf("log %v %v", logs.All()[0].Message, fields)
	}
	for k, v := range fields {
		if s, ok := v.(string); ok && s == "team-a" {
			t.Errorf("the log names the tenant in %s", k)
		}
	}
	// Another scope crosses its own.
	for range 3 {
		ask("team-b")
	}
	if got := samples(t, reg, "llm_ratelimit_spend_threshold_crossed_total")["rule=team-budget"]; got != 2 {
		t.Errorf("two scopes: %v crossings", got)
	}
	// The next month crosses again.
	e.clock.Add(31 * 24 * time.Hour)
	for range 3 {
		ask("team-a")
	}
	if got := samples(t, reg, "llm_ratelimit_spend_threshold_crossed_total")["rule=team-budget"]; got != 3 {
		t.Errorf("next month: %v crossings", got)
	}
	if got := samples(t, reg, "llm_ratelimit_spend_reserved_micros_total")["rule=team-budget"]; got < 10*10_000 || got > 10*10_100 {
		t.Errorf("reserved %v micro-USD for 10 requests", got)
	}
}

// A replica reports a budget once in its period, however its spend moves around the threshold.
func TestSpendAlertsOncePerPeriod(t *testing.T) {
	t.Parallel()
	var a spendAlerts
	if !a.first("b", 100, 0) || a.first("b", 100, 0) || !a.first("c", 100, 0) || !a.first("b", 200, 150) {
		t.Fatal("once per bucket and period")
	}
	// A rolling window's period runs from its report: another report waits until it has ended.
	if !a.first("r", 100, 0) || a.first("r", 160, 60) || !a.first("r", 220, 120) {
		t.Fatal("once per rolling period")
	}
	for i := range maxAlerts + 10 {
		a.first(strconv.Itoa(i), 1000, 500)
	}
	if len(a.seen) > maxAlerts {
		t.Errorf("%d remembered, at most %d", len(a.seen), maxAlerts)
	}
}
