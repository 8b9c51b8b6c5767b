package reconcile

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// budget is a monthly money budget of 250 USD in micro-units.
var budget = bucket.Spec{Name: "budget:$", Algorithm: bucket.Quota, Calendar: bucket.Month, Limit: 250_000_000}

// sonnet is Claude Sonnet 4.5's price: 3, 0.30 (cache reads), 3.75 (cache writes), 15 USD per
// million.
var sonnet = price.Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, Output: 15_000_000}

// A cost bucket reserved at the most the request can cost settles to what its usage costs, each
// part at its own price; a failed call gives everything back; no usage keeps the reservation.
func TestSettleCost(t *testing.T) {
	t.Parallel()
	// Reserved: 1000 prompt tokens at 3.75 and 500 output at 15: 3750 + 7500.
	const reserved = 11250
	const usage = `{"usage":{"input_tokens":300,"cache_creation_input_tokens":100,"cache_read_input_tokens":800,"output_tokens":120}}`
	// Anthropic's input_tokens excludes the cache: 300 x 3 + 100 x 3.75 + 800 x 0.30 + 120 x 15
	// = 900 + 375 + 240 + 1800.
	const cost = 3315
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":50,\"cache_read_input_tokens\":900,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":77}}\n\n"
	for _, tc := range []struct {
		name, status, ct, body string
		spent                  int64
	}{
		{"usage", "200", "application/json", usage, cost},
		// 50 x 3 + 900 x 0.30 + 77 x 15 = 150 + 270 + 1155.
		{"stream", "200", "text/event-stream", stream, 1575},
		{"provider 4xx", "400", "application/json", `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`, 0},
		{"provider 429", "429", "application/json", `{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}`, 0},
		{"provider 5xx", "529", "application/json", `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`, 0},
		{"no usage", "200", "application/json", `{"content":[]}`, reserved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(prometheus.NewRegistry())
			e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
			e.provider = "anthropic"
			p := sonnet
			r := e.hold(t, &reservation.Reservation{Tag: "anthropic", Model: "claude-sonnet-4-5", Prompt: 1000, Output: 500,
				Weight: 1, CacheReadsFree: true, Price: &p, Buckets: []reservation.Bucket{
					{Kind: reservation.KindCost, Refund: true, Spec: withCost(budget, reserved)},
				}})
			if got := e.remaining(t, budget); got != budget.Limit-reserved {
				t.Fatalf("reserved: remaining %d", got)
			}
			e.run(t, r, true, headers(":status", tc.status, "content-type", tc.ct), body(tc.body, true))
			if got := e.remaining(t, budget); got != budget.Limit-tc.spent {
				t.Errorf("remaining %d, want %d (spent %d)", got, budget.Limit-tc.spent, tc.spent)
			}
			if got := counter(t, m.spend, "budget"); got != float64(tc.spent) {
				t.Errorf("settled spend counted %v, want %d", got, tc.spent)
			}
		})
	}
}

// holdGPT4o reserves 350 micro-USD of the budget for a gpt-4o request of 100 prompt and 10
// output tokens, at gpt-4o's price.
func holdGPT4o(t *testing.T, e *env) *reservation.Reservation {
	t.Helper()
	p := price.Price{Input: 2_500_000, CachedInput: 1_250_000, CacheWrite: 2_500_000, Output: 10_000_000}
	return e.hold(t, &reservation.Reservation{Tag: "openai", Model: "gpt-4o", Prompt: 100, Output: 10, Weight: 1, Price: &p,
		Buckets: []reservation.Bucket{{Kind: reservation.KindCost, Refund: true, Spec: withCost(budget, 350)}}})
}

// A usage above the reservation is charged in full: OpenAI's usage counts cached tokens inside
// prompt_tokens, at the cached price.
func TestSettleCostOverage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := holdGPT4o(t, e)
	// 100 prompt of which 60 cached, 20 output: 40 x 2.5 + 60 x 1.25 + 20 x 10 = 100 + 75 + 200.
	e.run(t, r, true, headers(":status", "200", "content-type", "application/json"),
		body(`{"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":60}}}`, true))
	if got := e.remaining(t, budget); got != budget.Limit-375 {
		t.Errorf("remaining %d, want %d", got, budget.Limit-375)
	}
}

// A usage above its bound (usage_factor x the reservation) is settled at the bound in money too:
// an upstream reporting a million prompt tokens cannot empty a budget.
func TestSettleCostClamped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := holdGPT4o(t, e)
	e.run(t, r, true, headers(":status", "200", "content-type", "application/json"),
		body(`{"usage":{"prompt_tokens":1000000,"completion_tokens":10,"total_tokens":1000010}}`, true))
	// The bound is 8 x 110 = 880 tokens: 880 prompt at 2.5 and 10 output at 10.
	if got := e.remaining(t, budget); got != budget.Limit-2300 {
		t.Errorf("remaining %d, want %d", got, budget.Limit-2300)
	}
}

// Anthropic's 1-hour cache writes are priced apart from its 5-minute ones.
func TestSettleCostHourCacheWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = "anthropic"
	p := sonnet
	p.CacheWrite1h = 6_000_000
	r := e.hold(t, &reservation.Reservation{Tag: "anthropic", Model: "claude-sonnet-4-5", Prompt: 1000, Output: 500,
		Weight: 1, CacheReadsFree: true, Price: &p, Buckets: []reservation.Bucket{
			{Kind: reservation.KindCost, Refund: true, Spec: withCost(budget, 13_500)},
		}})
	// 100 plain at 3, 600 written for 5 minutes at 3.75 and 200 for an hour at 6, 10 out at 15:
	// 300 + 2250 + 1200 + 150.
	e.run(t, r, true, headers(":status", "200", "content-type", "application/json"),
		body(`{"usage":{"input_tokens":100,"cache_creation_input_tokens":800,"cache_read_input_tokens":0,"output_tokens":10,`+
			`"cache_creation":{"ephemeral_5m_input_tokens":600,"ephemeral_1h_input_tokens":200}}}`, true))
	if got := e.remaining(t, budget); got != budget.Limit-3900 {
		t.Errorf("remaining %d, want %d", got, budget.Limit-3900)
	}
}
