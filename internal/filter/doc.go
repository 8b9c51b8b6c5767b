// Package filter turns an Envoy ext_authz CheckRequest into a decision: it prices the request
// (through an Estimator), finds the rules that apply (from the configuration and the route's
// context_extensions), debits their buckets in one call (through a Limiter), and answers with an
// OK that carries the rate-limit headers, or a denial in the provider's own error format.
//
// The service reads each CheckRequest in place from its protobuf encoding (CheckBytes; Check is
// the same decision for a decoded request) and encodes its answers by hand (AppendAnswer):
// protobuf's generic decoding and encoding cost more than the rest of a decision but pricing.
//
// Over the limit is a decision, not an error: a denial is a successful RPC. Only a request that is
// not HTTP at all, or not valid protobuf, is an RPC error. This package owns every mapping to the wire; it declares the
// small interfaces it needs and must never be imported by the bucket or tokens packages.
package filter
