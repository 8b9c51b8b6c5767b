package authzwire

import (
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of config.core.v3.Metadata and google.protobuf.Value (Struct's are with the
// response's).
const (
	fieldAttrMetadata = 11 // AttributeContext.metadata_context (config.core.v3.Metadata)

	fieldMetadataFilter = 1 // Metadata.filter_metadata (map<string, Struct>)

	fieldValueStruct = 5 // Value.struct_value
)

// MetadataString returns the value at path in the metadata_context namespace ns, field field:
// filter_metadata[ns].fields[field], then each key of path down nested Structs. A string is
// returned as it is (pointing into the encoding), a number as its shortest decimal (an integer
// without a fraction); anything else, a missing key or a malformed encoding is not found. It
// allocates nothing but a number's text. As in protobuf, the last occurrence of a map key wins.
func (r *Request) MetadataString(ns, field string, path []string) (string, bool) {
	if len(r.Metadata) == 0 {
		return "", false
	}
	st, ok := mapValue(r.Metadata, fieldMetadataFilter, ns)
	if !ok {
		return "", false
	}
	v, ok := mapValue(st, fieldStructFields, field)
	if !ok {
		return "", false
	}
	for _, k := range path {
		st, ok = valueField(v, fieldValueStruct)
		if !ok {
			return "", false
		}
		if v, ok = mapValue(st, fieldStructFields, k); !ok {
			return "", false
		}
	}
	return valueString(v)
}

// mapValue returns the encoded value of key in the map field num of the message msg.
func mapValue(msg []byte, num protowire.Number, key string) ([]byte, bool) {
	var out []byte
	found := false
	err := eachField(msg, func(n protowire.Number, typ protowire.Type, v []byte) error {
		if n != num || typ != protowire.BytesType {
			return nil
		}
		var k string
		var val []byte
		hasVal := false
		if err := eachField(v, func(n protowire.Number, typ protowire.Type, b []byte) error {
			if typ != protowire.BytesType {
				return nil
			}
			switch n {
			case fieldMapKey:
				k = unsafeString(b)
			case fieldMapValue:
				val, hasVal = b, true
			}
			return nil
		}); err != nil {
			return err
		}
		if k == key {
			out, found = val, true
			if !hasVal {
				out = nil
			}
		}
		return nil
	})
	return out, found && err == nil
}

// valueField returns the length-delimited field num of an encoded Value, when it is its kind.
func valueField(v []byte, num protowire.Number) ([]byte, bool) {
	var out []byte
	found := false
	err := eachField(v, func(n protowire.Number, typ protowire.Type, b []byte) error {
		// A oneof: the last field of the kinds set wins.
		if n >= 1 && n <= 6 {
			found = n == num && typ == protowire.BytesType
			out = b
		}
		return nil
	})
	return out, found && err == nil
}

// valueString reads an encoded Value as a string or a number.
func valueString(v []byte) (string, bool) {
	var kind protowire.Number
	var s string
	var f float64
	err := eachField(v, func(n protowire.Number, typ protowire.Type, b []byte) error {
		if n < 1 || n > 6 {
			return nil
		}
		kind = n
		switch {
		case n == fieldValueString && typ == protowire.BytesType:
			s = unsafeString(b)
		case n == fieldValueNumber && typ == protowire.Fixed64Type:
			x, _ := protowire.ConsumeFixed64(b)
			f = math.Float64frombits(x)
		default:
			kind = 0
		}
		return nil
	})
	if err != nil {
		return "", false
	}
	switch kind {
	case fieldValueString:
		return s, true
	case fieldValueNumber:
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "", false
		}
		return strconv.FormatFloat(f, 'f', -1, 64), true
	}
	return "", false
}
