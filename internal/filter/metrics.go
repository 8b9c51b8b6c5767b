package filter

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// Reason is a stable code for a failure class: a log field and a metric label.
type Reason string

const (
	reasonNotHTTP      Reason = "not_http"      // a CheckRequest without HTTP attributes
	reasonMalformed    Reason = "malformed"     // a CheckRequest that is not valid protobuf
	reasonBadRoute     Reason = "bad_route"     // invalid context_extensions
	reasonStoreTimeout Reason = "store_timeout" // the store did not answer in time
	reasonStoreError   Reason = "store_error"   // the store answered with an error or is unreachable
	reasonHoldCanceled Reason = "hold_canceled" // Envoy gave up on a held request
	reasonRefundFailed Reason = "refund_failed" // a reservation could not be given back
	// reasonDuplicateIdentity is a tenant or priority header given more than once (Envoy joins
	// them with commas): refused with a 400, never joined into a tenant of its own.
	reasonDuplicateIdentity Reason = "duplicate_identity"
	// reasonUnidentified is a request without its identity (a JWT claim, an API key) while
	// tenant.missing is deny.
	reasonUnidentified Reason = "unidentified"
	// reasonUnpriced is a request under a cost limit whose model has no price: refused with a
	// 403, never counted as free.
	reasonUnpriced Reason = "unpriced"
)

func storeReason(ctx context.Context, err error) Reason {
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return reasonStoreTimeout
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return reasonStoreTimeout
	}
	return reasonStoreError
}

// Metrics are the decision metrics. A nil *Metrics records nothing. Safe for concurrent use.
type Metrics struct {
	decisions     *prometheus.CounterVec
	ruleDecisions *prometheus.CounterVec
	shadow        *prometheus.CounterVec
	tokens        *prometheus.CounterVec
	approximate   *prometheus.CounterVec
	pricing       prometheus.Histogram
	check         prometheus.Histogram
	storeLatency  *prometheus.HistogramVec
	errors        *prometheus.CounterVec
	held          prometheus.Gauge
	bounds        *prometheus.CounterVec
	cacheReads    *prometheus.CounterVec
	spend         *prometheus.CounterVec
	spendAlerts   *prometheus.CounterVec
	levels        *levels
	models        labelCap
}

// NewMetrics registers the decision metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	buckets := []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_decisions_total",
			Help: "Decisions by result (allowed, delayed, denied, too_large, shadow, unlimited, fail_open, local, unavailable, bad_route, bad_identity, unknown_denied, unidentified, spent, unpriced), provider and model.",
		}, []string{"decision", "provider", "model"}),
		ruleDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_rule_decisions_total",
			Help: "Decisions per applied rule; limit is the rule's amount that denied (tokens or requests), empty otherwise.",
		}, []string{"rule", "decision", "limit"}),
		shadow: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_shadow_decisions_total",
			Help: "Outcomes of shadow rules (and of every rule in global shadow mode), which are counted, never enforced: allowed, denied, too_large, or error (the store did not answer); limit is the rule's amount that would have refused, empty otherwise.",
		}, []string{"rule", "outcome", "limit"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_tokens_reserved_total",
			Help: "Tokens reserved by admitted requests (prompt plus reserved output), by provider and model.",
		}, []string{"provider", "model"}),
		approximate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_estimates_approximate_total",
			Help: "Requests whose price is an estimate rather than an exact count, by reason.",
		}, []string{"reason"}),
		pricing: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llm_ratelimit_pricing_seconds", Help: "Time to price a request.", Buckets: buckets,
		}),
		check: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "llm_ratelimit_check_seconds", Help: "Time to decide a request, holding included.", Buckets: buckets,
		}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "llm_ratelimit_store_seconds", Help: "Store call latency by operation and result (ok, error).", Buckets: buckets,
		}, []string{"op", "result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_errors_total", Help: "Failures by reason code.",
		}, []string{"reason"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llm_ratelimit_held_requests", Help: "Requests held now for a max_wait reservation.",
		}),
		bounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_pricing_bounded_total",
			Help: "Large bodies priced at their upper bound instead of counted, by cause: busy (no pricing slot free), slow (the count did not finish in time), late (no time left for a count).",
		}, []string{"cause"}),
		cacheReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_cache_read_tokens_expected_total",
			Help: "Prompt-cache reads expected at admission of the requests admitted, in tokens, by provider: not reserved where the provider does not count cache reads (settlement charges any that were written instead).",
		}, []string{"provider"}),
		spend: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_spend_reserved_micros_total",
			Help: "Money reserved in the cost limits of admitted requests (the most each can cost), in micro-units of USD, by rule. The response path's llm_ratelimit_spend_settled_micros_total is what they cost.",
		}, []string{"rule"}),
		spendAlerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llm_ratelimit_spend_threshold_crossed_total",
			Help: "Money budgets (a cost limit's scope: a tenant, a team, a key) whose spend crossed the rule's alert_at part of the budget, once per period and scope, by rule.",
		}, []string{"rule"}),
		levels: newLevels(),
		models: labelCap{max: 100},
	}
	reg.MustRegister(m.decisions, m.ruleDecisions, m.shadow, m.tokens, m.approximate, m.pricing, m.check, m.storeLatency, m.errors, m.held, m.bounds, m.cacheReads,
		m.spend, m.spendAlerts, m.levels)
	return m
}

