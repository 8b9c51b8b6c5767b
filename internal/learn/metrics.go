package learn

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a Shared's snapshot: per provider, model and reason, the learned quantile of
// the ratio (provider count / static estimate), the factor admission prices with (1 while the
// static estimate stands) and the decayed samples. The keys are bounded by SharedOptions.MaxKeys.
type Collector struct {
	s                      *Shared
	ratio, factor, samples *prometheus.Desc
}

// NewCollector returns a Collector of s, to register once.
func NewCollector(s *Shared) *Collector {
	labels := []string{"provider", "model", "reason"}
	return &Collector{s: s,
		ratio: prometheus.NewDesc("llm_ratelimit_learned_ratio",
			"The learned quantile (pricing.learn.quantile) of the provider's prompt count over the static estimate, per provider, model and estimate reason, before the clamp; 0 when nothing is learned.", labels, nil),
		factor: prometheus.NewDesc("llm_ratelimit_learned_factor",
			"The factor admission multiplies the static prompt estimate by: the learned ratio clamped to [min_factor, max_factor], or 1 below min_samples or while the store is away.", labels, nil),
		samples: prometheus.NewDesc("llm_ratelimit_learned_samples",
			"The decayed number of settlements the learned ratio rests on (every replica's).", labels, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ratio
	ch <- c.factor
	ch <- c.samples
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for k, l := range c.s.Snapshot() {
		ch <- prometheus.MustNewConstMetric(c.ratio, prometheus.GaugeValue, l.Quantile, k.Provider, k.Model, k.Reason)
		ch <- prometheus.MustNewConstMetric(c.factor, prometheus.GaugeValue, l.Factor, k.Provider, k.Model, k.Reason)
		ch <- prometheus.MustNewConstMetric(c.samples, prometheus.GaugeValue, l.Samples, k.Provider, k.Model, k.Reason)
	}
}
