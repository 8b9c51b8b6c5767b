package filter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
)

// reasonBreakerOpen: the store was not called because its circuit breaker is open; the failure
// policy applied at once.
const reasonBreakerOpen Reason = "breaker_open"

// errBreakerOpen is the store error of a decision taken while the breaker is open.
var errBreakerOpen = errors.New("filter: store circuit breaker open")

// Breaker states, as the value of llm_ratelimit_store_breaker_state.
const (
	breakerClosed   int32 = 0 // the store is called
	breakerOpen     int32 = 1 // the store is not called: the failure policy applies at once
	breakerHalfOpen int32 = 2 // one probe request calls the store; the others still fail fast
)

func breakerStateName(s int32) string {
	switch s {
	case breakerOpen:
		return "open"
	case breakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// BreakerOptions configures a Breaker.
type BreakerOptions struct {
	// Failures is how many store failures in a row open the breaker. Default 3: one lost packet
	// does not switch every request to the failure policy, and an outage opens it within the
	// first few requests.
	Failures int
	// OpenFor is how long the breaker stays open before one request probes the store again.
	// It bounds the recovery time after the store returns. Default 500ms.
	OpenFor time.Duration
	// Logger receives one line per transition (warn on opening, info on closing). Default: none.
	Logger *zap.Logger
	// Registerer, when set, receives llm_ratelimit_store_breaker_state and
	// llm_ratelimit_store_breaker_transitions_total.
	Registerer prometheus.Registerer
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Breaker is the circuit breaker in front of the shared store. While the store fails, it keeps
// the filter from paying a store timeout on every request: after Failures failures in a row it
// opens, every decision applies the failure policy without calling the store, and every OpenFor
// one request probes the store (or a successful health ping lets the next request probe at once);
// the first success closes it. It is safe for concurrent use; the closed state costs one atomic
// load per request.
type Breaker struct {
	opts  BreakerOptions
	state atomic.Int32
	fails atomic.Int32

	mu       sync.Mutex
	until    time.Time // end of the open period
	probing  bool      // a probe is in flight
	openedAt time.Time // start of the outage, for the closing log line
	skipped  int64     // decisions that failed fast during this outage

	stateGauge  prometheus.Gauge
	transitions *prometheus.CounterVec
}

// NewBreaker returns a closed Breaker.
func NewBreaker(opts BreakerOptions) *Breaker {
	if opts.Failures <= 0 {
		opts.Failures = 3
	}
	if opts.OpenFor <= 0 {
		opts.OpenFor = 500 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	b := &Breaker{opts: opts}
	if opts.Registerer != nil {
		b.stateGauge = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llm_ratelimit_store_breaker_state",
			Help: "Circuit breaker in front of the shared store: 0 closed, 1 open (failure policy applied without calling the store), 2 half-open (one probe in flight).",
		})
		b.transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_store_breaker_transitions_total",
			Help: "Circuit breaker transitions by new state (open, half_open, closed).",
		}, []string{"to"})
		opts.Registerer.MustRegister(b.stateGauge, b.transitions)
	}
	return b
}

// State returns "closed", "open" or "half_open".
func (b *Breaker) State() string { return breakerStateName(b.state.Load()) }

// allow reports whether a decision may call the store, and whether that call is the probe.
func (b *Breaker) allow() (ok, probe bool) {
	if b.state.Load() == breakerClosed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state.Load() {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if !b.probing && !b.opts.Now().Before(b.until) {
			b.probing = true
			b.setState(breakerHalfOpen)
			return true, true
		}
	}
	b.skipped++
	return false, false
}

// done records the outcome of a store call that allow admitted.
func (b *Breaker) done(ctx context.Context, probe bool, err error) {
	if err == nil {
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
		if probe || b.state.Load() != breakerClosed {
			b.close("probe succeeded")
		}
		return
	}
	if !countsAsStoreFailure(ctx, err) {
		if probe {
			b.mu.Lock()
			b.probing = false
			b.setState(breakerOpen) // until has passed: the next request probes
			b.mu.Unlock()
		}
		return
	}
	n := b.fails.Add(1)
	if !probe && int(n) < b.opts.Failures {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.opts.Now()
	b.until = now.Add(b.opts.OpenFor)
	b.probing = false
	switch b.state.Load() {
	case breakerClosed:
		b.openedAt, b.skipped = now, 0
		b.setState(breakerOpen)
		b.opts.Logger.Warn("store circuit breaker open: the failure policy applies without calling the store",
			zap.String("reason", string(storeReason(ctx, err))), zap.Int32("failures", n),
			zap.Duration("probe_every", b.opts.OpenFor), zap.Error(err))
	case breakerHalfOpen:
		// A failed probe: one debug line per probe, not a warning per interval.
		b.setState(breakerOpen)
		b.opts.Logger.Debug("store probe failed", zap.String("reason", string(storeReason(ctx, err))), zap.Error(err))
	}
}

// Healthy tells the breaker that a health ping of the store succeeded: an open breaker lets the
// next request probe at once rather than at the end of its open period.
func (b *Breaker) Healthy() {
	if b.state.Load() != breakerOpen {
		return
	}
	b.mu.Lock()
	if b.state.Load() == breakerOpen {
		b.until = time.Time{}
	}
	b.mu.Unlock()
}

func (b *Breaker) close(why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() == breakerClosed {
		return
	}
	b.probing = false
	b.setState(breakerClosed)
	b.opts.Logger.Info("store circuit breaker closed: the store decides again", zap.String("why", why),
		zap.Duration("outage", b.opts.Now().Sub(b.openedAt)), zap.Int64("failed_fast", b.skipped))
}

// setState changes the state; b.mu is held.
func (b *Breaker) setState(s int32) {
	if b.state.Swap(s) == s {
		return
	}
	if b.stateGauge != nil {
		b.stateGauge.Set(float64(s))
		b.transitions.WithLabelValues(breakerStateName(s)).Inc()
	}
}

// countsAsStoreFailure tells store failures from errors that say nothing about the store's
// health: an invalid request (a hostile one must never open the breaker for everyone) and a
// caller that gave up first.
func countsAsStoreFailure(ctx context.Context, err error) bool {
	if errors.Is(err, bucket.ErrInvalid) {
		return false
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return false
	}
	return true
}
