package filter

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tracing"
)

// With a tracer, a decision is a span continuing the application's trace (its traceparent),
// with its pricing, store call and hold as children, and what the decision log says of it as
// attributes: never the key, the prompt or the tenant in clear.
func TestDecisionSpansContinueTheCallersTrace(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(context.Background(), tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(context.Background()) }()
	c, err := config.Parse([]byte(`tenant: {source: header, header: x-tenant-id}
rules: [{name: per-tenant, per: [tenant], tokens: {limit: 1000, period: second}, max_wait: 2s}]
`), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	var held time.Duration
	f, err := New(policyFor(t, c), Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{}), Tracer: tr.Tracer(),
		Sleep: func(_ context.Context, d time.Duration) error { held += d; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	const key, prompt, tenant = "sk-trace-secret-key", "a traced prompt that stays private", "team-secret-name"
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":600}`
	for range 2 { // the second waits for the first's tokens: a hold
		if _, err := f.Check(context.Background(), hostileRequest("/v1/chat/completions", []byte(body), map[string]string{
			"authorization": "Bearer " + key, "x-tenant-id": tenant,
			"traceparent": "00-" + traceID + "-" + parentID + "-01", "tracestate": "vendor=1"})); err != nil {
			t.Fatal(err)
		}
	}
	if held == 0 {
		t.Fatal("the second request was not held")
	}
	spans := exp.GetSpans()
	byName := map[string]int{}
	for _, s := range spans {
		byName[s.Name]++
		if got := s.SpanContext.TraceID().String(); got != traceID {
			t.Errorf("span %s in trace %s, want the caller's %s", s.Name, got, traceID)
		}
		for _, a := range s.Attributes {
			v := a.Value.String()
			for _, secret := range []string{key, "trace-secret", prompt, "private", tenant} {
				if strings.Contains(v, secret) {
					t.Errorf("span %s attribute %s = %q holds %q", s.Name, a.Key, v, secret)
				}
			}
		}
	}
	if byName[spanCheck] != 2 || byName[spanPricing] != 2 || byName[spanTake] != 2 || byName[spanHold] != 1 {
		t.Fatalf("spans %v", byName)
	}
	checks := map[string]bool{}
	for _, s := range spans {
		if s.Name == spanCheck {
			checks[s.SpanContext.SpanID().String()] = true
			if s.Parent.SpanID().String() != parentID || !s.Parent.IsRemote() {
				t.Errorf("check span's parent %v, want the caller's span %s", s.Parent.SpanID(), parentID)
			}
			attrs := map[string]string{}
			for _, a := range s.Attributes {
				attrs[string(a.Key)] = a.Value.String()
			}
			if attrs["llm_ratelimit.provider"] != "openai" || attrs["llm_ratelimit.model"] != "gpt-4o" ||
				attrs["llm_ratelimit.rules"] != "per-tenant" || attrs["llm_ratelimit.tenant_hash"] != tenantHash(tenant) ||
				(attrs["llm_ratelimit.decision"] != decisionAllowed && attrs["llm_ratelimit.decision"] != decisionDelayed) {
				t.Errorf("check span attributes %v", attrs)
			}
		}
	}
	for _, s := range spans {
		if s.Name != spanCheck && !checks[s.Parent.SpanID().String()] {
			t.Errorf("span %s is not a child of a check span", s.Name)
		}
	}
}

// Spans are made with a tracer only: without one, a decision makes none (and allocates for
// none; BenchmarkCheck's allocations are the figure to compare).
func TestSpansOnlyWithATracer(t *testing.T) {
	c, err := config.Parse([]byte("rules: [{name: r, tokens: {limit: 100000000, period: minute}}]\n"), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(policyFor(t, c), Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	data, err := marshal(hostileRequest("/v1/chat/completions", []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5}`),
		map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	off := testing.AllocsPerRun(200, func() { _, _ = f.CheckBytes(ctx, data) })
	exp := tracetest.NewInMemoryExporter()
	tr, err := tracing.New(ctx, tracing.Options{Exporter: exp})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tr.Shutdown(ctx) }()
	traced, err := New(policyFor(t, c), Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{}), Tracer: tr.Tracer()})
	if err != nil {
		t.Fatal(err)
	}
	on := testing.AllocsPerRun(200, func() { _, _ = traced.CheckBytes(ctx, data) })
	if on <= off {
		t.Fatalf("%v allocations traced, %v not: the traced filter made no spans", on, off)
	}
	t.Logf("allocations per decision: %v without a tracer, %v with one", off, on)
}
