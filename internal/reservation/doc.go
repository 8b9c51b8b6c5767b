// Package reservation is the contract between the request path and the response path: what
// internal/filter reserved for a request (the buckets with their parameters, the costs, the
// in-flight lease), encoded as one compact string that Envoy carries in the ext_authz dynamic
// metadata to the ext_proc service (internal/reconcile), which refunds, charges and releases it
// without the configuration (which may have been reloaded in between).
//
// It owns the encoding only. It imports internal/bucket for the Spec type and must never import
// internal/filter, internal/reconcile or any wire protocol.
package reservation
