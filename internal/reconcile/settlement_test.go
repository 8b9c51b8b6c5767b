package reconcile

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// The reservation is 1000 tokens (prompt 200 + output 800) of 10000 and one request of 100.
func TestErrorsSettle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		status      string
		keep        float64
		refund      bool
		tokens, rpm int64
	}{
		// The attack this closes: a request the provider refuses at once held the whole
		// reservation while in flight and got it all back. Keeping 0 is that old behaviour.
		{"4xx_keeps_its_part", "400", 0.25, true, 9250 + 500, 99},
		{"4xx_keep_0_gives_everything_back", "400", 0, true, 10000, 99},
		{"4xx_keep_1_gives_nothing_back", "422", 1, true, 9000, 99},
		{"429_is_a_4xx", "429", 0.5, true, 9500, 99},
		{"5xx_gives_the_tokens_back", "503", 0.25, true, 10000, 99},
		{"no_refund_rule_keeps_everything_on_4xx", "400", 0, false, 9000, 99},
		{"no_refund_rule_keeps_everything_on_5xx", "500", 0, false, 9000, 99},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := DefaultSettlement()
			set.KeepOnClientError = tc.keep
			e := newEnvWith(t, nil, func(o *Options) { o.Settlement = &set })
			r := e.reserve(t, false)
			r.Buckets[0].Refund = tc.refund
			e.run(t, r, true, headers(":status", tc.status), body(`{"error":{"message":"bad"}}`, true))
			if got := e.remaining(t, tpm); got != tc.tokens {
				t.Errorf("tokens remaining %d, want %d", got, tc.tokens)
			}
			if got := e.remaining(t, rpm); got != tc.rpm {
				t.Errorf("requests remaining %d, want %d", got, tc.rpm)
			}
			if got := e.remaining(t, live); got != 1 {
				t.Errorf("in-flight slots %d, want 1", got)
			}
		})
	}
}

func counter(t *testing.T, c *prometheus.CounterVec, labels ...string) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.WithLabelValues(labels...).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// Hostile usage from upstream: bounded field by field, then as a whole, and counted. The
// reservation is 1000 of 10000: with usage_factor 8 at most 8000 is charged (2000 left).
func TestUsageIsBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		usage  string
		set    func(*Settlement)
		tokens int64
		reason string
	}{
		{"plausible_overage", `{"usage":{"total_tokens":7000}}`, nil, 3000, ""},
		{"1e12", `{"usage":{"prompt_tokens":1000000000000,"completion_tokens":5,"total_tokens":1000000000005}}`, nil, 2000, clampFactor},
		{"int64_overflow", `{"usage":{"prompt_tokens":9223372036854775807,"input_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807}}`, nil, 2000, clampFactor},
		{"negative_fields", `{"usage":{"prompt_tokens":-9223372036854775808,"completion_tokens":300}}`, nil, 9700, ""},
		{"float_syntax_is_unreadable", `{"usage":{"total_tokens":1e12}}`, nil, 9000, ""},
		{"ceiling_below_the_factor", `{"usage":{"total_tokens":6000}}`, func(s *Settlement) { s.MaxUsage = 4000 }, 6000, clampCeiling},
		{"no_factor", `{"usage":{"total_tokens":900000}}`, func(s *Settlement) { s.UsageFactor, s.MaxUsage = 0, 9000 }, 1000, clampCeiling},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			set := DefaultSettlement()
			if tc.set != nil {
				tc.set(&set)
			}
			m := NewMetrics(prometheus.NewRegistry())
			e := newEnvWith(t, nil, func(o *Options) { o.Settlement, o.Metrics = &set, m })
			r := e.reserve(t, false)
			e.run(t, r, true, headers(":status", "200", "content-type", "application/json"), body(tc.usage, true))
			if got := e.remaining(t, tpm); got != tc.tokens {
				t.Errorf("tokens remaining %d, want %d", got, tc.tokens)
			}
			for _, why := range []string{clampFactor, clampCeiling} {
				want := 0.0
				if why == tc.reason {
					want = 1
				}
				if got := counter(t, m.clamps, "openai", why); got != want {
					t.Errorf("clamped{%s} = %v, want %v", why, got, want)
				}
			}
		})
	}
}

// refusing refuses every Adjust, like a store that rejects the adjustment.
type refusing struct{ Store }

func (refusing) Adjust(context.Context, string, []bucket.Adjustment) error {
	return errors.New("bucket: invalid adjustment")
}

// The overage and refund metrics count what the store applied: nothing when it refused.
func TestMetricsCountOnlyWhatTheStoreApplied(t *testing.T) {
	t.Parallel()
	for _, fail := range []bool{false, true} {
		m := NewMetrics(prometheus.NewRegistry())
		e := newEnvWith(t, func(s Store) Store {
			if fail {
				return refusing{s}
			}
			return s
		}, func(o *Options) { o.Metrics = m })
		r := e.reserve(t, false)
		e.run(t, r, true, headers(":status", "200"), body(`{"usage":{"total_tokens":3000}}`, true))
		want := 2000.0
		if fail {
			want = 0
		}
		if got := counter(t, m.tokens, "openai", "overage", "tokens"); got != want {
			t.Errorf("store failing %v: overage counted %v, want %v", fail, got, want)
		}
	}
}

// The dialects bound each reported count to provider.MaxCount, the store's largest amount.
func TestMaxCountIsTheStoresMaxAmount(t *testing.T) {
	t.Parallel()
	if provider.MaxCount != bucket.MaxAmount {
		t.Errorf("provider.MaxCount %d, bucket.MaxAmount %d", int64(provider.MaxCount), int64(bucket.MaxAmount))
	}
}
