package reconcile

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Reason is a stable code for a failure class: a log field and a metric label.
type Reason string

const (
	reasonAdjustFailed Reason = "reconcile_adjust_failed" // a refund, charge or release failed
	reasonLowerFailed  Reason = "feedback_failed"         // provider feedback could not be applied
	reasonMalformed    Reason = "reservation_malformed"   // the check's reservation could not be read
	// A compressed reply whose usage could not be read: its reservation stays.
	reasonDecodeUnsupported Reason = "decode_unsupported" // a coding not decoded (unknown, disabled, more than two stacked)
	reasonDecodeCorrupt     Reason = "decode_corrupt"     // the compressed stream is invalid or truncated
	reasonDecodeOver        Reason = "decode_over_bound"  // it decodes to more than MaxDecoded
	reasonDecodeBusy        Reason = "decode_busy"        // MaxDecoders replies were being decoded already

	reasonEventStreamBroken Reason = "eventstream_broken"             // an event stream frame failed its CRC or length checks, or was cut
	reasonEventStreamOver   Reason = "eventstream_message_over_bound" // an event stream message above MaxBody was skipped
)

// Results of a settled response (metric label values).
type result string

const (
	resultUsage         result = "usage"          // refunded or charged from the reported usage
	resultNoUsage       result = "no_usage"       // no usage found: the reservation stays
	resultUpstreamError result = "upstream_error" // the provider failed: everything refunded
	resultNoReservation result = "no_reservation" // nothing was reserved (unlimited, denied)
	resultLocalReply    result = "local_reply"    // Envoy answered itself (timeout, reset): nothing refunded
	resultNoResponse    result = "no_response"    // the stream ended before the response started: nothing refunded
)

// Provider corrections (metric label values).
const (
	correctionLower = "lower" // the provider reported less than the bucket held
	correctionPause = "pause" // a provider 429 paused the bucket
	// correctionSpendCap: a provider 429 without retry-after (a spend limit or an exhausted
	// quota, not a rate limit): counted, nothing paused.
	correctionSpendCap = "spend_cap"
)

// maxModels bounds the model label: later models count as "other".
const maxModels = 100

// Metrics are the reconciliation metrics. A nil *Metrics records nothing. Safe for concurrent use.
type Metrics struct {
	settledTotal *prometheus.CounterVec
	ratio        *prometheus.HistogramVec
	prompt       *prometheus.HistogramVec
	staticRatio  *prometheus.HistogramVec
	output       *prometheus.HistogramVec
	tokens       *prometheus.CounterVec
	held         prometheus.Gauge
	releases     *prometheus.CounterVec
	corrections  *prometheus.CounterVec
	errors       *prometheus.CounterVec
	clamps       *prometheus.CounterVec
	spend        *prometheus.CounterVec

	mu     sync.Mutex
	models map[string]struct{}
}

// NewMetrics registers the metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		settledTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_reconciled_responses_total",
			Help: "Responses settled on the response path, by result (usage, no_usage, upstream_error, local_reply, no_response, no_reservation)."}, []string{"result", "provider"}),
		ratio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_ratelimit_usage_ratio",
			Help:    "Actual tokens reported by the provider over the tokens reserved at admission, per response.",
			Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1, 1.1, 1.5, 2}}, []string{"provider", "model"}),
		staticRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_ratelimit_prompt_static_estimate_ratio",
			Help:    "Prompt tokens reported by the provider over the static estimate of an estimated prompt whose error is learned (pricing.learn), per response that reports its input: the static margin's error, next to llm_ratelimit_prompt_estimate_ratio's error of the price admission charged.",
			Buckets: []float64{0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1, 1.01, 1.05, 1.1, 1.25, 1.5, 2}}, []string{"provider", "model", "reason"}),
		prompt: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_ratelimit_prompt_estimate_ratio",
			Help:    "Prompt tokens reported by the provider over the prompt tokens priced at admission, per response that reports both: the prompt estimate's own error; exact is whether admission counted the prompt exactly (true, false, unknown).",
			Buckets: []float64{0.5, 0.8, 0.9, 0.95, 0.99, 1, 1.01, 1.05, 1.1, 1.25, 1.5, 2}}, []string{"provider", "model", "exact"}),
		output: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "llm_ratelimit_output_use_ratio",
			Help:    "Output tokens reported by the provider over the output tokens reserved at admission, per response with usage.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1, 1.1}}, []string{"provider", "model"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_reconciled_tokens_total",
			Help: "Tokens given back (refund) or charged beyond the reservation (overage), by dimension (tokens, input_tokens, output_tokens): per response, the most of any one bucket of the dimension."}, []string{"provider", "direction", "dimension"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_ratelimit_leases_held",
			Help: "In-flight leases whose response this replica is following now."}),
		releases: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_leases_released_total",
			Help: "In-flight leases released (ok) or left to expire after lease_ttl (failed)."}, []string{"result"}),
		corrections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_provider_corrections_total",
			Help: "Buckets lowered by the provider's rate-limit headers (lower) or paused by its 429 (pause); 429s without retry-after, which change nothing (spend_cap)."}, []string{"provider", "kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_reconcile_errors_total",
			Help: "Response-path failures by reason."}, []string{"reason"}),
		clamps: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_usage_clamped_total",
			Help: "Responses whose reported usage was above its bound and was settled at the bound, by reason (over_reservation_factor, over_max_usage)."}, []string{"provider", "reason"}),
		models: map[string]struct{}{},
	}
	m.spend = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_spend_settled_micros_total",
		Help: "Money the settled responses cost, in micro-units of USD, by rule of the cost limit charged: the usage's cost at the admission's price; nothing for a failed call; the reservation when no usage was reported."}, []string{"rule"})
	reg.MustRegister(m.settledTotal, m.ratio, m.prompt, m.staticRatio, m.output, m.tokens, m.held, m.releases, m.corrections, m.errors, m.clamps, m.spend)
	return m
}

