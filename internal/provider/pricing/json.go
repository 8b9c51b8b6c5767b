package pricing

import (
	"bytes"
	"encoding/binary"
	"errors"
	"unicode/utf16"
	"unicode/utf8"
)

// A minimal JSON reader for pricing: one pass over the body builds a flat "tape" of nodes
// (no strings are copied or decoded), then the pricing code walks the tape and decodes only the
// strings it counts. The tape is pooled, so a parse allocates nothing in the steady state.
// It validates syntax and bounds nesting depth, so hostile bodies cost linear time and bounded
// stack. It accepts at least what the providers' parsers accept, since a body the provider reads
// but the pricer cannot is priced at an upper bound (internal/tokens/bound.go), not field by field: the
// OpenAI and Anthropic APIs are served from Python, whose json.loads (docs.python.org/3/library/
// json.html) takes NaN, Infinity and -Infinity as numbers, bytes in UTF-8 (with or without a BOM),
// UTF-16 or UTF-32 (json.detect_encoding), duplicate keys with the last one winning, and nesting
// up to the interpreter's recursion limit (1000 frames by default). Keys are compared
// case-sensitively, as Python's dicts do.

// Kind is the kind of a JSON value.
type Kind uint8

// The kinds of JSON values.
const (
	Null Kind = iota
	Bool
	Number
	String
	Array
	Object
)

// jnode is one JSON value (or object key). For strings [start, end) is the text between the
// quotes; for other values the whole value. next is the index of the node after this value's
// subtree, so siblings are reached without walking children.
type jnode struct {
	kind       Kind
	escaped    bool // string contains backslash escapes
	start, end int32
	next       int32
}

// Doc is a parsed JSON body: a tape of nodes indexed from 0 (the root), each value's index an
// int, -1 for no value (every method takes -1 and answers as for an absent value). It is
// scratch memory for one request at a time: not safe for concurrent use; reuse it to parse
// without allocating.
type Doc struct {
	src   []byte
	nodes []jnode
}

// MaxDepth bounds JSON nesting: above Python's default recursion limit (1000), so that a
// deep tool schema the provider accepts is read here too, and as deep as Go's encoding/json.
// The parser recurses once per level: 10,000 levels are about 2 MiB of goroutine stack.
const MaxDepth = 10_000

var (
	errSyntax = errors.New("invalid JSON")
	errDepth  = errors.New("JSON nested too deeply")
	errSize   = errors.New("JSON too large")
)

// Parse fills d from src. The root is node 0.
func (d *Doc) Parse(src []byte) error {
	if len(src) >= 1<<31-1 {
		return errSize
	}
	d.src = src
	d.nodes = d.nodes[:0]
	p := parser{d: d, src: src}
	i, err := p.value(p.skip(0), 0)
	if err != nil {
		return err
	}
	if p.skip(i) != len(src) {
		return errSyntax
	}
	return nil
}

type parser struct {
	d   *Doc
	src []byte
}

