package main

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf16"
)

func enc16(s string, order binary.AppendByteOrder, bom bool) []byte {
	var b []byte
	if bom {
		b = order.AppendUint16(b, 0xFEFF)
	}
	for _, u := range utf16.Encode([]rune(s)) {
		b = order.AppendUint16(b, u)
	}
	return b
}

func enc32(s string, order binary.AppendByteOrder) []byte {
	b := order.AppendUint32(nil, 0xFEFF)
	for _, r := range s {
		b = order.AppendUint32(b, uint32(r))
	}
	return b
}

// TestPythonJSON holds the mock's reader to what Python's json.loads does with each input.
func TestPythonJSON(t *testing.T) {
	t.Parallel()
	const doc = `{"a":[1,"é"]}`
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	tests := []struct {
		in   []byte
		want string // "" when Python raises
	}{
		{[]byte(doc), `{"a":[1,"é"]}`},
		{append([]byte{0xEF, 0xBB, 0xBF}, doc...), `{"a":[1,"é"]}`},
		{enc16(doc, binary.LittleEndian, true), `{"a":[1,"é"]}`},
		{enc16(doc, binary.BigEndian, true), `{"a":[1,"é"]}`},
		{enc16(doc, binary.LittleEndian, false), `{"a":[1,"é"]}`},
		{enc16(doc, binary.BigEndian, false), `{"a":[1,"é"]}`},
		{enc32(doc, binary.LittleEndian), `{"a":[1,"é"]}`},
		{enc32(doc, binary.BigEndian), `{"a":[1,"é"]}`},
		{enc16(doc, binary.LittleEndian, true)[:5], ""}, // truncated
		{[]byte(`{"x":NaN,"y":Infinity,"z":-Infinity}`), `{"x":"NaN","y":"Infinity","z":"-Infinity"}`},
		{[]byte(`{"k":1,"k":2}`), `{"k":2}`},
		{[]byte(`{"MAX_TOKENS":1,"Model":"x","max_toKens":3,"ok":1}`), `{"ok":1}`}, // U+212A KELVIN SIGN
		{[]byte(nest(999)), nest(999)},
		{[]byte(nest(1000)), ""},
		{[]byte(`{"a":1,}`), ""},
		{[]byte(`[1,]`), ""},
		{[]byte(`{'a':1}`), ""},
		{[]byte(`{"a":1} // c`), ""},
		{[]byte("{\"a\":\"\x01\"}"), ""},
		{[]byte(`{"a":"\ud800"}`), "{\"a\":\"\uFFFD\"}"},
		{[]byte(` {"a" : 1 } `), `{"a":1}`},
		{[]byte(`{"a":01}`), ""},
		{[]byte(`{"a":nan}`), ""},
		{[]byte(``), ""},
	}
	for _, tt := range tests {
		got, err := pythonJSON(tt.in)
		if tt.want == "" {
			if err == nil {
				t.Errorf("%q: got %s, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || string(got) != tt.want {
			t.Errorf("%q: got %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// The mock prices what the provider reads: a BOM, UTF-16, NaN in a field it ignores and a
// 70-level tool schema are read; a key in capitals is not max_tokens.
func TestPriceReadsAsPython(t *testing.T) {
	t.Parallel()
	const chat = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"temperature":NaN,"max_tokens":16000}`
	schema := strings.Repeat(`{"type":"object","properties":{"x":`, 70) + `{}` + strings.Repeat(`}}`, 70)
	for _, body := range [][]byte{
		[]byte(chat),
		append([]byte{0xEF, 0xBB, 0xBF}, chat...),
		enc16(chat, binary.LittleEndian, true),
		[]byte(strings.Replace(chat, `"max_tokens"`, `"tools":[{"type":"function","function":{"name":"f","parameters":`+schema+`}}],"max_tokens"`, 1)),
	} {
		p, err := testPricer.Price("/v1/chat/completions", body)
		if err != nil || p.Output != 16000 || p.Prompt != 8 {
			t.Errorf("%.40q: %+v, %v", body, p, err)
		}
	}
	p, err := testPricer.Price("/v1/chat/completions", []byte(`{"model":"gpt-4o","messages":[],"MAX_TOKENS":5}`))
	if err != nil || p.Output != 4096 {
		t.Errorf("MAX_TOKENS: %+v, %v", p, err)
	}
	if _, err := testPricer.Price("/v1/chat/completions", []byte(`{"model":"gpt-4o","messages":[],"max_tokens":NaN}`)); err == nil {
		t.Error("max_tokens NaN accepted")
	}
}
