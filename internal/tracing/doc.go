// Package tracing is the service's opt-in OpenTelemetry tracing: a tracer provider exporting
// over OTLP/gRPC (New), and the W3C trace context a request carries (Parent), so that the spans
// of a decision (internal/filter: the check, its pricing, its store call, its hold) and of a
// settlement (internal/reconcile) continue the trace of the application's call as Envoy
// passes it (traceparent, tracestate).
//
// Off by default: with no endpoint there is no provider, the callers hold a nil trace.Tracer,
// and the request path does nothing more than test it. Spans carry what the decision log
// carries of a decision (provider, API, model, the priced dimensions, the decision), never a
// prompt, a body, a header value, a credential or a tenant in clear (the tenant's hash, as in
// the logs).
//
// It imports OpenTelemetry alone, and must never import the service's own packages.
package tracing
