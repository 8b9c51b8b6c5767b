package reconcile

import corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

// spanSettle is the span of a settlement.
const spanSettle = "llm_ratelimit.settle"

// traceContext is the W3C trace context among a request's headers (the first message of the
// stream): traceparent and tracestate, "" when absent.
func traceContext(hm *corev3.HeaderMap) (parent, state string) {
	get := headerGetter(hm)
	parent, _ = get("traceparent")
	state, _ = get("tracestate")
	return parent, state
}
