package filter

import (
	"errors"
	"fmt"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// The CheckRequest is read straight from its protobuf encoding: a decision needs a handful of
// its fields, while decoding the whole message builds a map of every header and copies every
// string and the body (two fifths of the service's CPU per decision before this reader). Field
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

// The headers a decision reads, by index in wireRequest.hdr.
const (
	hdrPath = iota
	hdrAuthority
	hdrContentType
	hdrContentEncoding
	hdrContentLength
	hdrPartial
	hdrTenant
	hdrPriority
	// The credentials the providers read (OpenAI and Azure's authorization, Anthropic's x-api-key,
	// Azure's api-key): only hashed, to tell the operator's own from a client's (ownCredential).
	hdrAuthorization
	hdrXAPIKey
	hdrAPIKey
	hdrCount
)

// errMalformed is a CheckRequest that is not valid protobuf.
var errMalformed = errors.New("malformed CheckRequest")

// wireRequest is what a decision reads from an encoded CheckRequest. Strings and the body point
// into the encoded message, which must not change while they are in use; what outlives the
// decision is copied by parse.
type wireRequest struct {
	http      bool // attributes.request.http is present
	path      string
	host      string
	rawBody   []byte // raw_body
	strBody   []byte // body, the string form, used when raw_body is empty
	size      int64
	principal string
	ext       map[string]string // nil when the route sends none
	hdr       [hdrCount]string
	has       [hdrCount]bool
}

// decodeCheck reads data, an encoded CheckRequest, into w. tenantHeader and priorityHeader
// name the configured headers ("" for none). Repeated fields and map keys follow protobuf's
// rules: the last occurrence wins. Unknown fields are skipped; invalid UTF-8 is kept as it is.
func decodeCheck(data []byte, tenantHeader, priorityHeader string, w *wireRequest) error {
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
						w.principal = unsafeString(v)
					}
					return nil
				})
			case fieldAttrRequest:
				return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
					if num != fieldRequestHTTP || typ != protowire.BytesType {
						return nil
					}
					w.http = true
					return decodeHTTP(v, tenantHeader, priorityHeader, w)
				})
			case fieldAttrExtensions:
				k, val, err := mapEntry(v)
				if err != nil {
					return err
				}
				if w.ext == nil {
					w.ext = make(map[string]string, 4)
				}
				w.ext[k] = val
			}
			return nil
		})
	})
}

// decodeHTTP reads an HttpRequest; a field absent from this occurrence of the message keeps the
// value an earlier occurrence gave it (protobuf merges repeated occurrences of a message field).
func decodeHTTP(data []byte, tenantHeader, priorityHeader string, w *wireRequest) error {
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
				i = hdrPath
			case ":authority":
				i = hdrAuthority
			case "content-type":
				i = hdrContentType
			case "content-encoding":
				i = hdrContentEncoding
			case "content-length":
				i = hdrContentLength
			case "x-envoy-auth-partial-body":
				i = hdrPartial
			case "authorization":
				i = hdrAuthorization
			case "x-api-key":
				i = hdrXAPIKey
			case "api-key":
				i = hdrAPIKey
			}
			// The configured headers may be any of the above too: each is looked up on its own.
			if k == tenantHeader && k != "" {
				w.hdr[hdrTenant], w.has[hdrTenant] = val, true
			}
			if k == priorityHeader && k != "" {
				w.hdr[hdrPriority], w.has[hdrPriority] = val, true
			}
			if i >= 0 {
				w.hdr[i], w.has[i] = val, true
			}
		case fieldHTTPPath:
			w.path = unsafeString(v)
		case fieldHTTPHost:
			w.host = unsafeString(v)
		case fieldHTTPBody:
			w.strBody = v
		case fieldHTTPRawBody:
			w.rawBody = v
		case fieldHTTPSize:
			if typ == protowire.VarintType {
				x, _ := protowire.ConsumeVarint(v)
				w.size = int64(x)
			}
		}
		return nil
	})
}

// body is raw_body, or body when raw_body is empty.
func (w *wireRequest) body() []byte {
	if len(w.rawBody) > 0 {
		return w.rawBody
	}
	return w.strBody
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
// Truncated or invalid encodings are errMalformed; a field of an unexpected wire type is passed
// on with its type, for fn to ignore.
func eachField(data []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) error) error {
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return fmt.Errorf("%w: %v", errMalformed, protowire.ParseError(n))
		}
		data = data[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			b, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return fmt.Errorf("%w: field %d: %v", errMalformed, num, protowire.ParseError(m))
			}
			v, n = b, m
		default: // varints, fixed-size values and groups (skipped whole, as unknown fields)
			n = protowire.ConsumeFieldValue(num, typ, data)
			if n < 0 {
				return fmt.Errorf("%w: field %d: %v", errMalformed, num, protowire.ParseError(n))
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
