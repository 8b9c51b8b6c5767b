package reconcile

import (
	"context"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llm-ratelimit/llm-ratelimit/internal/tracing"
)

// With a tracer, a settlement is a span in the trace its request's traceparent names, with
// its result, provider, model, status and the usage it settled to.
func TestSettlementSpanContinuesTheRequestsTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	e := newEnvWith(t, nil, func(o *Options) { o.Tracer = tr.Tracer() })
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	reqHeaders := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: "traceparent", RawValue: []byte("00-" + traceID + "-" + parentID + "-01")}}}}}}
	e.run(t, e.reserve(t, true), true, reqHeaders, answered("via_upstream", ":status", "200", "content-type", "application/json"),
		body(`{"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`, true))
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != spanSettle {
		t.Fatalf("spans %v, want one %s", spans, spanSettle)
	}
	s := spans[0]
	if s.SpanContext.TraceID().String() != traceID || s.Parent.SpanID().String() != parentID {
		t.Errorf("span in trace %s under %s, want %s under %s", s.SpanContext.TraceID(), s.Parent.SpanID(), traceID, parentID)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["llm_ratelimit.result"] != string(resultUsage) || attrs["llm_ratelimit.provider"] != "openai" ||
		attrs["http.response.status_code"] != "200" || attrs["llm_ratelimit.input_tokens"] != "12" || attrs["llm_ratelimit.output_tokens"] != "34" {
		t.Errorf("attributes %v", attrs)
	}
}
