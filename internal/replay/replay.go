package replay

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reconcile"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// Options configures a replay.
type Options struct {
	// Config is the limits the traffic is replayed against. Required.
	Config *config.Config
	// Settlement is how responses settle (server.SettlementOf of Config). Default
	// reconcile.DefaultSettlement.
	Settlement *reconcile.Settlement
	// Provider, when set, simulates the provider's own limits on what the limits let through.
	Provider *ProviderLimits
	// Speed scales the traffic: recorded times are compressed by it (2: the same requests in
	// half the time). Default 1.
	Speed float64
	// Tenants, when set, selects the decisions of these tenants (and their settlements).
	Tenants map[string]bool
	// Window is how far out of time order recorded lines may be (a held decision is written
	// once its hold ends, stamped with its arrival): events are taken in time order within it.
	// Default 2s.
	Window time.Duration
	// Each, when set, is called with every replayed decision: as recorded, and as replayed.
	Each func(recorded, replayed *decisionlog.Decision)
}

// Engine replays events given in recorded order. It is not safe for concurrent use.
type Engine struct {
	opts     Options
	filter   *filter.Filter
	rec      *reconcile.Server
	est      *recorded
	got      decisionlog.Decision
	clock    time.Time
	enc      encoder
	leases   uint64
	pending  map[string]pending // reservation id -> the replay's reservation
	models   map[modelKey]*usageModel
	modelled uint64
	queue    events
	free     *queued
	strs     decisionlog.Strings
	seq      uint64
	latest   time.Time
	t0       time.Time
	started  bool
	report   *Report
	prov     *providerSim
}

