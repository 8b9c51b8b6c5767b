// Package filter turns an Envoy ext_authz CheckRequest into a decision: it prices the request
// (through an Estimator), finds the rules that apply (from the configuration and the route's
// context_extensions), debits their buckets in one call (through a Limiter), and answers with an
// OK that carries the rate-limit headers, or a denial in the provider's own error format (whose
// body the provider's dialect renders: internal/provider/dialects).
//
// It decides over plain values: CheckBytes has internal/authzwire read the request's encoding
// in place (Check is the same decision for a decoded request), and its Answer keeps the
// metadata as values until authzwire writes the encoding (Answer.AppendTo). What the answers
// say (status, headers, bodies, metadata) is decided here; how they are encoded is authzwire's.
//
// Every answer is sent within the check's attempt (Options.CheckTimeout, Envoy's per-try timeout,
// and ctx's deadline), whatever the client sends: a large body is counted exactly only in one of a
// few pricing slots and within its time, else priced at once at the estimator's upper bound
// (Bounder); a hold for max_wait ends before the attempt does. A check that missed its attempt
// would be decided by Envoy's failure mode, unpriced.
//
// Over the limit is a decision, not an error: a denial is a successful RPC. Only a request that is
// not HTTP at all, or not valid protobuf, is an RPC error. This package owns every mapping of a
// decision or an error to the answer; it declares the small interfaces it needs (Limiter,
// Estimator, and Recorder for the optional decision log, internal/decisionlog) and must never
// be imported by the bucket, tokens, provider, authzwire or decisionlog packages, nor import
// internal/server.
package filter
