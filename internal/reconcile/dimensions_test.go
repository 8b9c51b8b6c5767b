package reconcile

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

var (
	itpm = bucket.Spec{Name: "anthropic:b", Limit: 10000, Period: time.Minute, Slot: 3}
	otpm = bucket.Spec{Name: "anthropic:b", Limit: 4000, Period: time.Minute, Slot: 4}
)

// anthropicHold reserves a Messages request of 1000 prompt tokens and 500 output, as the check
// path counts it under Anthropic's profile: input and output settle, cache reads free.
func (e *env) anthropicHold(t *testing.T, weight int64, cacheFree, refund, feedback bool) *reservation.Reservation {
	t.Helper()
	return e.hold(t, &reservation.Reservation{Tag: "anthropic", Model: "claude-sonnet-4-5", Prompt: 1000, Output: 500,
		Weight: weight, CacheReadsFree: cacheFree, Buckets: []reservation.Bucket{
			{Kind: reservation.KindInput, Refund: refund, Feedback: feedback, Spec: withCost(itpm, 1000)},
			{Kind: reservation.KindOutput, Refund: refund, Feedback: feedback, Spec: withCost(otpm, 500*weight)},
		}})
}

func TestSettlePerDimension(t *testing.T) {
	t.Parallel()
	const usage = `{"usage":{"input_tokens":300,"cache_creation_input_tokens":100,"cache_read_input_tokens":800,"output_tokens":120}}`
	for _, tc := range []struct {
		name          string
		weight        int64
		cacheFree     bool
		refund        bool
		body          string
		input, output int64 // remaining after settlement
	}{
		// input counted 300 + 100 (cache reads free): 600 of the 1000 back; output 120 of 500.
		{"cache reads free", 1, true, true, usage, 10000 - 400, 4000 - 120},
		// Claude Haiku 3 counts its cache reads: 1200 against 1000 reserved, 200 charged.
		{"cache reads counted", 1, false, true, usage, 10000 - 1200, 4000 - 120},
		// An output weight of 5: 500 x 5 reserved, 120 x 5 counted.
		{"output weight", 5, true, true, usage, 10000 - 400, 4000 - 600},
		// Without refund only the overage is charged: input 1200 > 1000 costs 200 more.
		{"no refund, overage charged", 1, false, false, usage, 10000 - 1200, 4000 - 500},
		{"no refund, nothing over", 1, true, false, usage, 10000 - 1000, 4000 - 500},
		// A stream: message_start's input, message_delta's cumulative output.
		{"stream", 1, true, true, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":50,\"cache_read_input_tokens\":900,\"output_tokens\":1}}}\n\n" +
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":77}}\n\n", 10000 - 50, 4000 - 77},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.provider = "anthropic"
			r := e.anthropicHold(t, tc.weight, tc.cacheFree, tc.refund, false)
			ct := "application/json"
			if tc.name == "stream" {
				ct = "text/event-stream"
			}
			e.run(t, r, true, headers(":status", "200", "content-type", ct), body(tc.body, true))
			if in, out := e.remaining(t, itpm), e.remaining(t, otpm); in != tc.input || out != tc.output {
				t.Errorf("input remaining %d, output %d; want %d, %d", in, out, tc.input, tc.output)
			}
		})
	}
}

// A tokens bucket counted by OpenAI's character rule keeps its admission count: usage above it
// is no overage (the provider counted the request on arrival, by the same rule).
func TestSettleCharsCounted(t *testing.T) {
	t.Parallel()
	for _, chars := range []bool{false, true} {
		e := newEnv(t)
		r := e.hold(t, &reservation.Reservation{Tag: "openai", Model: "gpt-4o", Prompt: 200, Output: 100, Weight: 1,
			CharsCounted: chars, Buckets: []reservation.Bucket{{Kind: reservation.KindTokens, Spec: withCost(tpm, 300)}}})
		e.run(t, r, true, headers(":status", "200"), body(`{"usage":{"prompt_tokens":250,"completion_tokens":100,"total_tokens":350}}`, true))
		want := int64(10000 - 350)
		if chars {
			want = 10000 - 300
		}
		if got := e.remaining(t, tpm); got != want {
			t.Errorf("chars counted %v: remaining %d, want %d", chars, got, want)
		}
	}
}

// Each dimension's bucket is lowered by the provider's report of that dimension, taken as
// rounded.
func TestFeedbackPerDimension(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.provider = "anthropic"
	r := e.anthropicHold(t, 1, true, false, true)
	e.run(t, r, true, headers(":status", "200",
		"anthropic-ratelimit-input-tokens-limit", "10000", "anthropic-ratelimit-input-tokens-remaining", "3000",
		"anthropic-ratelimit-output-tokens-limit", "4000", "anthropic-ratelimit-output-tokens-remaining", "3000"),
		body(`{"usage":{"input_tokens":1000,"output_tokens":500}}`, true))
	// Input: 9000 held, the provider says 3000 (at most 3499 by its rounding): lowered to 3500.
	// Output: 3500 held, the provider's 3000 may be 3499: not lowered.
	if in, out := e.remaining(t, itpm), e.remaining(t, otpm); in != 3500 || out != 3500 {
		t.Errorf("input remaining %d, output %d; want 3500, 3500", in, out)
	}
}

// A 429 without retry-after is a spend limit, not a rate limit: no bucket is paused, and it is
// counted as its own correction.
func TestSpendCapPausesNothing(t *testing.T) {
	t.Parallel()
	for _, retry := range []bool{false, true} {
		m := NewMetrics(prometheus.NewRegistry())
		e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
		e.provider = "anthropic"
		r := e.anthropicHold(t, 1, true, true, true)
		h := []string{":status", "429"}
		if retry {
			h = append(h, "retry-after", "30")
		}
		e.run(t, r, true, headers(h...), body(`{"type":"error","error":{"type":"rate_limit_error","message":"m"}}`, true))
		in := e.remaining(t, itpm)
		var c dto.Metric
		if err := m.corrections.WithLabelValues("anthropic", correctionSpendCap).Write(&c); err != nil {
			t.Fatal(err)
		}
		spend := c.GetCounter().GetValue()
		if retry {
			// Paused: 30 s of a 10000 per minute refill below the reservation's 1000.
			if in > 1000-5000 || spend != 0 {
				t.Errorf("rate limit 429: input remaining %d (want paused), spend cap counted %v", in, spend)
			}
			continue
		}
		// Refunded but 0.25 kept (the 4xx rule), nothing paused.
		if in != 10000-250 || spend != 1 {
			t.Errorf("spend cap 429: input remaining %d, want %d; spend cap counted %v, want 1", in, 10000-250, spend)
		}
	}
}
