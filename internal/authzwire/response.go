package authzwire

import (
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// The answers are encoded by hand: they use a handful of fields of a handful of messages, and
// protobuf's reflection-driven encoder spent more on them (sizing, then walking the metadata
// map twice) than the decision itself, apart from pricing. Field numbers are those of
// external_auth.proto, base.proto, http_status.proto, status.proto and struct.proto.
const (
	fieldRespStatus   = 1 // CheckResponse.status (google.rpc.Status)
	fieldRespDenied   = 2 // CheckResponse.denied_response
	fieldRespOK       = 3 // CheckResponse.ok_response
	fieldRespMetadata = 4 // CheckResponse.dynamic_metadata

	fieldStatusCode = 1 // google.rpc.Status.code, envoy.type.v3.HttpStatus.code

	fieldDeniedStatus  = 1 // DeniedHttpResponse.status
	fieldDeniedHeaders = 2 // DeniedHttpResponse.headers
	fieldDeniedBody    = 3 // DeniedHttpResponse.body

	fieldOKResponseHeaders = 6 // OkHttpResponse.response_headers_to_add

	fieldOptionHeader = 1 // HeaderValueOption.header
	fieldOptionAction = 3 // HeaderValueOption.append_action
	fieldHeaderKey    = 1 // HeaderValue.key
	fieldHeaderValue  = 2 // HeaderValue.value

	fieldStructFields = 1 // Struct.fields (map<string, Value>)
	fieldValueNumber  = 2 // Value.number_value
	fieldValueString  = 3 // Value.string_value
	fieldValueBool    = 4 // Value.bool_value
	fieldValueList    = 6 // Value.list_value
	fieldListValues   = 1 // ListValue.values
)

// AppendResponse appends the protobuf encoding of resp to b, its dynamic metadata being md (the
// encoding of a Struct's fields, written with the Append*Field functions; resp.DynamicMetadata is
// ignored), growing b once, by exactly the encoding's size. It writes the fields the service's
// answers use (answers are built, never decoded: they carry no unknown fields); when resp sets
// any other field, or holds a string that is not valid UTF-8 (which protobuf refuses to encode),
// it returns b unchanged and false, and the caller encodes the message with proto.Marshal
// instead. Both encodings decode to the same message (TestAppendResponse;
// TestAppendResponseKnowsEveryField keeps the list of fields current). Safe for concurrent use.
func AppendResponse(b []byte, resp *authv3.CheckResponse, md []byte) ([]byte, bool) {
	var st, denied, ok int
	var supported bool
	if st, supported = statusSize(resp); !supported {
		return b, false
	}
	switch hr := resp.HttpResponse.(type) {
	case nil:
	case *authv3.CheckResponse_DeniedResponse:
		if denied, supported = deniedSize(hr.DeniedResponse); !supported {
			return b, false
		}
	case *authv3.CheckResponse_OkResponse:
		if ok, supported = okSize(hr.OkResponse); !supported {
			return b, false
		}
	default:
		return b, false
	}

	total := lenSize(fieldRespMetadata, len(md))
	if resp.Status != nil {
		total += lenSize(fieldRespStatus, st)
	}
	switch resp.HttpResponse.(type) {
	case *authv3.CheckResponse_DeniedResponse:
		total += lenSize(fieldRespDenied, denied)
	case *authv3.CheckResponse_OkResponse:
		total += lenSize(fieldRespOK, ok)
	}
	b = slices.Grow(b, total)

	if resp.Status != nil {
		b = appendLen(b, fieldRespStatus, st)
		b = appendCode(b, resp.Status.Code)
	}
	switch hr := resp.HttpResponse.(type) {
	case *authv3.CheckResponse_DeniedResponse:
		d := hr.DeniedResponse
		b = appendLen(b, fieldRespDenied, denied)
		if d.Status != nil {
			b = appendLen(b, fieldDeniedStatus, codeSize(int32(d.Status.Code)))
			b = appendCode(b, int32(d.Status.Code))
		}
		for _, h := range d.Headers {
			b = appendOption(b, fieldDeniedHeaders, h)
		}
		if d.Body != "" {
			b = appendTag(b, fieldDeniedBody, protowire.BytesType)
			b = appendString(b, d.Body)
		}
	case *authv3.CheckResponse_OkResponse:
		b = appendLen(b, fieldRespOK, ok)
		for _, h := range hr.OkResponse.ResponseHeadersToAdd {
			b = appendOption(b, fieldOKResponseHeaders, h)
		}
	}
	b = appendLen(b, fieldRespMetadata, len(md))
	return append(b, md...), true
}

func appendLen(b []byte, num protowire.Number, n int) []byte {
	b = appendTag(b, num, protowire.BytesType)
	return appendVarint(b, uint64(n))
}

// lenSize is the size of a length-delimited field of n bytes.
func lenSize(num protowire.Number, n int) int {
	return tagSize + varintSize(uint64(n)) + n
}

// codeSize is the size of a Status or HttpStatus holding code (an int32 or enum field 1).
func codeSize(code int32) int {
	if code == 0 {
		return 0
	}
	return tagSize + varintSize(uint64(int64(code)))
}

func appendCode(b []byte, code int32) []byte {
	if code == 0 {
		return b
	}
	b = appendTag(b, fieldStatusCode, protowire.VarintType)
	return appendVarint(b, uint64(int64(code)))
}

func statusSize(resp *authv3.CheckResponse) (int, bool) {
	s := resp.Status
	if s == nil {
		return 0, true
	}
	if s.Message != "" || len(s.Details) > 0 {
		return 0, false
	}
	return codeSize(s.Code), true
}

func deniedSize(d *authv3.DeniedHttpResponse) (int, bool) {
	if d == nil {
		return 0, false
	}
	n := 0
	if d.Status != nil {
		n += lenSize(fieldDeniedStatus, codeSize(int32(d.Status.Code)))
	}
	for _, h := range d.Headers {
		if !validOption(h) {
			return 0, false
		}
		n += lenSize(fieldDeniedHeaders, optionSize(h))
	}
	if d.Body != "" {
		if !utf8.ValidString(d.Body) {
			return 0, false
		}
		n += lenSize(fieldDeniedBody, len(d.Body))
	}
	return n, true
}

func okSize(o *authv3.OkHttpResponse) (int, bool) {
	if o == nil || len(o.Headers) > 0 || len(o.HeadersToRemove) > 0 || o.DynamicMetadata != nil ||
		len(o.QueryParametersToSet) > 0 || len(o.QueryParametersToRemove) > 0 {
		return 0, false
	}
	n := 0
	for _, h := range o.ResponseHeadersToAdd {
		if !validOption(h) {
			return 0, false
		}
		n += lenSize(fieldOKResponseHeaders, optionSize(h))
	}
	return n, true
}

// validOption reports whether h holds only a header (key and value, valid UTF-8) and an append
// action: what appendOption writes.
func validOption(h *corev3.HeaderValueOption) bool {
	if h == nil || h.Append != nil || h.KeepEmptyValue {
		return false
	}
	hv := h.Header
	return hv == nil || (len(hv.RawValue) == 0 && utf8.ValidString(hv.Key) && utf8.ValidString(hv.Value))
}

// optionSize is the size of a HeaderValueOption that validOption accepted.
func optionSize(h *corev3.HeaderValueOption) int {
	n := 0
	if hv := h.Header; hv != nil {
		n += lenSize(fieldOptionHeader, headerSize(hv))
	}
	if h.AppendAction != 0 {
		n += tagSize + varintSize(uint64(h.AppendAction))
	}
	return n
}

func headerSize(hv *corev3.HeaderValue) int {
	n := 0
	if hv.Key != "" {
		n += lenSize(fieldHeaderKey, len(hv.Key))
	}
	if hv.Value != "" {
		n += lenSize(fieldHeaderValue, len(hv.Value))
	}
	return n
}

func appendOption(b []byte, num protowire.Number, h *corev3.HeaderValueOption) []byte {
	b = appendLen(b, num, optionSize(h))
	if hv := h.Header; hv != nil {
		b = appendLen(b, fieldOptionHeader, headerSize(hv))
		if hv.Key != "" {
			b = appendTag(b, fieldHeaderKey, protowire.BytesType)
			b = appendString(b, hv.Key)
		}
		if hv.Value != "" {
			b = appendTag(b, fieldHeaderValue, protowire.BytesType)
			b = appendString(b, hv.Value)
		}
	}
	if h.AppendAction != 0 {
		b = appendTag(b, fieldOptionAction, protowire.VarintType)
		b = appendVarint(b, uint64(h.AppendAction))
	}
	return b
}

// A CheckResponse's dynamic metadata is a Struct: its fields are map entries of a key and a
// Value, here a string, number, bool or list of strings. The Append*Field functions append one
// entry each; they take and return the buffer, so that a buffer on the caller's stack stays
// there. Every string is made valid UTF-8, as protobuf requires.

// appendEntry starts the map entry of key k whose Value is vs bytes.
func appendEntry(b []byte, k string, vs int) []byte {
	b = appendLen(b, fieldStructFields, lenSize(fieldMapKey, len(k))+lenSize(fieldMapValue, vs))
	b = appendTag(b, fieldMapKey, protowire.BytesType)
	b = appendString(b, k)
	return appendLen(b, fieldMapValue, vs)
}

// AppendStringField appends the Struct field k holding the string v.
func AppendStringField(b []byte, k, v string) []byte {
	v = validUTF8(v)
	b = appendEntry(b, k, lenSize(fieldValueString, len(v)))
	b = appendTag(b, fieldValueString, protowire.BytesType)
	return appendString(b, v)
}

// AppendASCIIField appends the Struct field k holding v, printable ASCII given as bytes (not
// checked).
func AppendASCIIField(b []byte, k string, v []byte) []byte {
	b = appendEntry(b, k, lenSize(fieldValueString, len(v)))
	b = appendTag(b, fieldValueString, protowire.BytesType)
	b = appendVarint(b, uint64(len(v)))
	return append(b, v...)
}

// AppendNumberField appends the Struct field k holding the number v.
func AppendNumberField(b []byte, k string, v float64) []byte {
	b = appendEntry(b, k, tagSize+8)
	b = appendTag(b, fieldValueNumber, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, math.Float64bits(v))
}

// AppendBoolField appends the Struct field k holding v.
func AppendBoolField(b []byte, k string, v bool) []byte {
	b = appendEntry(b, k, tagSize+1)
	b = appendTag(b, fieldValueBool, protowire.VarintType)
	return appendVarint(b, protowire.EncodeBool(v))
}

// AppendListField appends the Struct field k holding the list of the strings vs.
func AppendListField(b []byte, k string, vs []string) []byte {
	list := 0
	for _, v := range vs {
		list += lenSize(fieldListValues, lenSize(fieldValueString, len(validUTF8(v))))
	}
	b = appendEntry(b, k, lenSize(fieldValueList, list))
	b = appendLen(b, fieldValueList, list)
	for _, v := range vs {
		v = validUTF8(v)
		b = appendLen(b, fieldListValues, lenSize(fieldValueString, len(v)))
		b = appendTag(b, fieldValueString, protowire.BytesType)
		b = appendString(b, v)
	}
	return b
}

// validUTF8 is s with invalid UTF-8 replaced: the strings may carry a client's bytes.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// Every field number above is below 16, so every tag is one byte; most lengths and codes are
// below 128, one byte too. These helpers write and size those without protowire's general
// varint code, which was a third of the encoder's time.
const tagSize = 1

func appendTag(b []byte, num protowire.Number, typ protowire.Type) []byte {
	return append(b, byte(num)<<3|byte(typ))
}

func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

func varintSize(v uint64) int {
	if v < 0x80 {
		return 1
	}
	return protowire.SizeVarint(v)
}

func appendString(b []byte, s string) []byte {
	return append(appendVarint(b, uint64(len(s))), s...)
}