func (p *parser) skip(i int) int {
	for i < len(p.src) {
		switch p.src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

func (p *parser) add(n jnode) int {
	p.d.nodes = append(p.d.nodes, n)
	return len(p.d.nodes) - 1
}

// value parses the value at src[i] and returns the index after it.
func (p *parser) value(i, depth int) (int, error) {
	if i >= len(p.src) {
		return 0, errSyntax
	}
	switch c := p.src[i]; c {
	case '{', '[':
		if depth >= MaxDepth {
			return 0, errDepth
		}
		kind := Array
		if c == '{' {
			kind = Object
		}
		self := p.add(jnode{kind: kind, start: int32(i)})
		i = p.skip(i + 1)
		closer := byte(']')
		if kind == Object {
			closer = '}'
		}
		if i < len(p.src) && p.src[i] == closer {
			i++
		} else {
			for {
				var err error
				if kind == Object {
					if i >= len(p.src) || p.src[i] != '"' {
						return 0, errSyntax
					}
					if i, err = p.str(i); err != nil {
						return 0, err
					}
					i = p.skip(i)
					if i >= len(p.src) || p.src[i] != ':' {
						return 0, errSyntax
					}
					i = p.skip(i + 1)
				}
				if i, err = p.value(i, depth+1); err != nil {
					return 0, err
				}
				i = p.skip(i)
				if i >= len(p.src) {
					return 0, errSyntax
				}
				if p.src[i] == ',' {
					i = p.skip(i + 1)
					continue
				}
				if p.src[i] != closer {
					return 0, errSyntax
				}
				i++
				break
			}
		}
		n := &p.d.nodes[self]
		n.end = int32(i)
		n.next = int32(len(p.d.nodes))
		return i, nil
	case '"':
		return p.str(i)
	case 't':
		return p.lit(i, "true", Bool)
	case 'f':
		return p.lit(i, "false", Bool)
	case 'n':
		return p.lit(i, "null", Null)
	case 'N':
		return p.lit(i, "NaN", Number) // Python's json.loads accepts it (parse_constant)
	case 'I':
		return p.lit(i, "Infinity", Number)
	default:
		if c == '-' && i+1 < len(p.src) && p.src[i+1] == 'I' {
			return p.lit(i, "-Infinity", Number)
		}
		if c == '-' || (c >= '0' && c <= '9') {
			j := i + 1
			for j < len(p.src) {
				b := p.src[j]
				if (b >= '0' && b <= '9') || b == '.' || b == 'e' || b == 'E' || b == '+' || b == '-' {
					j++
					continue
				}
				break
			}
			p.add(jnode{kind: Number, start: int32(i), end: int32(j), next: int32(len(p.d.nodes) + 1)})
			return j, nil
		}
	}
	return 0, errSyntax
}

func (p *parser) lit(i int, word string, kind Kind) (int, error) {
	if len(p.src)-i < len(word) || string(p.src[i:i+len(word)]) != word {
		return 0, errSyntax
	}
	p.add(jnode{kind: kind, start: int32(i), end: int32(i + len(word)), next: int32(len(p.d.nodes) + 1)})
	return i + len(word), nil
}

// str parses the string starting at the quote src[i].
func (p *parser) str(i int) (int, error) {
	src := p.src
	escaped := false
	// String contents are most of a chat body: the closing quote and the backslashes are found
	// by bytes.IndexByte (vector instructions), and the bytes between them are checked for
	// control characters a word at a time. quote is the first quote at or after j, searched
	// again only once an escape steps past it, so each byte is scanned a bounded number of times.
	quote := -1
	for j := i + 1; ; {
		if quote < j {
			q := bytes.IndexByte(src[j:], '"')
			if q < 0 {
				return 0, errSyntax
			}
			quote = j + q
		}
		bs := bytes.IndexByte(src[j:quote], '\\')
		if bs < 0 {
			if hasControl(src[j:quote]) {
				return 0, errSyntax
			}
			p.add(jnode{kind: String, escaped: escaped, start: int32(i + 1), end: int32(quote), next: int32(len(p.d.nodes) + 1)})
			return quote + 1, nil
		}
		if hasControl(src[j : j+bs]) {
			return 0, errSyntax
		}
		// Step over the backslash and the byte it escapes (checked when the string is decoded).
		escaped = true
		j += bs + 2
		if j >= len(src) {
			return 0, errSyntax
		}
	}
}

// oneBits and highBits are 0x01 and 0x80 in every byte of a word.
const oneBits, highBits = 0x0101010101010101, 0x8080808080808080

// hasControl reports whether b has a byte below 0x20, which JSON strings must escape. A byte
// below n sets bit 7 of (x - n*ones) &^ x for some byte of a word x (exact for n <= 0x80), so
// the words' results are only OR-ed together and tested once; the last word may overlap the
// one before it.
func hasControl(b []byte) bool {
	n := len(b)
	if n < 8 {
		for _, c := range b {
			if c < 0x20 {
				return true
			}
		}
		return false
	}
	under := func(x uint64) uint64 { return (x - oneBits*0x20) &^ x }
	last := binary.LittleEndian.Uint64(b[n-8:])
	var acc uint64
	for len(b) >= 32 { // constant offsets into a slice of known length: no bounds checks
		acc |= under(binary.LittleEndian.Uint64(b[0:8])) | under(binary.LittleEndian.Uint64(b[8:16])) |
			under(binary.LittleEndian.Uint64(b[16:24])) | under(binary.LittleEndian.Uint64(b[24:32]))
		b = b[32:]
	}
	for len(b) >= 8 {
		acc |= under(binary.LittleEndian.Uint64(b[0:8]))
		b = b[8:]
	}
	return (acc|under(last))&highBits != 0
}

// Get returns the value of key in object node obj (the last one if repeated, as Python's json
// does), or -1.
func (d *Doc) Get(obj int, key string) int {
	if obj < 0 || d.nodes[obj].kind != Object {
		return -1
	}
	found := -1
	for k := obj + 1; k < int(d.nodes[obj].next); {
		v := k + 1
		if d.KeyIs(k, key) {
			found = v
		}
		k = int(d.nodes[v].next)
	}
	return found
}

// KeyIs reports whether object key k is key.
func (d *Doc) KeyIs(k int, key string) bool {
	n := d.nodes[k]
	if !n.escaped {
		return string(d.src[n.start:n.end]) == key
	}
	var buf [64]byte
	return string(d.unescape(buf[:0], k)) == key
}

// Children calls f for each element of an array, or for each (key, value) of an object (key is
// -1 for arrays), until f returns false.
func (d *Doc) Children(i int, f func(key, val int) bool) {
	if i < 0 {
		return
	}
	n := d.nodes[i]
	switch n.kind {
	case Array:
		for c := i + 1; c < int(n.next); c = int(d.nodes[c].next) {
			if !f(-1, c) {
				return
			}
		}
	case Object:
		for k := i + 1; k < int(n.next); {
			v := k + 1
			if !f(k, v) {
				return
			}
			k = int(d.nodes[v].next)
		}
	}
}

// Elems calls f for each element of array i (nothing when i is not an array).
func (d *Doc) Elems(i int, f func(val int) bool) {
	if d.Kind(i) != Array {
		return
	}
	d.Children(i, func(_, v int) bool { return f(v) })
}

// Kind is the kind of value i (Null for no value).
func (d *Doc) Kind(i int) Kind {
	if i < 0 {
		return Null
	}
	return d.nodes[i].kind
}

// End returns the index of the node after value i and its children (-1 for no value): two
// elements of one array are the last one when they end where the array does.
func (d *Doc) End(i int) int32 {
	if i < 0 {
		return -1
	}
	return d.nodes[i].next
}

// Raw returns the bytes of value i as they appear in the body; nil for i < 0 (a missing field),
// as every accessor of Doc takes it.
func (d *Doc) Raw(i int) []byte {
	if i < 0 {
		return nil
	}
	n := d.nodes[i]
	if n.kind == String {
		return d.src[n.start-1 : n.end+1]
	}
	return d.src[n.start:n.end]
}

// Text returns the decoded string value i, using buf when it has escapes. ok is false for a
// value that is not a string.
func (d *Doc) Text(buf []byte, i int) (s []byte, ok bool) {
	if i < 0 || d.nodes[i].kind != String {
		return nil, false
	}
	n := d.nodes[i]
	if !n.escaped {
		return d.src[n.start:n.end], true
	}
	return d.unescape(buf[:0], i), true
}

// TextIs reports whether value i is the string want.
func (d *Doc) TextIs(i int, want string) bool {
	var buf [64]byte
	s, ok := d.Text(buf[:0], i)
	return ok && string(s) == want
}

// Escaped reports whether string value i has backslash escapes (Text then decodes into buf).
func (d *Doc) Escaped(i int) bool { return i >= 0 && d.nodes[i].escaped }

// NonEmpty reports whether value i is an array or object with an element, or a string with a
// character.
func (d *Doc) NonEmpty(i int) bool {
	if i < 0 {
		return false
	}
	n := d.nodes[i]
	switch n.kind {
	case Array, Object:
		return n.next != int32(i+1)
	case String:
		return n.end > n.start
	}
	return false
}

// unescape appends the decoded string i to buf. Invalid escapes decode to U+FFFD.
func (d *Doc) unescape(buf []byte, i int) []byte {
	n := d.nodes[i]
	s := d.src[n.start:n.end]
	for j := 0; j < len(s); j++ {
		c := s[j]
		if c != '\\' {
			buf = append(buf, c)
			continue
		}
		j++
		if j >= len(s) {
			break
		}
		switch s[j] {
		case 'n':
			buf = append(buf, '\n')
		case 't':
			buf = append(buf, '\t')
		case 'r':
			buf = append(buf, '\r')
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'u':
			r, w := hex4(s[j+1:])
			j += w
			if utf16.IsSurrogate(r) {
				r2, w2 := rune(-1), 0
				if j+2 < len(s) && s[j+1] == '\\' && s[j+2] == 'u' {
					r2, w2 = hex4(s[j+3:])
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					r = dec
					j += 2 + w2
				} else {
					r = utf8.RuneError
				}
			}
			buf = utf8.AppendRune(buf, r)
		default: // '"', '\\', '/' and invalid escapes
			buf = append(buf, s[j])
		}
	}
	return buf
}

// hex4 decodes the 4 hex digits at s, returning U+FFFD and the digits consumed on error.
func hex4(s []byte) (rune, int) {
	if len(s) < 4 {
		return utf8.RuneError, len(s)
	}
	var r rune
	for k := 0; k < 4; k++ {
		c := s[k]
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return utf8.RuneError, k
		}
	}
	return r, 4
}

// Int returns integer value i (a JSON number with an integral value, e.g. 100 or 1e3), clamped
// to [0, 1<<40]. ok is false when the value is not a number or not integral.
func (d *Doc) Int(i int) (int64, bool) {
	if i < 0 || d.nodes[i].kind != Number {
		return 0, false
	}
	return ParseInt(d.Raw(i))
}

// ParseInt reads the JSON number s as Doc.Int does: ok only for an integral value, clamped to
// [0, 1<<40].
func ParseInt(s []byte) (int64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	neg := false
	if len(s) > 0 && s[0] == '-' {
		neg, s = true, s[1:]
	}
	var v int64
	j := 0
	for ; j < len(s) && s[j] >= '0' && s[j] <= '9'; j++ {
		if v < 1<<40 {
			v = v*10 + int64(s[j]-'0')
		}
	}
	// Accept a zero fraction and a non-negative exponent (1.0, 1e3), as Python would.
	if j < len(s) && s[j] == '.' {
		for j++; j < len(s) && s[j] == '0'; j++ {
		}
		if j < len(s) && s[j] >= '1' && s[j] <= '9' {
			return 0, false
		}
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		j++
		if j < len(s) && s[j] == '+' {
			j++
		}
		exp := 0
		for ; j < len(s) && s[j] >= '0' && s[j] <= '9'; j++ {
			exp = min(exp*10+int(s[j]-'0'), 100)
		}
		for ; exp > 0 && v < 1<<40; exp-- {
			v *= 10
		}
	}
	if j != len(s) {
		return 0, false
	}
	v = min(v, 1<<40)
	if neg {
		return 0, v == 0
	}
	return v, true
}
