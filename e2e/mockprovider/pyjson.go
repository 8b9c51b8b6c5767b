package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// The providers' APIs are Python services: they read a request body with json.loads
// (docs.python.org/3/library/json.html), which is not what Go's encoding/json accepts. The mock
// reads bodies as Python does, so that a body the limiter must price is one the provider
// really reads:
//
//   - bytes in UTF-8 with or without a BOM, UTF-16 or UTF-32, told apart as
//     json.detect_encoding does (a BOM, else the zero bytes around an ASCII first character);
//   - NaN, Infinity and -Infinity as numbers;
//   - nesting up to the interpreter's recursion limit (1000 by default): deeper is an error;
//   - duplicate keys: the last one wins; keys are case-sensitive (Go's encoding/json would
//     match "MAX_TOKENS" to max_tokens).
//
// pythonJSON returns the document re-encoded as plain JSON that Go reads the same way: NaN and
// the infinities become the strings "NaN", "Infinity", "-Infinity" (so that an integer field
// given one is an error, as the providers' validation answers), and keys with any byte other
// than lowercase ASCII are dropped, since none of the keys the mock reads has one and Go's
// case-folding must not match them.

// pyMaxDepth is Python's default recursion limit.
const pyMaxDepth = 1000

var errPyDepth = errors.New("json: maximum recursion depth exceeded")

func pythonJSON(body []byte) ([]byte, error) {
	text, err := pyDecodeBytes(body)
	if err != nil {
		return nil, err
	}
	d := pyDecoder{s: text}
	d.ws()
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	d.ws()
	if d.i != len(d.s) {
		return nil, fmt.Errorf("json: extra data at byte %d", d.i)
	}
	return json.Marshal(v)
}

// pyDecodeBytes is json.loads' bytes.decode(detect_encoding(b), 'surrogatepass').
func pyDecodeBytes(b []byte) ([]byte, error) {
	has := func(p ...byte) bool { return bytes.HasPrefix(b, p) }
	switch {
	case has(0, 0, 0xFE, 0xFF):
		return utf32(b[4:], binary.BigEndian)
	case has(0xFF, 0xFE, 0, 0):
		return utf32(b[4:], binary.LittleEndian)
	case has(0xFE, 0xFF):
		return utf16To8(b[2:], binary.BigEndian)
	case has(0xFF, 0xFE):
		return utf16To8(b[2:], binary.LittleEndian)
	case has(0xEF, 0xBB, 0xBF):
		return b[3:], nil
	}
	if len(b) >= 4 {
		switch {
		case b[0] == 0 && b[1] != 0:
			return utf16To8(b, binary.BigEndian)
		case b[0] == 0:
			return utf32(b, binary.BigEndian)
		case b[1] == 0 && (b[2] != 0 || b[3] != 0):
			return utf16To8(b, binary.LittleEndian)
		case b[1] == 0:
			return utf32(b, binary.LittleEndian)
		}
	} else if len(b) == 2 {
		switch {
		case b[0] == 0:
			return utf16To8(b, binary.BigEndian)
		case b[1] == 0:
			return utf16To8(b, binary.LittleEndian)
		}
	}
	return b, nil
}

func utf16To8(b []byte, order binary.ByteOrder) ([]byte, error) {
	if len(b)%2 != 0 {
		return nil, errors.New("json: utf-16: truncated data")
	}
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = order.Uint16(b[2*i:])
	}
	var out []byte
	for _, r := range utf16.Decode(u) {
		out = utf8.AppendRune(out, r)
	}
	return out, nil
}

func utf32(b []byte, order binary.ByteOrder) ([]byte, error) {
	if len(b)%4 != 0 {
		return nil, errors.New("json: utf-32: truncated data")
	}
	var out []byte
	for i := 0; i < len(b); i += 4 {
		r := order.Uint32(b[i:])
		if r > utf8.MaxRune {
			return nil, errors.New("json: utf-32: code point not in range")
		}
		out = utf8.AppendRune(out, rune(r))
	}
	return out, nil
}

