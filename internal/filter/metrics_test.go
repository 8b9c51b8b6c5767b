package filter

import (
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// samples returns the samples of the metric family name in reg (counters or gauges), each as
// its labels ("k=v,k=v", sorted) mapped to its value.
func samples(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(ls)
			v := m.GetCounter().GetValue()
			if m.Gauge != nil {
				v = m.GetGauge().GetValue()
			}
			out[strings.Join(ls, ",")] = v
		}
	}
	return out
}

// A shadow rule's would-be refusal is counted under its rule, with the limit that would have
// refused; the enforced rules of the same request are not counted as shadow.
func TestShadowRuleOutcomeCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := newEnv(t, "", Options{Metrics: NewMetrics(reg)})
	if d := decision(e.check(t, "chat_trial")); d != decisionAllowed {
		t.Fatalf("decision = %q, want %q", d, decisionAllowed)
	}
	got := samples(t, reg, "llm_ratelimit_shadow_decisions_total")
	want := map[string]float64{"limit=tokens,outcome=too_large,rule=trial": 1}
	if !equalSamples(got, want) {
		t.Errorf("shadow decisions = %v, want %v", got, want)
	}
}

// In global shadow mode every rule is shadow: a request over a limit is allowed (decision
// shadow) and its would-be denial is counted under the rule that would have denied it.
func TestGlobalShadowOutcomeCounted(t *testing.T) {
	t.Parallel()
	const limits = `
shadow: true
rules:
  - name: small
    match: {provider: openai}
    tokens: {limit: 150, period: minute}
`
	reg := prometheus.NewRegistry()
	e := newEnv(t, limits, Options{Metrics: NewMetrics(reg)})
	for range 2 {
		if d := decision(e.check(t, "chat_trial")); d != decisionShadow {
			t.Fatalf("decision = %q, want %q", d, decisionShadow)
		}
	}
	got := samples(t, reg, "llm_ratelimit_shadow_decisions_total")
	want := map[string]float64{
		"limit=,outcome=allowed,rule=small":      1,
		"limit=tokens,outcome=denied,rule=small": 1,
	}
	if !equalSamples(got, want) {
		t.Errorf("shadow decisions = %v, want %v", got, want)
	}
}

func equalSamples(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// A shadow take the store does not answer is counted as error, for a shadow rule and in global
// shadow mode alike; the request's own decision follows failure.mode.
func TestShadowStoreFailureCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, limits string
		want         map[string]float64
	}{
		{"shadow_rule", `
failure: {mode: allow}
rules:
  - name: enforced
    match: {provider: openai}
    tokens: {limit: 1000, period: minute}
  - name: trial
    match: {provider: openai}
    tokens: {limit: 10, period: minute}
    shadow: true
`, map[string]float64{"limit=,outcome=error,rule=trial": 1}},
		{"global", `
shadow: true
failure: {mode: allow}
rules:
  - name: small
    match: {provider: openai}
    tokens: {limit: 150, period: minute}
`, map[string]float64{"limit=,outcome=error,rule=small": 1}},
		// Global shadow never denies: a store failure passes the request whatever the failure mode.
		{"global_deny", `
shadow: true
failure: {mode: deny}
rules:
  - name: small
    match: {provider: openai}
    tokens: {limit: 150, period: minute}
`, map[string]float64{"limit=,outcome=error,rule=small": 1}},
		{"global_local", `
shadow: true
failure: {mode: local}
rules:
  - name: small
    match: {provider: openai}
    tokens: {limit: 150, period: minute}
`, map[string]float64{"limit=,outcome=error,rule=small": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			e := newEnv(t, tc.limits, Options{Limiter: failing{}, Metrics: NewMetrics(reg)})
			if d := decision(e.check(t, "chat_trial")); d != decisionFailOpen {
				t.Fatalf("decision = %q, want %q", d, decisionFailOpen)
			}
			if got := samples(t, reg, "llm_ratelimit_shadow_decisions_total"); !equalSamples(got, tc.want) {
				t.Errorf("shadow decisions = %v, want %v", got, tc.want)
			}
		})
	}
}
