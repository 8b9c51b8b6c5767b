// Package authzwire is the Envoy ext_authz wire at the service's edge: it reads a CheckRequest
// in place from its protobuf encoding into plain values (Decode, Request), writes a
// CheckResponse's encoding by hand (AppendResponse, and the Append*Field functions for its
// dynamic metadata), and serves envoy.service.auth.v3.Authorization over gRPC with the codec
// that hands Check the request's encoding and sends answers encoded that way (Codec, Register).
//
// Contract: Decode reads what protobuf's decoder reads (the last occurrence wins, unknown
// fields are skipped) and fails exactly where it fails; the values it returns point into the
// encoding, which must not change while they are in use. AppendResponse's encoding decodes to
// the same message as proto.Marshal's, or it declines: a field it does not write is never
// dropped. Reading allocates nothing but the context_extensions map; metadata_context is kept
// encoded and read only when a decision asks for a value in it (Request.MetadataString), which
// allocates nothing but a number's text; writing grows the buffer once.
//
// It owns the encoding only, no decision: it must never import internal/filter,
// internal/bucket, internal/config or the provider packages.
package authzwire
