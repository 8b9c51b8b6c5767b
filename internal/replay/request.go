package replay

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// The headers the replay names the recorded tenant and class with; the replayed configuration
// reads them (replayConfig).
const (
	tenantHeader   = "x-replay-tenant"
	priorityHeader = "x-replay-priority"
)

// Field numbers of envoy/service/auth/v3 (see internal/authzwire).
const (
	fieldCheckAttributes = 1 // CheckRequest.attributes
	fieldAttrRequest     = 4 // AttributeContext.request
	fieldRequestHTTP     = 2 // Request.http
	fieldHTTPMethod      = 2 // HttpRequest.method
	fieldHTTPHeaders     = 3 // HttpRequest.headers
	fieldHTTPPath        = 4 // HttpRequest.path
)

// encoder builds the encoding of a CheckRequest for a recorded decision, reusing its buffers.
type encoder struct {
	http, out []byte
}

// encode returns the CheckRequest of a POST to path with the tenant and class headers. The
// result is valid until the next call.
func (e *encoder) encode(path, tenant, priority string) []byte {
	h := e.http[:0]
	h = protowire.AppendTag(h, fieldHTTPMethod, protowire.BytesType)
	h = protowire.AppendString(h, "POST")
	h = appendHeader(h, tenantHeader, tenant)
	h = appendHeader(h, priorityHeader, priority)
	h = protowire.AppendTag(h, fieldHTTPPath, protowire.BytesType)
	h = protowire.AppendString(h, path)
	e.http = h

	httpLen := protowire.SizeTag(fieldRequestHTTP) + protowire.SizeBytes(len(h))
	reqLen := protowire.SizeTag(fieldAttrRequest) + protowire.SizeBytes(httpLen)
	o := e.out[:0]
	o = protowire.AppendTag(o, fieldCheckAttributes, protowire.BytesType)
	o = protowire.AppendVarint(o, uint64(reqLen))
	o = protowire.AppendTag(o, fieldAttrRequest, protowire.BytesType)
	o = protowire.AppendVarint(o, uint64(httpLen))
	o = protowire.AppendTag(o, fieldRequestHTTP, protowire.BytesType)
	o = protowire.AppendBytes(o, h)
	e.out = o
	return o
}

func appendHeader(b []byte, k, v string) []byte {
	if v == "" {
		return b
	}
	n := protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
	b = protowire.AppendTag(b, fieldHTTPHeaders, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, k)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendString(b, v)
}
