package filter

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// slowEstimator is the real pricer whose exact counts take delay (or wait for release): a body
// that is slow to count, on a machine whose cores are busy. Bound is the pricer's own.
type slowEstimator struct {
	*tokens.Pricer
	delay   time.Duration
	release chan struct{} // when not nil, Estimate waits for it
	calls   atomic.Int64
}

func (s *slowEstimator) Estimate(in *tokens.Input) tokens.Estimate {
	s.calls.Add(1)
	if s.release != nil {
		<-s.release
	}
	time.Sleep(s.delay)
	return s.Pricer.Estimate(in)
}

var _ Bounder = (*slowEstimator)(nil)

const deadlineLimits = "rules: [{name: r, tokens: {limit: 100000000, period: minute}}]\n"

func deadlineFilter(t *testing.T, est Estimator, opts Options) (*Filter, *Metrics) {
	t.Helper()
	c, err := config.Parse([]byte(deadlineLimits), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	opts.Limiter = bucket.NewMemory(bucket.MemoryOptions{})
	opts.Metrics = m
	f, err := New(&Policy{Config: c, Estimator: est}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return f, m
}

// bigChat is a chat request of about n bytes with max_tokens 100.
func bigChat(n int) []byte {
	return []byte(`{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("word ", n/5) + `"}]}`)
}

func reasonOf(t *testing.T, f *Filter, body []byte, ctx context.Context) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	resp, err := f.Check(ctx, hostileRequest("/v1/chat/completions", body, nil))
	took := time.Since(start)
	if err != nil || decisionOf(resp) != decisionAllowed {
		t.Fatalf("decision %q, err %v", decisionOf(resp), err)
	}
	return resp.GetDynamicMetadata().GetFields()["estimate_reason"].GetStringValue(), took
}

// TestPricingBounded: a large body whose exact count would not fit its time is priced at the
// upper bound when the count's time is up, or at once when every pricing slot is taken; small
// bodies and quick counts are exact. The control (PricingSlots < 0, the defence off) shows the
// check waiting for the whole count.
func TestPricingBounded(t *testing.T) {
	t.Parallel()
	pricer, err := tokens.New(tokens.Options{})
	if err != nil {
		t.Fatal(err)
	}
	big := bigChat(100 << 10)
	small := bigChat(1 << 10)

	t.Run("small body: exact, never through the slots", func(t *testing.T) {
		t.Parallel()
		est := &slowEstimator{Pricer: pricer, delay: 300 * time.Millisecond}
		f, _ := deadlineFilter(t, est, Options{PricingTimeout: 20 * time.Millisecond})
		if reason, took := reasonOf(t, f, small, context.Background()); reason != "" || took < 300*time.Millisecond {
			t.Errorf("reason %q after %v, want an exact count", reason, took)
		}
	})
	t.Run("quick count of a large body: exact", func(t *testing.T) {
		t.Parallel()
		f, _ := deadlineFilter(t, &slowEstimator{Pricer: pricer}, Options{PricingTimeout: 5 * time.Second})
		if reason, _ := reasonOf(t, f, big, context.Background()); reason != "" {
			t.Errorf("reason %q, want an exact count", reason)
		}
	})
	t.Run("slow count: the bound when its time is up", func(t *testing.T) {
		t.Parallel()
		est := &slowEstimator{Pricer: pricer, delay: 2 * time.Second}
		f, m := deadlineFilter(t, est, Options{PricingTimeout: 50 * time.Millisecond})
		reason, took := reasonOf(t, f, big, context.Background())
		if reason != string(tokens.ReasonDeadline) || took > time.Second {
			t.Errorf("reason %q after %v, want the bound after about 50ms", reason, took)
		}
		if n := metricValue(t, m.bounds.WithLabelValues(boundSlow)); n != 1 {
			t.Errorf("bounded{slow} = %v", n)
		}
	})
	t.Run("the attempt's deadline cuts the count", func(t *testing.T) {
		t.Parallel()
		est := &slowEstimator{Pricer: pricer, delay: 2 * time.Second}
		f, _ := deadlineFilter(t, est, Options{CheckTimeout: 100 * time.Millisecond, StoreTimeout: 20 * time.Millisecond})
		reason, took := reasonOf(t, f, big, context.Background())
		if reason != string(tokens.ReasonDeadline) || took > 100*time.Millisecond {
			t.Errorf("reason %q after %v, want the bound within the 100ms attempt", reason, took)
		}
	})
	t.Run("every slot taken: the bound at once", func(t *testing.T) {
		t.Parallel()
		est := &slowEstimator{Pricer: pricer, release: make(chan struct{})}
		f, m := deadlineFilter(t, est, Options{PricingSlots: 1, PricingTimeout: 10 * time.Second})
		first := make(chan string, 1)
		go func() {
			resp, _ := f.Check(context.Background(), hostileRequest("/v1/chat/completions", big, nil))
			first <- resp.GetDynamicMetadata().GetFields()["estimate_reason"].GetStringValue()
		}()
		for est.calls.Load() == 0 {
			time.Sleep(time.Millisecond) // the first check holds the slot, waiting for release
		}
		reason, took := reasonOf(t, f, big, context.Background())
		if reason != string(tokens.ReasonDeadline) || took > 500*time.Millisecond || est.calls.Load() != 1 {
			t.Errorf("reason %q after %v, %d counts: want the bound at once", reason, took, est.calls.Load())
		}
		if n := metricValue(t, m.bounds.WithLabelValues(boundBusy)); n != 1 {
			t.Errorf("bounded{busy} = %v", n)
		}
		close(est.release)
		if r := <-first; r != "" {
			t.Errorf("first check: reason %q, want its exact count", r)
		}
		if f.pricing.Load() != 0 {
			t.Errorf("%d slots still taken", f.pricing.Load())
		}
	})
	t.Run("control: without the defence the check waits for the count", func(t *testing.T) {
		t.Parallel()
		est := &slowEstimator{Pricer: pricer, delay: 400 * time.Millisecond}
		f, _ := deadlineFilter(t, est, Options{PricingSlots: -1, CheckTimeout: 100 * time.Millisecond})
		if reason, took := reasonOf(t, f, big, context.Background()); reason != "" || took < 400*time.Millisecond {
			t.Errorf("reason %q after %v: the control should count exactly, past the 100ms attempt", reason, took)
		}
	})
}

// TestHoldNeverOutlivesAttempt: with CheckTimeout (Envoy's per-try timeout) shorter than the
// grpc-timeout Envoy sends, a request whose wait does not fit the attempt is denied at once
// instead of being held until Envoy cuts it. The control without CheckTimeout holds it past
// the attempt, which is what let Envoy's failure mode forward it unpriced.
func TestHoldNeverOutlivesAttempt(t *testing.T) {
	t.Parallel()
	yaml := "rules: [{name: r, requests: {limit: 2, period: second}, max_wait: 800ms}]\n"
	for _, tc := range []struct {
		name         string
		checkTimeout time.Duration
		want         string
		minTook      time.Duration
		maxTook      time.Duration
	}{
		{"control: no per-try bound known", 0, decisionDelayed, 300 * time.Millisecond, 5 * time.Second},
		{"per-try bound 300ms", 300 * time.Millisecond, decisionDenied, 0, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := config.Parse([]byte(yaml), "hold")
			if err != nil {
				t.Fatal(err)
			}
			f, err := New(policyFor(t, c), Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{}), CheckTimeout: tc.checkTimeout})
			if err != nil {
				t.Fatal(err)
			}
			req := loadRequest(t, "chat")
			// Envoy's grpc-timeout is its whole ext_authz timeout.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			for i := 0; i < 2; i++ {
				if resp, err := f.Check(ctx, req); err != nil || decisionOf(resp) != decisionAllowed {
					t.Fatalf("request %d: %v %v", i, decisionOf(resp), err)
				}
			}
			start := time.Now()
			resp, err := f.Check(ctx, req)
			took := time.Since(start)
			if err != nil || decisionOf(resp) != tc.want || took < tc.minTook || took > tc.maxTook {
				t.Errorf("third request: %q %v after %v, want %q in [%v, %v]", decisionOf(resp), err, took, tc.want, tc.minTook, tc.maxTook)
			}
		})
	}
}

