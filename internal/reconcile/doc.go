// Package reconcile closes the loop on Envoy's response path: it serves
// envoy.service.ext_proc.v3.ExternalProcessor, reads the reservation that internal/filter made
// at Check (forwarded by Envoy from the ext_authz dynamic metadata), and when the response ends
//
//   - refunds the reserved-but-unused tokens (rules with refund), or charges the overage (every
//     rule), from the usage the provider reports (a JSON body's "usage", or the usage of a
//     server-sent event stream: OpenAI's final chunk, which needs stream_options.include_usage;
//     the Responses API's response.completed; Anthropic's message_start and message_delta;
//     Gemini's usageMetadata, in each server-sent event or each element of a streamed JSON
//     array, found with bounded memory per element by jsonarray.go), read by the dialect of the
//     provider the reservation was made for;
//   - bounds that usage first (Settlement): a report above usage_factor times the reservation,
//     or above max_usage_tokens, is settled at the bound and counted, never applied raw;
//   - on a provider 4xx (429 included) gives a refundable reservation back but for the part
//     Settlement.KeepOnClientError keeps, so that no client can hold a shared budget for free
//     with requests it knows will be refused; on a 5xx gives it back whole; a rule without
//     refund keeps its reservation on every error (the provider counted the request on arrival);
//   - refunds nothing when Envoy answered itself (response.code_details other than via_upstream:
//     a timeout, a reset), since the provider may have finished and billed the request;
//   - settles a stream that ends before the response's end_of_stream from the usage already
//     read only when its event stream had said that it was over (OpenAI's data: [DONE], at
//     which the OpenAI SDKs close the connection, often before the reply's last chunk reaches
//     Envoy); any other cut response keeps its reservation, since a partial report may be
//     below what the provider billed;
//   - releases the request's in-flight lease (max_concurrent), also when the stream breaks, and
//     when it ends before any response (the stream opens with the request headers);
//   - lowers the rules marked provider_feedback to what the provider's rate-limit headers say is
//     left (x-ratelimit-*-tokens, anthropic-ratelimit-*), never raising them, and pauses them for
//     every replica after a provider 429 with retry-after, or whose body gives the wait for a
//     dialect that reads it there (retryReader: Gemini's RetryInfo; Vertex AI's capacity 429 a
//     short backoff); internal/filter marks these buckets only
//     for a request that carried the operator's own credential.
//
// Compressed replies (Content-Encoding gzip, x-gzip, deflate, br, zstd, up to two stacked) are
// decoded as their chunks arrive, on one goroutine per reply fed one chunk at a time (each
// decoded as far as it goes before the next message is read), within Options.MaxDecoded
// decoded bytes and Options.MaxDecoders replies at once per replica (a reply's decoder is
// released at its end, or at its event stream's data: [DONE]); a reply
// that cannot be decoded (a coding not enabled, a corrupt or truncated stream, over a bound)
// keeps its reservation and is counted in llm_ratelimit_reconcile_errors_total by reason.
//
// It never holds a response: in Envoy's observability mode it answers nothing, and in the other
// modes it answers every message at once and does its store calls after. A response whose usage
// never arrives keeps its reservation (the worst case, already debited): nothing leaks, since a
// token bucket refills on its own; only the lease needs an end, and its time to live is it. An
// event stream settles when it says it is over (data: [DONE], compressed or not), not when
// Envoy ends it. Metrics of refunds and overage count what the
// store applied, after it applied it.
//
// It owns the reading of a response (its JSON body or its server-sent events, within a bound),
// the decoding, the settlement rules and the feedback rules. What a provider's usage and
// rate-limit headers look like is its dialect's (internal/provider/dialects, by the reservation's
// tag). It declares the Store it needs (and the Recorder of the optional decision log, whose
// settlement records name the reservation's id), imports internal/reservation, internal/bucket and
// internal/provider, and must never import internal/filter or internal/config (internal/server
// compiles the Settlement).
package reconcile
