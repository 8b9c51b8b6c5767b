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

// errBreakerOpen is the error of a Take that the breaker answered without calling the store.
var errBreakerOpen = errors.New("filter: store circuit breaker open")

// outageError is a store failure returned while the breaker is open or probing (this failure
// may have opened it): the breaker logged the outage, so the decision need not warn again.
// Its message is the store's.
type outageError struct{ err error }

func (e *outageError) Error() string { return e.err.Error() }
func (e *outageError) Unwrap() error { return e.err }

// BreakerState is the state of a Breaker, as the value of llm_ratelimit_store_breaker_state.
type BreakerState int32

const (
	BreakerClosed   BreakerState = 0 // the store is called
	BreakerOpen     BreakerState = 1 // the store is not called: the failure policy applies at once
	BreakerHalfOpen BreakerState = 2 // one probe request calls the store; the others still fail fast
)

// String is the state's name in logs and metric labels: closed, open or half_open.
func (s BreakerState) String() string {
	switch s {
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
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

// Breaker is the circuit breaker in front of the shared store: a Limiter that calls the store's.
// While the store fails, it keeps decisions from paying a store timeout each: after Failures
// failures of Take in a row it opens, and Take fails at once (the filter applies the failure
// policy) without calling the store; every OpenFor one Take probes the store (or a successful
// health ping lets the next one probe at once); the first success closes it. Adjust always calls
// the store: refunds and charges are not decisions. It is safe for concurrent use; the closed
// state costs one atomic load per Take.
type Breaker struct {
	store Limiter
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

var (
	_ Limiter   = (*Breaker)(nil)
	_ Inspector = (*Breaker)(nil)
)

// NewBreaker returns a closed Breaker in front of store.
func NewBreaker(store Limiter, opts BreakerOptions) *Breaker {
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
	b := &Breaker{store: store, opts: opts}
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

// State returns the breaker's state.
func (b *Breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// Take debits req on the store, unless the breaker is open: then it returns errBreakerOpen at
// once. A store failure while the breaker is (now) open or probing is an *outageError.
func (b *Breaker) Take(ctx context.Context, req *bucket.Request) (bucket.Result, error) {
	ok, probe := b.allow()
	if !ok {
		return bucket.Result{}, errBreakerOpen
	}
	res, err := b.store.Take(ctx, req)
	b.done(ctx, probe, err)
	if err != nil && b.State() != BreakerClosed {
		err = &outageError{err}
	}
	return res, err
}

// Adjust calls the store's Adjust, whatever the state.
func (b *Breaker) Adjust(ctx context.Context, tag string, adj []bucket.Adjustment) error {
	return b.store.Adjust(ctx, tag, adj)
}

// Peek calls the store's Peek whatever the state (an operator's read is no decision, and its
// failure counts for nothing); ErrNoInspector when the store has none.
func (b *Breaker) Peek(ctx context.Context, tag string, specs []bucket.Spec) ([]bucket.Snapshot, error) {
	in, ok := b.store.(Inspector)
	if !ok {
		return nil, ErrNoInspector
	}
	return in.Peek(ctx, tag, specs)
}

// Reset calls the store's Reset whatever the state; ErrNoInspector when the store has none.
func (b *Breaker) Reset(ctx context.Context, tag string, specs []bucket.Spec) error {
	in, ok := b.store.(Inspector)
	if !ok {
		return ErrNoInspector
	}
	return in.Reset(ctx, tag, specs)
}

// allow reports whether a decision may call the store, and whether that call is the probe.
func (b *Breaker) allow() (ok, probe bool) {
	if b.State() == BreakerClosed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.State() {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if !b.probing && !b.opts.Now().Before(b.until) {
			b.probing = true
			b.setState(BreakerHalfOpen)
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
		if probe || b.State() != BreakerClosed {
			b.close("probe succeeded")
		}
		return
	}
	if !countsAsStoreFailure(ctx, err) {
		if probe {
			b.mu.Lock()
			b.probing = false
			b.setState(BreakerOpen) // until has passed: the next request probes
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
	switch b.State() {
	case BreakerClosed:
		b.openedAt, b.skipped = now, 0
		b.setState(BreakerOpen)
		b.opts.Logger.Warn("store circuit breaker open: the failure policy applies without calling the store",
			zap.String("reason", string(storeReason(ctx, err))), zap.Int32("failures", n),
			zap.Duration("probe_every", b.opts.OpenFor), zap.Error(err))
	case BreakerHalfOpen:
		// A failed probe: one debug line per probe, not a warning per interval.
		b.setState(BreakerOpen)
		b.opts.Logger.Debug("store probe failed", zap.String("reason", string(storeReason(ctx, err))), zap.Error(err))
	}
}

// Healthy tells the breaker that a health ping of the store succeeded: an open breaker lets the
// next request probe at once rather than at the end of its open period.
func (b *Breaker) Healthy() {
	if b.State() != BreakerOpen {
		return
	}
	b.mu.Lock()
	if b.State() == BreakerOpen {
		b.until = time.Time{}
	}
	b.mu.Unlock()
}

func (b *Breaker) close(why string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.State() == BreakerClosed {
		return
	}
	b.probing = false
	b.setState(BreakerClosed)
	b.opts.Logger.Info("store circuit breaker closed: the store decides again", zap.String("why", why),
		zap.Duration("outage", b.opts.Now().Sub(b.openedAt)), zap.Int64("failed_fast", b.skipped))
}

// setState changes the state; b.mu is held.
func (b *Breaker) setState(s BreakerState) {
	if BreakerState(b.state.Swap(int32(s))) == s {
		return
	}
	if b.stateGauge != nil {
		b.stateGauge.Set(float64(s))
		b.transitions.WithLabelValues(s.String()).Inc()
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
