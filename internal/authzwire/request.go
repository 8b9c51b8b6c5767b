package authzwire

import (
	"errors"
	"fmt"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// The CheckRequest is read straight from its protobuf encoding: a decision needs a handful of
// its fields, while decoding the whole message builds a map of every header and copies every
// string and the body (most of the service's CPU per decision but pricing). Field
// numbers are those of envoy/service/auth/v3 (external_auth.proto, attribute_context.proto).
const (
	fieldCheckAttributes = 1 // CheckRequest.attributes

	fieldAttrSource     = 1  // AttributeContext.source (Peer)
	fieldAttrRequest    = 4  // AttributeContext.request (Request)
	fieldAttrExtensions = 10 // AttributeContext.context_extensions (map<string, string>)

	fieldPeerPrincipal = 4 // Peer.principal

	fieldRequestHTTP = 2 // Request.http (HttpRequest)

	fieldHTTPHeaders = 3  // HttpRequest.headers (map<string, string>)
	fieldHTTPPath    = 4  // HttpRequest.path
	fieldHTTPHost    = 5  // HttpRequest.host (the :authority)
	fieldHTTPSize    = 9  // HttpRequest.size
	fieldHTTPBody    = 11 // HttpRequest.body (string)
	fieldHTTPRawBody = 12 // HttpRequest.raw_body (bytes)

	fieldMapKey   = 1
	fieldMapValue = 2
)

// The headers a decision reads, by index in Request.Header and Request.Has.
const (
	HeaderPath = iota
	HeaderAuthority
	HeaderContentType
	HeaderContentEncoding
	HeaderContentLength
	// HeaderPartial is x-envoy-auth-partial-body: Envoy sent the first bytes of a larger body.
	HeaderPartial
	// HeaderTenant and HeaderPriority are the headers named to Decode, if any.
	HeaderTenant
	HeaderPriority
	// The credentials the providers read: OpenAI and Azure's authorization, Anthropic's
	// x-api-key, Azure's api-key.
	HeaderAuthorization
	HeaderXAPIKey
	HeaderAPIKey
	// HeaderCount is the number of headers read.
	HeaderCount
)

// ErrMalformed is a CheckRequest that is not valid protobuf.
var ErrMalformed = errors.New("malformed CheckRequest")

// Request is what a decision reads from an encoded CheckRequest, as plain values. Strings and
// the body point into the encoded message, which must not change while they are in use: a
// value that outlives the decision must be copied. The zero value is an empty request.
type Request struct {
	HTTP      bool // attributes.request.http is present
	Path      string
	Host      string
	RawBody   []byte // raw_body
	StrBody   []byte // body, the string form, used when raw_body is empty
	Size      int64
	Principal string            // attributes.source.principal
	Ext       map[string]string // context_extensions; nil when the route sends none
	// Metadata is the encoding of attributes.metadata_context (config.core.v3.Metadata), read
	// only when asked (MetadataString); nil when Envoy sends none.
	Metadata []byte
	Header   [HeaderCount]string
	Has      [HeaderCount]bool // whether the header at the same index was sent
}

// Decode reads data, an encoded CheckRequest, into w. tenantHeader and priorityHeader name
// the configured headers ("" for none). Repeated fields and map keys follow protobuf's rules:
// the last occurrence wins. Unknown fields are skipped; invalid UTF-8 is kept as it is.
// A truncated or invalid encoding is ErrMalformed, exactly where protobuf's decoder fails.
func Decode(data []byte, tenantHeader, priorityHeader string, w *Request) error {
	return eachField(data, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != fieldCheckAttributes || typ != protowire.BytesType {
			return nil
		}
		return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if typ != protowire.BytesType {
				return nil // a known field of another wire type is an unknown field, as in protobuf
			}
			switch num {
			case fieldAttrSource:
				return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
					if num == fieldPeerPrincipal && typ == protowire.BytesType {
						w.Principal = unsafeString(v)
					}
					return nil
				})
			case fieldAttrRequest:
				return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
					if num != fieldRequestHTTP || typ != protowire.BytesType {
						return nil
					}
					w.HTTP = true
					return decodeHTTP(v, tenantHeader, priorityHeader, w)
				})
			case fieldAttrMetadata:
				// Envoy sends it once; a repeated occurrence replaces it (protobuf would merge).
				w.Metadata = v
			case fieldAttrExtensions:
				k, val, err := mapEntry(v)
				if err != nil {
					return err
				}
				if w.Ext == nil {
					w.Ext = make(map[string]string, 4)
				}
				w.Ext[k] = val
			}
			return nil
		})
	})
}