// New returns an Engine for opts.
func New(opts Options) (*Engine, error) {
	if opts.Config == nil {
		return nil, errors.New("replay: a configuration is required")
	}
	if opts.Speed == 0 {
		opts.Speed = 1
	}
	if opts.Speed < 0 {
		return nil, fmt.Errorf("replay: speed %v must be positive", opts.Speed)
	}
	if opts.Window <= 0 {
		opts.Window = 2 * time.Second
	}
	e := &Engine{opts: opts, est: &recorded{}, pending: map[string]pending{},
		models: map[modelKey]*usageModel{}, report: newReport(opts.Config)}
	now := func() time.Time { return e.clock }
	store := bucket.NewMemory(bucket.MemoryOptions{Now: now})
	var err error
	e.filter, err = filter.New(&filter.Policy{Config: replayConfig(opts.Config), Estimator: e.est}, filter.Options{
		Limiter: store,
		Now:     now,
		Jitter:  func() float64 { return 0 },
		LeaseID: func() string {
			e.leases++
			return "r" + strconv.FormatUint(e.leases, 16)
		},
		Sleep:        func(context.Context, time.Duration) error { return nil },
		Recorder:     (*collector)(e),
		PricingSlots: -1,
		Bare:         true,
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	e.rec, err = reconcile.New(reconcile.Options{Store: store, Settlement: opts.Settlement, Now: now})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if opts.Provider != nil {
		e.prov = newProviderSim(opts.Provider, now)
	}
	return e, nil
}

// replayConfig is c reading the tenant and the class from the replay's headers: the recorded
// tenant is the one the rules matched, whatever identified it.
func replayConfig(c *config.Config) *config.Config {
	cp := *c
	cp.TenantSource = config.TenantFromHeader
	cp.TenantHeader = tenantHeader
	cp.File.Tenant.Header = tenantHeader
	cp.DenyUnidentified = false
	cp.PrioritySource = config.PriorityFromHeader
	cp.File.Priority.Header = priorityHeader
	cp.Feedback = false
	return &cp
}

// recorded is the Estimator of a replay: the recorded price of the decision being replayed.
type recorded struct{ next tokens.Estimate }

func (r *recorded) Estimate(*tokens.Input) tokens.Estimate { return r.next }

// collector receives the replayed decision from the filter.
type collector Engine

func (c *collector) Decision(d *decisionlog.Decision) { c.got = *d }

// Add takes the next recorded event, in the order of the log.
func (e *Engine) Add(ev *decisionlog.Event) {
	t := ev.Decision.Time
	if ev.IsSettlement {
		t = ev.Settlement.Time
	}
	if !e.started {
		e.t0, e.started = t, true
	}
	if e.opts.Speed != 1 {
		t = e.t0.Add(time.Duration(float64(t.Sub(e.t0)) / e.opts.Speed))
	}
	if ev.IsSettlement {
		ev.Settlement.Time = t
	} else {
		ev.Decision.Time = t
	}
	e.enqueue(ev, t)
	if t.After(e.latest) {
		e.latest = t
	}
	for e.queue.len() > 0 && e.queue.first().at.Before(e.latest.Add(-e.opts.Window)) {
		e.pop()
	}
}

// enqueue queues ev at t, after the events queued before it at t.
func (e *Engine) enqueue(ev *decisionlog.Event, t time.Time) {
	e.seq++
	q := e.free
	if q != nil {
		e.free = q.next
	} else {
		q = &queued{}
	}
	q.at, q.seq, q.ev, q.next = t, e.seq, *ev, nil
	e.queue.push(q)
}

// pop replays the earliest queued event and recycles its slot.
func (e *Engine) pop() {
	q := e.queue.pop()
	e.apply(&q.ev, q.at)
	q.next, e.free = e.free, q
}

// Finish replays what is still queued and returns the report.
func (e *Engine) Finish() *Report {
	for e.queue.len() > 0 {
		e.pop()
	}
	e.report.finish()
	return e.report
}

// skipped are the decisions made before any rule was looked at (a bad route or identity, an
// unknown API refused, no identity): they say nothing of the limits.
func skipped(decision string) bool {
	switch decision {
	case "bad_route", "bad_identity", "unknown_denied", "unidentified":
		return true
	}
	return false
}

func (e *Engine) apply(ev *decisionlog.Event, at time.Time) {
	if at.After(e.clock) {
		e.clock = at
	}
	if ev.IsSettlement {
		e.settle(&ev.Settlement)
		return
	}
	d := &ev.Decision
	if e.opts.Tenants != nil && !e.opts.Tenants[d.Tenant] {
		return
	}
	if skipped(d.Decision) {
		e.report.Skipped++
		return
	}
	e.est.next = tokens.Estimate{Provider: provider.Parse(d.Provider), API: provider.ParseAPI(d.API), Model: d.Model,
		PromptTokens: d.Prompt, OutputTokens: d.Output, OutputUnset: d.OutputUnset, Context: d.Context,
		Chars: d.Chars, CacheRead: d.CacheRead, Exact: d.Exact, Reason: tokens.Reason(d.Reason)}
	e.got = decisionlog.Decision{}
	a, err := e.filter.CheckBytes(context.Background(), e.enc.encode(d.Path, d.Tenant, d.Priority))
	if err != nil {
		// Not reached: the replay's requests are well formed and the memory store never fails.
		e.report.Errors++
		return
	}
	got := &e.got
	got.Time = at
	admitted := got.Outcome != decisionlog.Denied
	var provider429 bool
	if admitted {
		id := ""
		if r := a.Reservation(); r != nil {
			switch {
			case d.ReservationID != "":
				id = d.ReservationID
				e.pending[id] = pending{r: r, at: at, prompt: d.Prompt, output: d.Output}
			case d.Outcome == decisionlog.Denied:
				id = e.model(r, d, at)
			}
		}
		if e.prov != nil {
			provider429 = !e.prov.admit(d, id)
		}
	}
	e.report.add(d, got, provider429)
	if e.opts.Each != nil {
		e.opts.Each(d, got)
	}
}

func (e *Engine) settle(s *decisionlog.Settlement) {
	p, ok := e.pending[s.ReservationID]
	if !ok {
		return
	}
	delete(e.pending, s.ReservationID)
	r := p.r
	if p.modelled {
		e.report.Modelled++
	} else {
		e.report.Settled++
		if s.Found && s.Status > 0 && s.Status < 400 && !s.Local {
			e.learn(r, &p, s)
		}
	}
	if e.prov != nil {
		e.prov.settle(s.ReservationID, s)
	}
	e.rec.Settle(r, reconcile.Response{Status: s.Status, Local: s.Local, Found: s.Found,
		Usage: provider.Usage{Input: s.Input, Output: s.Output, CacheRead: s.CacheRead, CacheWrite: s.CacheWrite, Total: s.Total}})
}

// pending is a replayed reservation waiting for its settlement: when it was admitted and what it
// was priced at; modelled: its settlement is the replay's (the live limits refused it).
type pending struct {
	r              *reservation.Reservation
	at             time.Time
	prompt, output int64
	modelled       bool
}

type modelKey struct{ provider, model string }

// usageModel is what the recorded settlements of one provider and model said: how many, and
// the sums of their latencies and of their input and output as fractions of what was priced.
type usageModel struct {
	n             int64
	latency       time.Duration
	input, output float64
}

// learn adds a recorded settlement of a replayed reservation to its model's usage.
func (e *Engine) learn(r *reservation.Reservation, p *pending, s *decisionlog.Settlement) {
	k := modelKey{r.Tag, r.Model}
	m := e.models[k]
	if m == nil {
		m = &usageModel{}
		e.models[k] = m
	}
	m.n++
	m.latency += max(s.Time.Sub(p.at), 0)
	if p.prompt > 0 {
		m.input += float64(s.Input) / float64(p.prompt)
	}
	if p.output > 0 {
		m.output += float64(s.Output) / float64(p.output)
	}
}

// model settles a reservation the live limits refused, which therefore has no recorded usage: as
// its provider and model's recorded settlements did on average, after their mean latency (input
// and output the mean fractions of what was priced). Before any such settlement is recorded,
// the reservation stays as charged. It returns the id of the modelled settlement ("" for none).
func (e *Engine) model(r *reservation.Reservation, d *decisionlog.Decision, at time.Time) string {
	m := e.models[modelKey{r.Tag, r.Model}]
	if m == nil {
		return ""
	}
	n := float64(m.n)
	e.modelled++
	id := "\x00m" + strconv.FormatUint(e.modelled, 16)
	e.pending[id] = pending{r: r, at: at, modelled: true}
	in := int64(math.Round(float64(d.Prompt) * m.input / n))
	out := int64(math.Round(float64(d.Output) * m.output / n))
	when := at.Add(m.latency / time.Duration(m.n))
	e.enqueue(&decisionlog.Event{IsSettlement: true, Settlement: decisionlog.Settlement{Time: when, ReservationID: id,
		Provider: r.Tag, Model: r.Model, Status: 200, Found: true, Input: in, Output: out, Total: in + out}}, when)
	return id
}

// queued is an event waiting for its turn; next links the free ones.
type queued struct {
	at   time.Time
	seq  uint64
	ev   decisionlog.Event
	next *queued
}

// events are the queued events in time order (recorded order breaking ties): a log is nearly
// sorted, so an event is appended, or moved back past the few later ones before it.
type events struct {
	q    []*queued
	head int
}

func (q *events) len() int       { return len(q.q) - q.head }
func (q *events) first() *queued { return q.q[q.head] }
func before(a, b *queued) bool {
	if !a.at.Equal(b.at) {
		return a.at.Before(b.at)
	}
	return a.seq < b.seq
}

func (q *events) push(x *queued) {
	if q.head > 0 && q.head >= len(q.q)/2 {
		n := copy(q.q, q.q[q.head:])
		clear(q.q[n:])
		q.q, q.head = q.q[:n], 0
	}
	q.q = append(q.q, x)
	for i := len(q.q) - 1; i > q.head && before(x, q.q[i-1]); i-- {
		q.q[i], q.q[i-1] = q.q[i-1], x
	}
}

func (q *events) pop() *queued {
	x := q.q[q.head]
	q.q[q.head] = nil
	q.head++
	return x
}

// Read feeds every line of r to e, in order. A line that does not parse is an error naming its
// number.
func (e *Engine) Read(r io.Reader, name string) error {
	return e.Merge([]io.Reader{r}, []string{name})
}

// Merge feeds the lines of several logs to e, merged by time: the logs of several replicas
// (each read in its own order, the earliest head line first, the first log breaking ties). A
// line that does not parse is an error naming its log and number.
func (e *Engine) Merge(rs []io.Reader, names []string) error {
	type head struct {
		sc   *bufio.Scanner
		ev   decisionlog.Event
		at   time.Time
		n    int
		live bool
	}
	heads := make([]*head, len(rs))
	next := func(i int) error {
		h := heads[i]
		for h.sc.Scan() {
			h.n++
			line := h.sc.Bytes()
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if err := e.strs.Parse(line, &h.ev); err != nil {
				return fmt.Errorf("replay: %s:%d: %w", names[i], h.n, err)
			}
			h.at = h.ev.Decision.Time
			if h.ev.IsSettlement {
				h.at = h.ev.Settlement.Time
			}
			return nil
		}
		h.live = false
		if err := h.sc.Err(); err != nil {
			return fmt.Errorf("replay: %s: %w", names[i], err)
		}
		return nil
	}
	for i, r := range rs {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 256<<10), 1<<20)
		heads[i] = &head{sc: sc, live: true}
		if err := next(i); err != nil {
			return err
		}
	}
	for {
		best := -1
		for i, h := range heads {
			if h.live && (best < 0 || h.at.Before(heads[best].at)) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		e.Add(&heads[best].ev)
		if err := next(best); err != nil {
			return err
		}
	}
}
