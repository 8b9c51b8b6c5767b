package reconcile

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// histogram returns the one series of the histogram family name in reg whose labels include
// want (nil when there is none).
func histogram(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := want[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			return m.GetHistogram()
		}
	}
	return nil
}

// The settlement observes the prompt estimate's error (reported input over priced prompt) and
// the use of the reserved output apart, which the usage ratio (actual over prompt plus
// reserved output) cannot tell apart.
func TestEstimateErrorObserved(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
	r := e.reserve(t, false) // prompt 200, output 800
	e.run(t, r, true, headers(":status", "200"),
		body(`{"usage":{"prompt_tokens":220,"completion_tokens":400,"total_tokens":620}}`, true))
	labels := map[string]string{"provider": "openai", "model": "gpt-4o"}
	for _, tc := range []struct {
		name string
		want float64
	}{
		{"llm_ratelimit_prompt_estimate_ratio", 1.1},
		{"llm_ratelimit_output_use_ratio", 0.5},
	} {
		h := histogram(t, reg, tc.name, labels)
		if h == nil {
			t.Errorf("%s: no series %v", tc.name, labels)
			continue
		}
		if h.GetSampleCount() != 1 || h.GetSampleSum() != tc.want {
			t.Errorf("%s: count %d sum %v, want 1 and %v", tc.name, h.GetSampleCount(), h.GetSampleSum(), tc.want)
		}
	}
}

// A response without usage, or a provider error, observes neither.
func TestEstimateErrorNotObservedWithoutUsage(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
	e.run(t, e.reserve(t, false), true, headers(":status", "200"), body(`{}`, true))
	e.run(t, e.reserve(t, false), true, headers(":status", "500"), body(`{"usage":{"prompt_tokens":220}}`, true))
	for _, name := range []string{"llm_ratelimit_prompt_estimate_ratio", "llm_ratelimit_output_use_ratio"} {
		if h := histogram(t, reg, name, nil); h != nil {
			t.Errorf("%s observed %d responses, want none", name, h.GetSampleCount())
		}
	}
}
