// Package reservation is the contract between the request path and the response path: what
// internal/filter reserved for a request (the buckets with their parameters, the costs, the
// in-flight lease), encoded as one compact string that Envoy carries in the ext_authz dynamic
// metadata to the ext_proc service (internal/reconcile), which refunds, charges and releases it
// without the configuration (which may have been reloaded in between).
//
// It owns the encoding and the names both sides must agree on: the metadata namespace Envoy
// files the answer under and forwards (MetadataNamespace), the field holding the reservation
// (MetadataKey) and the bucket kinds (KindTokens, KindRequests, KindConcurrency). It is their
// home because it is the one package both paths import for their contract and it imports no
// side. The algorithm codes in the encoding are bucket's (bucket.Spec.Code), since the Lua
// script and the stored keys spell them too. It imports internal/bucket for the Spec type and
// must never import internal/filter, internal/reconcile or any wire protocol.
package reservation
