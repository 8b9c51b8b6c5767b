package reconcile

import (
	"context"
	"errors"
	"io"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
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

// The settlement observes the prompt estimate's error (reported input over priced prompt),
// labelled by whether admission counted the prompt exactly, and the use of the reserved output
// apart, which the usage ratio (actual over prompt plus reserved output) cannot tell apart.
func TestEstimateErrorObserved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		exact *structpb.Value // the metadata's exact field; nil: absent
		want  string
	}{
		{"exact", structpb.NewBoolValue(true), "true"},
		{"estimated", structpb.NewBoolValue(false), "false"},
		{"unsaid", nil, "unknown"},
		{"not_a_bool", structpb.NewStringValue("true"), "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			m := NewMetrics(reg)
			e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
			md := metadata(e.reserve(t, false)) // prompt 200, output 800
			if tc.exact != nil {
				md.FilterMetadata[reservation.MetadataNamespace].Fields[reservation.MetadataExactKey] = tc.exact
			}
			runWith(t, e, md, headers(":status", "200"),
				body(`{"usage":{"prompt_tokens":220,"completion_tokens":400,"total_tokens":620}}`, true))
			for _, h := range []struct {
				name   string
				labels map[string]string
				want   float64
			}{
				{"llm_ratelimit_prompt_estimate_ratio", map[string]string{"provider": "openai", "model": "gpt-4o", "exact": tc.want}, 1.1},
				{"llm_ratelimit_output_use_ratio", map[string]string{"provider": "openai", "model": "gpt-4o"}, 0.5},
			} {
				got := histogram(t, reg, h.name, h.labels)
				if got == nil {
					t.Errorf("%s: no series %v", h.name, h.labels)
					continue
				}
				if got.GetSampleCount() != 1 || got.GetSampleSum() != h.want {
					t.Errorf("%s: count %d sum %v, want 1 and %v", h.name, got.GetSampleCount(), got.GetSampleSum(), h.want)
				}
			}
		})
	}
}

// runWith sends msgs on one stream in observability mode, each with the metadata md, as
// Envoy forwards the ext_authz answer's.
func runWith(t *testing.T, e *env, md *corev3.Metadata, msgs ...*extprocv3.ProcessingRequest) {
	t.Helper()
	st, err := e.client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		m.MetadataContext, m.ObservabilityMode = md, true
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
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