// decodeHTTP reads an HttpRequest; a field absent from this occurrence of the message keeps the
// value an earlier occurrence gave it (protobuf merges repeated occurrences of a message field).
func decodeHTTP(data []byte, tenantHeader, priorityHeader string, w *Request) error {
	return eachField(data, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if typ != protowire.BytesType && num != fieldHTTPSize {
			return nil
		}
		switch num {
		case fieldHTTPHeaders:
			k, val, err := mapEntry(v)
			if err != nil {
				return err
			}
			i := -1
			switch k {
			case ":path":
				i = HeaderPath
			case ":authority":
				i = HeaderAuthority
			case "content-type":
				i = HeaderContentType
			case "content-encoding":
				i = HeaderContentEncoding
			case "content-length":
				i = HeaderContentLength
			case "x-envoy-auth-partial-body":
				i = HeaderPartial
			case "authorization":
				i = HeaderAuthorization
			case "x-api-key":
				i = HeaderXAPIKey
			case "api-key":
				i = HeaderAPIKey
			}
			// The configured headers may be any of the above too: each is looked up on its own.
			if k == tenantHeader && k != "" {
				w.Header[HeaderTenant], w.Has[HeaderTenant] = val, true
			}
			if k == priorityHeader && k != "" {
				w.Header[HeaderPriority], w.Has[HeaderPriority] = val, true
			}
			if i >= 0 {
				w.Header[i], w.Has[i] = val, true
			}
		case fieldHTTPPath:
			w.Path = unsafeString(v)
		case fieldHTTPHost:
			w.Host = unsafeString(v)
		case fieldHTTPBody:
			w.StrBody = v
		case fieldHTTPRawBody:
			w.RawBody = v
		case fieldHTTPSize:
			if typ == protowire.VarintType {
				x, _ := protowire.ConsumeVarint(v)
				w.Size = int64(x)
			}
		}
		return nil
	})
}

// Body is raw_body, or body when raw_body is empty.
func (r *Request) Body() []byte {
	if len(r.RawBody) > 0 {
		return r.RawBody
	}
	return r.StrBody
}

// mapEntry reads one map<string, string> entry.
func mapEntry(data []byte) (k, v string, err error) {
	err = eachField(data, func(num protowire.Number, typ protowire.Type, b []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldMapKey:
			k = unsafeString(b)
		case fieldMapValue:
			v = unsafeString(b)
		}
		return nil
	})
	return k, v, err
}

// eachField calls fn with every field of the message encoded in data: for length-delimited
// fields v is the payload, for other wire types the field's encoding (a group's up to its end).
// Truncated or invalid encodings are ErrMalformed; a field of an unexpected wire type is passed
// on with its type, for fn to ignore.
func eachField(data []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("%w: %v", ErrMalformed, protowire.ParseError(n))
		}
		data = data[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			b, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(m))
			}
			v, n = b, m
		default: // varints, fixed-size values and groups (skipped whole, as unknown fields)
			n = protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return fmt.Errorf("%w: field %d: %v", ErrMalformed, num, protowire.ParseError(n))
			}
			v = data[:n]
		}
		data = data[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// unsafeString views b as a string without copying; b must not change afterwards.
func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// TraceContext is the W3C trace context among data's headers (traceparent, tracestate; ""
// when absent), read in a pass of its own so that Decode, on every decision, reads no header
// for tracing; only a traced decision pays this second pass.
func TraceContext(data []byte) (parent, state string) {
	var w Request
	if Decode(data, "traceparent", "tracestate", &w) != nil {
		return "", ""
	}
	return w.Header[HeaderTenant], w.Header[HeaderPriority]
}