// TestHoldable: the hold starts after the store's answer, so the time a hold may take is the
// attempt's deadline less the store's timeout and the margin.
func TestHoldable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f, _ := deadlineFilter(t, policyFor(t, mustParse(t, deadlineLimits)).Estimator,
		Options{Now: func() time.Time { return now }, StoreTimeout: 100 * time.Millisecond, HoldMargin: 25 * time.Millisecond, CheckTimeout: time.Second})
	for _, tc := range []struct {
		dl   time.Time
		want time.Duration
		got  time.Duration
	}{
		{time.Time{}, 2 * time.Second, 2 * time.Second},
		{now.Add(time.Second), 2 * time.Second, 875 * time.Millisecond},
		{now.Add(time.Second), 500 * time.Millisecond, 500 * time.Millisecond},
		{now.Add(100 * time.Millisecond), 500 * time.Millisecond, 0},
	} {
		got := f.holdable(tc.dl, tc.want, 10)
		if got > 0 {
			f.held.Add(-1)
		}
		if got != tc.got {
			t.Errorf("holdable(%v, %v) = %v, want %v", tc.dl.Sub(now), tc.want, got, tc.got)
		}
	}
	if lim := f.HoldLimit(); lim != 875*time.Millisecond {
		t.Errorf("HoldLimit = %v", lim)
	}
	if _, err := New(&Policy{Config: mustParse(t, deadlineLimits), Estimator: f.Policy().Estimator},
		Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{}), CheckTimeout: 100 * time.Millisecond, StoreTimeout: 100 * time.Millisecond}); err == nil {
		t.Error("a CheckTimeout within the store's timeout was accepted")
	}
}

// TestRouteMaxWaitAboveAttempt: a route whose max_wait cannot be honoured is a bad route (500),
// loud like any other invalid context_extensions.
func TestRouteMaxWaitAboveAttempt(t *testing.T) {
	t.Parallel()
	f, _ := deadlineFilter(t, policyFor(t, mustParse(t, deadlineLimits)).Estimator, Options{CheckTimeout: time.Second})
	for _, tc := range []struct{ wait, want string }{{"500ms", decisionAllowed}, {"2s", decisionBadRoute}} {
		req := loadRequest(t, "chat")
		req.Attributes.ContextExtensions = map[string]string{"rule": "x", "tokens_per_minute": "100000", "max_wait": tc.wait}
		resp, err := f.Check(context.Background(), req)
		if err != nil || decisionOf(resp) != tc.want {
			t.Errorf("max_wait %s: %q %v, want %q", tc.wait, decisionOf(resp), err, tc.want)
		}
	}
}

func mustParse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(yaml), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return c
}