func (m *Metrics) model(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.models[s]; ok {
		return s
	}
	if len(m.models) >= maxModels {
		return "other"
	}
	m.models[s] = struct{}{}
	return s
}

func (m *Metrics) settled(r result, provider, _ string) {
	if m != nil {
		m.settledTotal.WithLabelValues(string(r), provider).Inc()
	}
}

// usage observes a settled response's reported usage u against its reservation's estimate:
// prompt tokens, counted exactly or not (exact, a label), and reserved output (before the
// output weight).
func (m *Metrics) usage(prov, model, exact string, prompt, output int64, u provider.Usage) {
	if m == nil {
		return
	}
	model = m.model(model)
	if estimate := prompt + output; estimate > 0 {
		m.ratio.WithLabelValues(prov, model).Observe(float64(u.Tokens()) / float64(estimate))
	}
	// A report without an input count (a stream cut before it) says nothing of the prompt.
	if prompt > 0 && u.Input > 0 {
		m.prompt.WithLabelValues(prov, model, exact).Observe(float64(u.Input) / float64(prompt))
	}
	if output > 0 {
		m.output.WithLabelValues(prov, model).Observe(float64(u.Output) / float64(output))
	}
}

// spent counts what a money budget of rule was left charged with by one settled response.
func (m *Metrics) spent(rule string, micros int64) {
	if m == nil || micros <= 0 {
		return
	}
	m.spend.WithLabelValues(rule).Add(float64(micros))
}

// ruleOf is the rule a bucket belongs to: its name up to the first ':' (rule names have none; a
// route's limit is "route").
func ruleOf(name string) string {
	if i := strings.IndexByte(name, ':'); i >= 0 {
		return name[:i]
	}
	return name
}

func (m *Metrics) reconciled(prov string, refund, overage *dims) {
	if m == nil {
		return
	}
	for d := range provider.Dimension(provider.Dimensions) {
		if d == provider.Cost {
			continue // money, not tokens: the spend metrics count it
		}
		if refund[d] > 0 {
			m.tokens.WithLabelValues(prov, "refund", d.String()).Add(float64(refund[d]))
		}
		if overage[d] > 0 {
			m.tokens.WithLabelValues(prov, "overage", d.String()).Add(float64(overage[d]))
		}
	}
}

func (m *Metrics) leaseHeld(d float64) {
	if m != nil {
		m.held.Add(d)
	}
}

func (m *Metrics) released(err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.releases.WithLabelValues("failed").Inc()
		return
	}
	m.releases.WithLabelValues("ok").Inc()
}

func (m *Metrics) corrected(provider, kind string) {
	if m != nil {
		m.corrections.WithLabelValues(provider, kind).Inc()
	}
}

func (m *Metrics) clamped(provider, reason string) {
	if m != nil {
		m.clamps.WithLabelValues(provider, reason).Inc()
	}
}

// static records the provider's input count over the static estimate of a learned prompt.
func (m *Metrics) static(prov, model, reason string, static, input int64) {
	if m == nil {
		return
	}
	m.staticRatio.WithLabelValues(prov, m.model(model), reason).Observe(float64(input) / float64(static))
}

func (m *Metrics) error(r Reason) {
	if m != nil {
		m.errors.WithLabelValues(string(r)).Inc()
	}
}
