package main

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// Mode is how the mock enforces its per-minute limits.
type Mode string

const (
	// TokenBucket has capacity = the per-period limit and refills continuously at limit/period:
	// how OpenAI and Anthropic describe their own limiters.
	TokenBucket Mode = "token_bucket"
	// RollingWindow admits at most the limit in any window of one period (stricter: no refill
	// until the oldest admission leaves the window).
	RollingWindow Mode = "rolling_window"
)

// ParseMode reads a mode name.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case TokenBucket, RollingWindow:
		return Mode(s), nil
	}
	return "", fmt.Errorf("mode %q is not token_bucket or rolling_window", s)
}

// Limits are one provider's limits per model: tokens and requests per period (0 = unlimited).
type Limits struct {
	Tokens   int64
	Requests int64
}

// meterState is a meter's state for the provider's rate-limit headers.
type meterState struct {
	Limit     int64
	Remaining int64
	Reset     time.Duration // until the meter is full again
}

// meter is one budget dimension (tokens or requests) of one (provider, model).
type meter interface {
	// wait returns how long until cost fits (0: now); ok is false when it can never fit.
	wait(now time.Time, cost int64) (d time.Duration, ok bool)
	debit(now time.Time, cost int64)
	state(now time.Time) meterState
}

// bucket is a continuous-refill token bucket of capacity limit, refilled at limit per period.
type bucket struct {
	limit  int64
	period time.Duration
	level  float64
	last   time.Time
}

func newBucket(limit int64, period time.Duration, now time.Time) *bucket {
	return &bucket{limit: limit, period: period, level: float64(limit), last: now}
}

func (b *bucket) rate() float64 { return float64(b.limit) / b.period.Seconds() } // per second

func (b *bucket) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.level = math.Min(float64(b.limit), b.level+dt*b.rate())
		b.last = now
	}
}

func (b *bucket) wait(now time.Time, cost int64) (time.Duration, bool) {
	if cost > b.limit {
		return 0, false
	}
	b.refill(now)
	if b.level >= float64(cost) {
		return 0, true
	}
	return time.Duration((float64(cost) - b.level) / b.rate() * float64(time.Second)), true
}

func (b *bucket) debit(now time.Time, cost int64) {
	b.refill(now)
	b.level -= float64(cost)
}

func (b *bucket) state(now time.Time) meterState {
	b.refill(now)
	return meterState{Limit: b.limit, Remaining: int64(math.Floor(b.level)),
		Reset: time.Duration((float64(b.limit) - b.level) / b.rate() * float64(time.Second))}
}

// window admits at most limit in any period: it keeps every admission of the last period.
type window struct {
	limit   int64
	period  time.Duration
	entries []admission // oldest first
	sum     int64
}

type admission struct {
	t    time.Time
	cost int64
}

func (w *window) prune(now time.Time) {
	i := 0
	for i < len(w.entries) && !w.entries[i].t.Add(w.period).After(now) {
		w.sum -= w.entries[i].cost
		i++
	}
	w.entries = w.entries[i:]
}

func (w *window) wait(now time.Time, cost int64) (time.Duration, bool) {
	if cost > w.limit {
		return 0, false
	}
	w.prune(now)
	need := w.sum + cost - w.limit
	for _, e := range w.entries {
		if need <= 0 {
			break
		}
		need -= e.cost
		if need <= 0 {
			return e.t.Add(w.period).Sub(now), true
		}
	}
	return 0, true
}

func (w *window) debit(now time.Time, cost int64) {
	w.prune(now)
	// Admissions are timed at arrival, so they may be debited slightly out of order: keep the
	// entries sorted.
	i := sort.Search(len(w.entries), func(i int) bool { return w.entries[i].t.After(now) })
	w.entries = append(w.entries, admission{})
	copy(w.entries[i+1:], w.entries[i:])
	w.entries[i] = admission{now, cost}
	w.sum += cost
}

func (w *window) state(now time.Time) meterState {
	w.prune(now)
	s := meterState{Limit: w.limit, Remaining: w.limit - w.sum}
	if n := len(w.entries); n > 0 {
		s.Reset = w.entries[n-1].t.Add(w.period).Sub(now)
	}
	return s
}

// Verdict is the outcome of one admission.
type Verdict struct {
	Admitted bool
	// TooLarge is true when the request can never fit (cost above the limit).
	TooLarge bool
	// Wait is how long until the request would fit (0 when admitted or too large).
	Wait time.Duration
	// Which dimension refused: "tokens" or "requests" ("" when admitted).
	Which            string
	Tokens, Requests meterState
	HasTokens        bool
	HasRequests      bool
}

// Enforcer holds the mock's budgets: one per (provider, model), as providers keep them. It is safe
// for concurrent use.
type Enforcer struct {
	mode   Mode
	period time.Duration
	limits map[string]Limits // per provider
	now    func() time.Time

	mu     sync.Mutex
	meters map[string]*[2]meter // key provider + "\x00" + model: tokens, requests
}

// NewEnforcer returns an Enforcer; now is its clock.
func NewEnforcer(mode Mode, period time.Duration, limits map[string]Limits, now func() time.Time) *Enforcer {
	return &Enforcer{mode: mode, period: period, limits: limits, now: now, meters: map[string]*[2]meter{}}
}

func (e *Enforcer) newMeter(limit int64, now time.Time) meter {
	if limit <= 0 {
		return nil
	}
	if e.mode == RollingWindow {
		return &window{limit: limit, period: e.period}
	}
	return newBucket(limit, e.period, now)
}

// Admit checks a request of cost tokens against its (provider, model) budget and debits it when
// every dimension can pay now.
func (e *Enforcer) Admit(provider, model string, cost int64) Verdict {
	return e.AdmitAt(provider, model, cost, e.now())
}

// AdmitAt is Admit for a request that arrived at now: a provider's limiter counts a request when
// it arrives, not when the mock has finished reading and pricing its body (which takes seconds
// for megabytes of text on a busy machine).
func (e *Enforcer) AdmitAt(provider, model string, cost int64, now time.Time) Verdict {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := provider + "\x00" + model
	m, ok := e.meters[key]
	if !ok {
		l := e.limits[provider]
		m = &[2]meter{e.newMeter(l.Tokens, now), e.newMeter(l.Requests, now)}
		e.meters[key] = m
	}
	var v Verdict
	costs := [2]int64{cost, 1}
	names := [2]string{"tokens", "requests"}
	for i, mt := range m {
		if mt == nil {
			continue
		}
		d, fits := mt.wait(now, costs[i])
		switch {
		case !fits:
			v.TooLarge, v.Which = true, names[i]
		case d > v.Wait:
			v.Wait = d
			if !v.TooLarge {
				v.Which = names[i]
			}
		}
	}
	v.Admitted = !v.TooLarge && v.Wait == 0
	if v.TooLarge {
		v.Wait = 0
	}
	if v.Admitted {
		v.Which = ""
		for i, mt := range m {
			if mt != nil {
				mt.debit(now, costs[i])
			}
		}
	}
	if m[0] != nil {
		v.Tokens, v.HasTokens = m[0].state(now), true
	}
	if m[1] != nil {
		v.Requests, v.HasRequests = m[1].state(now), true
	}
	return v
}
