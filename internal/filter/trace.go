package filter

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/llm-ratelimit/llm-ratelimit/internal/authzwire"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tracing"
)

// Span names of a decision: the check, and within it the pricing, the store's take and a hold.
const (
	spanCheck   = "llm_ratelimit.check"
	spanPricing = "llm_ratelimit.pricing"
	spanTake    = "llm_ratelimit.store.take"
	spanHold    = "llm_ratelimit.hold"
)

// startCheck starts the span of a decision (data, arrived at start), the child of the
// application's span when the request carries a W3C trace context. Only called with a Tracer.
func (f *Filter) startCheck(ctx context.Context, data []byte, start time.Time) (context.Context, trace.Span) {
	tp, ts := authzwire.TraceContext(data)
	parent := tracing.Parent(ctx, tp, ts)
	return f.opts.Tracer.Start(parent, spanCheck, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start))
}

// endCheck ends the span of a decision with what the decision log says of it (never a prompt,
// a header value or a tenant in clear: the tenant's hash).
func endCheck(span trace.Span, a *Answer, err error) {
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
		span.End()
		return
	}
	if a != nil {
		m := &a.meta
		est := &m.est
		attrs := make([]attribute.KeyValue, 0, 10)
		attrs = append(attrs,
			attribute.String("llm_ratelimit.decision", m.decision),
			attribute.String("llm_ratelimit.provider", est.ProviderName()),
			attribute.String("llm_ratelimit.api", est.API.String()),
			attribute.String("llm_ratelimit.model", safeLabel(est.Model)),
			attribute.Int64("llm_ratelimit.prompt_tokens", est.PromptTokens),
			attribute.Int64("llm_ratelimit.output_tokens", est.OutputTokens),
			attribute.Bool("llm_ratelimit.exact", est.Exact))
		if m.wait > 0 {
			attrs = append(attrs, attribute.Float64("llm_ratelimit.wait_ms", float64(m.wait.Microseconds())/1000))
		}
		if pl := m.pl; pl != nil {
			attrs = append(attrs, attribute.String("llm_ratelimit.rules", pl.ruleNames()),
				attribute.String("llm_ratelimit.tenant_hash", tenantHash(pl.tenant)))
			if b := pl.blocking(); b != "" {
				attrs = append(attrs, attribute.String("llm_ratelimit.limit", b))
			}
		}
		span.SetAttributes(attrs...)
	}
	span.End()
}

// child starts a span within the decision's, when tracing is on; end ends it (a no-op span
// when off).
func (f *Filter) child(ctx context.Context, name string) (context.Context, trace.Span) {
	if f.opts.Tracer == nil {
		return ctx, noSpan
	}
	return f.opts.Tracer.Start(ctx, name)
}

var noSpan = trace.SpanFromContext(context.Background())
