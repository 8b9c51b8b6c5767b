package filter

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
)

// flaky is a Limiter that fails while down is set, and counts its calls.
type flaky struct {
	inner Limiter
	down  atomic.Bool
	calls atomic.Int64
	err   error
}

func (s *flaky) Take(ctx context.Context, req *bucket.Request) (bucket.Result, error) {
	s.calls.Add(1)
	if s.down.Load() {
		return bucket.Result{}, s.err
	}
	return s.inner.Take(ctx, req)
}

func (s *flaky) Adjust(ctx context.Context, tag string, adj []bucket.Adjustment) error {
	return s.inner.Adjust(ctx, tag, adj)
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	store := &flaky{err: errDown}
	var e *env // the breaker's clock is the env's
	br := NewBreaker(store, BreakerOptions{Failures: 3, OpenFor: time.Second, Logger: zap.New(core), Registerer: reg,
		Now: func() time.Time { return e.clock.Now() }})
	e = newEnv(t, "failure: {mode: deny}\nrules: [{name: r, tokens: {limit: 1000000, period: minute}}]\n", Options{Limiter: br})
	store.inner = e.store
	ask := func() string { return decision(e.check(t, "chat")) }

	if got := ask(); got != decisionAllowed {
		t.Fatalf("store up: %s", got)
	}
	store.down.Store(true)
	for i := range 100 {
		if got := ask(); got != decisionUnavailable {
			t.Fatalf("request %d during the outage: %s", i, got)
		}
	}
	// Three failures open the breaker: the other 97 decisions never called the store.
	if got := store.calls.Load(); got != 1+3 {
		t.Errorf("store called %d times, want 4", got)
	}
	if br.State() != BreakerOpen || metricValue(t, br.stateGauge) != 1 {
		t.Errorf("state %s", br.State())
	}
	// Every OpenFor, one probe: still down, so it opens again.
	e.clock.Add(time.Second)
	for range 10 {
		ask()
	}
	if got := store.calls.Load(); got != 5 {
		t.Errorf("store called %d times after one interval, want 5 (one probe)", got)
	}
	// A health ping lets the next request probe at once; the store is back: closed.
	store.down.Store(false)
	br.Healthy()
	if got := ask(); got != decisionAllowed {
		t.Errorf("after recovery: %s", got)
	}
	if br.State() != BreakerClosed {
		t.Errorf("state %s after a successful probe", br.State())
	}
	// One line per transition, none per request.
	if n := logs.FilterMessageSnippet("breaker open").Len(); n != 1 {
		t.Errorf("%d 'open' lines, want 1", n)
	}
	if n := logs.FilterMessageSnippet("breaker closed").Len(); n != 1 {
		t.Errorf("%d 'closed' lines, want 1", n)
	}
	if n := logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 1 {
		t.Errorf("%d warn lines, want 1: %v", n, logs.All())
	}
	if got := metricValue(t, br.transitions.WithLabelValues("open")); got != 2 {
		t.Errorf("%v transitions to open, want 2", got)
	}
	if got := metricValue(t, br.transitions.WithLabelValues("closed")); got != 1 {
		t.Errorf("%v transitions to closed, want 1", got)
	}
}

// Errors that say nothing about the store (an invalid request, a caller that gave up) never
// open the breaker: a hostile client must not switch everyone to the failure policy.
func TestBreakerIgnoresNonStoreErrors(t *testing.T) {
	t.Parallel()
	br := NewBreaker(nil, BreakerOptions{Failures: 1})
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		ctx context.Context
		err error
	}{
		{context.Background(), fmt.Errorf("x: %w", bucket.ErrInvalid)},
		{canceled, context.Canceled},
	} {
		ok, probe := br.allow()
		br.done(tc.ctx, probe, tc.err)
		if !ok || br.State() != BreakerClosed {
			t.Errorf("%v: state %s", tc.err, br.State())
		}
	}
	br.done(context.Background(), false, errors.New("connection refused"))
	if br.State() != BreakerOpen {
		t.Errorf("a store error left the breaker %s", br.State())
	}
}

// Concurrent decisions during an outage: exactly one probe at a time.
func TestBreakerOneProbe(t *testing.T) {
	t.Parallel()
	now := time.Unix(0, 0)
	br := NewBreaker(nil, BreakerOptions{Failures: 1, OpenFor: time.Second, Now: func() time.Time { return now }})
	br.done(context.Background(), false, errDown)
	now = now.Add(time.Second)
	probes := 0
	for range 50 {
		if ok, probe := br.allow(); ok {
			if !probe {
				t.Fatal("admitted without being the probe")
			}
			probes++
		}
	}
	if probes != 1 {
		t.Errorf("%d probes, want 1", probes)
	}
}

// metricValue reads a gauge's or counter's value.
func metricValue(t *testing.T, m prometheus.Metric) float64 {
	t.Helper()
	var out dto.Metric
	if err := m.Write(&out); err != nil {
		t.Fatal(err)
	}
	if out.Gauge != nil {
		return out.Gauge.GetValue()
	}
	return out.Counter.GetValue()
}