type pyDecoder struct {
	s []byte
	i int
}

func (d *pyDecoder) ws() {
	for d.i < len(d.s) && (d.s[d.i] == ' ' || d.s[d.i] == '\t' || d.s[d.i] == '\n' || d.s[d.i] == '\r') {
		d.i++
	}
}

func (d *pyDecoder) lit(word string) bool {
	if bytes.HasPrefix(d.s[d.i:], []byte(word)) {
		d.i += len(word)
		return true
	}
	return false
}

func (d *pyDecoder) errorf(what string) error {
	return fmt.Errorf("json: %s at byte %d", what, d.i)
}

func (d *pyDecoder) value(depth int) (any, error) {
	if d.i >= len(d.s) {
		return nil, d.errorf("expecting value")
	}
	switch c := d.s[d.i]; {
	case c == '{' || c == '[':
		if depth+1 >= pyMaxDepth { // the root is depth 0
			return nil, errPyDepth
		}
		if c == '{' {
			return d.object(depth)
		}
		return d.array(depth)
	case c == '"':
		return d.str()
	case d.lit("true"):
		return true, nil
	case d.lit("false"):
		return false, nil
	case d.lit("null"):
		return nil, nil
	case d.lit("NaN"):
		return "NaN", nil
	case d.lit("Infinity"):
		return "Infinity", nil
	case d.lit("-Infinity"):
		return "-Infinity", nil
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	}
	return nil, d.errorf("expecting value")
}

func (d *pyDecoder) object(depth int) (any, error) {
	d.i++ // {
	m := map[string]any{}
	d.ws()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return m, nil
	}
	for {
		d.ws()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			return nil, d.errorf("expecting property name enclosed in double quotes")
		}
		k, err := d.str()
		if err != nil {
			return nil, err
		}
		d.ws()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return nil, d.errorf("expecting ':' delimiter")
		}
		d.i++
		d.ws()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		if lowerASCII(k) {
			m[k] = v // the last duplicate wins, as in a Python dict
		}
		d.ws()
		if d.i < len(d.s) && d.s[d.i] == ',' {
			d.i++
			continue
		}
		if d.i < len(d.s) && d.s[d.i] == '}' {
			d.i++
			return m, nil
		}
		return nil, d.errorf("expecting ',' delimiter")
	}
}

func (d *pyDecoder) array(depth int) (any, error) {
	d.i++ // [
	a := []any{}
	d.ws()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return a, nil
	}
	for {
		d.ws()
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		d.ws()
		if d.i < len(d.s) && d.s[d.i] == ',' {
			d.i++
			continue
		}
		if d.i < len(d.s) && d.s[d.i] == ']' {
			d.i++
			return a, nil
		}
		return nil, d.errorf("expecting ',' delimiter")
	}
}

// str reads a string with its escapes; Go's decoder of one string token applies JSON's
// escapes and rejects raw control characters, as Python's strict mode does.
func (d *pyDecoder) str() (string, error) {
	start := d.i
	for j := d.i + 1; j < len(d.s); j++ {
		switch d.s[j] {
		case '\\':
			j++
		case '"':
			var s string
			if err := json.Unmarshal(d.s[start:j+1], &s); err != nil {
				return "", d.errorf("invalid string")
			}
			d.i = j + 1
			return s, nil
		}
	}
	return "", d.errorf("unterminated string")
}

func (d *pyDecoder) number() (any, error) {
	start := d.i
	for d.i < len(d.s) {
		c := d.s[d.i]
		if (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			d.i++
			continue
		}
		break
	}
	n := json.Number(d.s[start:d.i])
	if !json.Valid([]byte(n)) {
		return nil, d.errorf("invalid number")
	}
	return n, nil
}

func lowerASCII(k string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c >= 0x80 || (c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
