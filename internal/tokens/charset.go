package tokens

import (
	"bytes"
	"encoding/binary"
	"unicode/utf16"
	"unicode/utf8"
)

// Bodies in other Unicode encodings than UTF-8, read as Python's json.loads reads bytes
// (Lib/json/__init__.py, detect_encoding): a UTF-32 or UTF-16 byte order mark, then a UTF-8
// one (dropped), then the zero bytes of the first two or four bytes, which an ASCII first
// character ("{") leaves in UTF-16 and UTF-32.

var (
	bomUTF8    = []byte{0xEF, 0xBB, 0xBF}
	bomUTF16BE = []byte{0xFE, 0xFF}
	bomUTF16LE = []byte{0xFF, 0xFE}
	bomUTF32BE = []byte{0, 0, 0xFE, 0xFF}
	bomUTF32LE = []byte{0xFF, 0xFE, 0, 0}
)

type charset uint8

const (
	utf8Text charset = iota
	utf16BE
	utf16LE
	utf32BE
	utf32LE
)

// detectCharset returns the body's encoding and the length of its byte order mark.
func detectCharset(b []byte) (charset, int) {
	switch {
	case bytes.HasPrefix(b, bomUTF32BE):
		return utf32BE, 4
	case bytes.HasPrefix(b, bomUTF32LE):
		return utf32LE, 4
	case bytes.HasPrefix(b, bomUTF16BE):
		return utf16BE, 2
	case bytes.HasPrefix(b, bomUTF16LE):
		return utf16LE, 2
	case bytes.HasPrefix(b, bomUTF8):
		return utf8Text, 3
	}
	switch {
	case len(b) >= 4 && b[0] == 0 && b[1] != 0:
		return utf16BE, 0
	case len(b) >= 4 && b[0] == 0:
		return utf32BE, 0
	case len(b) >= 4 && b[1] == 0 && (b[2] != 0 || b[3] != 0):
		return utf16LE, 0
	case len(b) >= 4 && b[1] == 0:
		return utf32LE, 0
	case len(b) == 2 && b[0] == 0:
		return utf16BE, 0
	case len(b) == 2 && b[1] == 0:
		return utf16LE, 0
	}
	return utf8Text, 0
}

// asUTF8 returns body as UTF-8 text: without its UTF-8 byte order mark, or transcoded from
// UTF-16 or UTF-32 into buf (grown and returned for reuse). The output is at most 1.5 times
// the input (a UTF-16 unit becomes at most 3 bytes); an odd trailing byte is dropped, and
// unpaired surrogates and values beyond U+10FFFF become U+FFFD.
func asUTF8(body, buf []byte) (text, grown []byte) {
	cs, bom := detectCharset(body)
	body = body[bom:]
	if cs == utf8Text {
		return body, buf
	}
	out := buf[:0]
	switch cs {
	case utf16BE, utf16LE:
		order := binary.ByteOrder(binary.BigEndian)
		if cs == utf16LE {
			order = binary.LittleEndian
		}
		for i := 0; i+1 < len(body); i += 2 {
			r := rune(order.Uint16(body[i:]))
			if utf16.IsSurrogate(r) && i+3 < len(body) {
				if dec := utf16.DecodeRune(r, rune(order.Uint16(body[i+2:]))); dec != utf8.RuneError {
					out = utf8.AppendRune(out, dec)
					i += 2
					continue
				}
			}
			out = utf8.AppendRune(out, r) // a lone surrogate appends U+FFFD
		}
	default:
		order := binary.ByteOrder(binary.BigEndian)
		if cs == utf32LE {
			order = binary.LittleEndian
		}
		for i := 0; i+3 < len(body); i += 4 {
			out = utf8.AppendRune(out, rune(order.Uint32(body[i:])))
		}
	}
	return out, out
}