func (m *Metrics) priced(est *tokens.Estimate, d time.Duration) {
	if m == nil {
		return
	}
	m.pricing.Observe(d.Seconds())
	if !est.Exact {
		m.approximate.WithLabelValues(string(est.Reason)).Inc()
	}
}

func (m *Metrics) decided(est *tokens.Estimate, pl *plan, decision string, d time.Duration) {
	if m == nil {
		return
	}
	provider, model := est.ProviderName(), m.models.get(est.Model)
	m.decisions.WithLabelValues(decision, provider, model).Inc()
	m.check.Observe(d.Seconds())
	if pl == nil {
		return
	}
	if decision == decisionAllowed || decision == decisionDelayed || decision == decisionLocal {
		m.tokens.WithLabelValues(provider, model).Add(float64(est.Cost()))
		if est.CacheRead > 0 {
			m.cacheReads.WithLabelValues(provider).Add(float64(est.CacheRead))
		}
		if pl.price != nil {
			for i := range pl.owners {
				if pl.owners[i].kind == reservation.KindCost && i < len(pl.enforced.Buckets) {
					m.spend.WithLabelValues(pl.owners[i].rule.Name).Add(float64(pl.enforced.Buckets[i].Cost))
				}
			}
		}
	}
	blocking := -1
	if decision == decisionDenied || decision == decisionTooLarge {
		blocking = pl.result.Blocking
	}
	for _, r := range pl.rules {
		limit := ""
		if blocking >= 0 && blocking < len(pl.owners) && pl.owners[blocking].rule == r {
			limit = kindName(pl.owners[blocking].kind)
		}
		m.ruleDecisions.WithLabelValues(r.Name, decision, limit).Inc()
	}
	if !pl.decided.IsZero() && len(pl.result.Buckets) == len(pl.owners) {
		for i := range pl.owners {
			o, st := &pl.owners[i], &pl.result.Buckets[i]
			m.levels.observe(levelKey{rule: o.rule.Name, kind: o.kind, window: o.window}, pl.decided, st.Remaining, st.Limit)
		}
	}
	switch {
	case pl.shadowAll && (decision == decisionShadow || pl.shadowFailed):
		m.shadowed(pl.owners, pl.result.Outcome, pl.result.Blocking, pl.shadowFailed)
	case len(pl.shadowOwners) > 0:
		m.shadowed(pl.shadowOwners, pl.shadowOutcome, pl.shadowBlocking, pl.shadowFailed)
	}
}

// shadowed counts the outcome of a shadow take once for each rule of owners (which lists a
// rule's buckets next to each other); the limit label goes to the rule of the blocking bucket.
func (m *Metrics) shadowed(owners []owner, o bucket.Outcome, blocking int, failed bool) {
	outcome := shadowOutcomeLabel(o)
	if failed {
		outcome = "error"
	}
	refused := !failed && (o == bucket.Denied || o == bucket.Impossible)
	for i := range owners {
		r := owners[i].rule
		if i > 0 && owners[i-1].rule == r {
			continue
		}
		limit := ""
		if refused && blocking >= 0 && blocking < len(owners) && owners[blocking].rule == r {
			limit = kindName(owners[blocking].kind)
		}
		m.shadow.WithLabelValues(r.Name, outcome, limit).Inc()
	}
}

// shadowOutcomeLabel names a shadow outcome as the decision it would have been.
func shadowOutcomeLabel(o bucket.Outcome) string {
	switch o {
	case bucket.Allowed:
		return decisionAllowed
	case bucket.Delayed:
		return decisionDelayed
	case bucket.Denied:
		return decisionDenied
	case bucket.Impossible:
		return decisionTooLarge
	}
	return "unknown"
}

func (m *Metrics) spendCrossed(rule string) {
	if m == nil {
		return
	}
	m.spendAlerts.WithLabelValues(rule).Inc()
}

func (m *Metrics) store(op string, d time.Duration, err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.storeLatency.WithLabelValues(op, result).Observe(d.Seconds())
}

func (m *Metrics) error(r Reason) {
	if m == nil {
		return
	}
	m.errors.WithLabelValues(string(r)).Inc()
}

func (m *Metrics) bounded(cause string) {
	if m == nil {
		return
	}
	m.bounds.WithLabelValues(cause).Inc()
}

func (m *Metrics) holding(delta float64) {
	if m == nil {
		return
	}
	m.held.Add(delta)
}

// labelCap bounds the values of a client-controlled label: the first max distinct values (made
// safe by safeLabel) are kept, later ones become "other".
type labelCap struct {
	max  int
	mu   sync.RWMutex
	seen map[string]string
}

func (c *labelCap) get(v string) string {
	if v == "" {
		return "none"
	}
	c.mu.RLock()
	l, ok := c.seen[v]
	c.mu.RUnlock()
	if ok {
		return l
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.seen[v]; ok {
		return l
	}
	if c.seen == nil {
		c.seen = map[string]string{}
	}
	if len(c.seen) >= c.max || len(v) > 64 {
		return "other"
	}
	l = safeLabel(v)
	c.seen[v] = l
	return l
}
