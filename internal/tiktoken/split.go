package tiktoken

import (
	"encoding/binary"
	"math/bits"
	"unicode/utf8"
)

// The split ("pre-tokenisation") patterns, reproduced by hand-written scanners. Each scanner
// returns the end of the piece starting at t[i] (i < len(t)); the piece is always non-empty, so a
// whole text is split in one forward pass. The scanners never backtrack more than one code point
// and look at each byte a bounded number of times (at most three), so splitting is linear.
//
// The patterns are those of tiktoken 0.14.0 (tiktoken_ext/openai_public.py):
//
// cl100k_base:
//
//	'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s
//
// o200k_base:
//
//	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//	|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// Alternatives are tried in order and the first that matches wins (leftmost-first), as in the
// reference engine. The character classes come from unicode_tables.go (Unicode 16.0, generated
// from tiktoken's own engine).

// splitFunc returns the end of the piece that starts at t[i].
type splitFunc func(ct *classTable, t []byte, i int) int

// contraction returns the length of a contraction suffix ('s 't 're 've 'm 'll 'd,
// case-insensitive) at t[i:], or 0. Under Unicode simple case folding "s" also matches U+017F
// (LATIN SMALL LETTER LONG S, UTF-8 C5 BF); no other folding applies to these letters.
func contraction(t []byte, i int) int {
	if i+1 >= len(t) || t[i] != '\'' {
		return 0
	}
	switch t[i+1] | 0x20 {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v':
		if i+2 < len(t) && t[i+2]|0x20 == 'e' {
			return 3
		}
	case 'l':
		if i+2 < len(t) && t[i+2]|0x20 == 'l' {
			return 3
		}
	}
	if t[i+1] == 0xC5 && i+2 < len(t) && t[i+2] == 0xBF {
		return 3
	}
	return 0
}

// spaceRun scans the whitespace run starting at t[i] (a whitespace code point). It returns the
// run's end, the start of its last code point, and the end of its last \r or \n (-1 if none).
func spaceRun(ct *classTable, t []byte, i int) (end, last, nlEnd int) {
	nlEnd = -1
	for end = i; end < len(t); {
		c, _, n := ct.at(t, end)
		if c&clsSpace == 0 {
			break
		}
		if c&clsNewline != 0 {
			nlEnd = end + n
		}
		last = end
		end += n
	}
	return end, last, nlEnd
}

// symbolRun returns the end of the run of [^\s\p{L}\p{N}] starting at t[i].
func symbolRun(ct *classTable, t []byte, i int) int {
	for i < len(t) {
		c, _, n := ct.at(t, i)
		if c&clsWord != 0 {
			break
		}
		i += n
	}
	return i
}

// run returns the end of the run of code points having any of the bits in cls.
func run(ct *classTable, t []byte, i int, cls uint8) int {
	for i < len(t) {
		if b := t[i]; b < utf8.RuneSelf { // ASCII inline: ct.at is a call
			if asciiClass[b]&cls == 0 {
				break
			}
			i++
			continue
		}
		c, _, n := ct.at(t, i)
		if c&cls == 0 {
			break
		}
		i += n
	}
	return i
}

// numbers returns the end of \p{N}{1,3} at t[i] (t[i] is a number).
func numbers(ct *classTable, t []byte, i int) int {
	for k := 0; k < 3 && i < len(t); k++ {
		c, _, n := ct.at(t, i)
		if c&clsNumber == 0 {
			break
		}
		i += n
	}
	return i
}

func splitCL100K(ct *classTable, t []byte, i int) int {
	if e := asciiLetters(t, i); e > 0 {
		return e
	}
	if e := asciiSymbols(t, i, false); e > 0 {
		return e
	}
	return splitCL100KGeneral(ct, t, i)
}

// asciiLetters is the common case of splitCL100K, decided from ASCII bytes alone: an optional
// space and a run of ASCII letters, ended by the text's end or any other ASCII byte. That is
// what [^\r\n\p{L}\p{N}]?+\p{L}++ matches there (a contraction starts with an apostrophe, which
// this case never does); it returns -1 when the general matcher must decide.
// TestASCIIWordFastPath holds it to the general matcher.
func asciiLetters(t []byte, i int) int {
	j := i
	if t[j] == ' ' {
		j++
	}
	k := asciiRun(t, j, letterByte)
	if k == j || k < len(t) && t[k] >= 0x80 {
		return -1
	}
	return k
}

// splitCL100KGeneral is splitCL100K for any input, without the ASCII fast path.
func splitCL100KGeneral(ct *classTable, t []byte, i int) int {
	// '(?i:[sdmt]|ll|ve|re)
	if n := contraction(t, i); n > 0 {
		return i + n
	}
	c, r, n := ct.at(t, i)
	// [^\r\n\p{L}\p{N}]?+\p{L}++
	if c&clsLetter != 0 {
		return run(ct, t, i+n, clsLetter)
	}
	if c&(clsNumber|clsNewline) == 0 && i+n < len(t) {
		if c2, _, n2 := ct.at(t, i+n); c2&clsLetter != 0 {
			return run(ct, t, i+n+n2, clsLetter)
		}
	}
	// \p{N}{1,3}+
	if c&clsNumber != 0 {
		return numbers(ct, t, i)
	}
	//  ?[^\s\p{L}\p{N}]++[\r\n]*+
	j := i
	if r == ' ' && i+1 < len(t) {
		if c2, _, _ := ct.at(t, i+1); c2&clsWord == 0 {
			j = i + 1
		}
	}
	if c2, _, _ := ct.at(t, j); c2&clsWord == 0 {
		e := symbolRun(ct, t, j)
		for e < len(t) && (t[e] == '\r' || t[e] == '\n') {
			e++
		}
		return e
	}
	// \s++$|\s*[\r\n]|\s+(?!\S)|\s  (t[i] is whitespace here)
	end, last, nlEnd := spaceRun(ct, t, i)
	switch {
	case end == len(t):
		return end
	case nlEnd > 0:
		return nlEnd
	case last > i:
		return last
	}
	return i + n
}

// asciiWord is the common case of splitO200K, decided from ASCII bytes alone: an optional space,
// an optional capital and a run of lower-case letters, ended by the text's end or an ASCII byte
// other than an apostrophe (which may start a contraction). It returns the end of the piece, or
// -1 when the general matcher must decide. The first word alternative matches exactly this: the
// space is its optional prefix, the capital its Upper*, the run its Lower+, which no ASCII byte
// extends (a capital ends it too), and no contraction follows. TestASCIIWordFastPath holds it to
// the general matcher.
func asciiWord(t []byte, i int) int {
	j := i
	if t[j] == ' ' {
		j++
	}
	if j < len(t) && 'A' <= t[j] && t[j] <= 'Z' {
		j++
	}
	k := asciiRun(t, j, lowerByte)
	if k == j {
		return -1
	}
	if k < len(t) {
		if b := t[k]; b >= 0x80 || b == '\'' {
			return -1
		}
	}
	return k
}

// asciiSymbols is the other common case of both splits, decided from ASCII bytes alone: an
// optional space and a run of ASCII punctuation (bytes that are not letters, digits or white
// space), such as the "," and "." of prose, then the newlines (and, with slash, the slashes)
// that follow. That is what " ?[^\s\p{L}\p{N}]+[\r\n]*" matches there, after the word
// alternatives failed because no letter follows. It returns -1 when the general matcher must
// decide: the run meets a non-ASCII byte, or a punctuation byte with no space before it is
// followed by a letter or a non-ASCII byte (it may prefix a word, or be the apostrophe of a
// cl100k_base contraction). TestASCIIWordFastPath holds it to the general matcher.
func asciiSymbols(t []byte, i int, slash bool) int {
	j := i
	if t[j] == ' ' {
		j++
	}
	if j == len(t) {
		return -1
	}
	if b := t[j]; b >= utf8.RuneSelf || asciiClass[b]&clsWord != 0 {
		return -1
	}
	k := j + 1
	if j == i && k < len(t) && (t[k] >= utf8.RuneSelf || asciiClass[t[k]]&clsLetter != 0) {
		return -1
	}
	for k < len(t) && t[k] < utf8.RuneSelf && asciiClass[t[k]]&clsWord == 0 {
		k++
	}
	if k < len(t) && t[k] >= utf8.RuneSelf {
		return -1
	}
	for k < len(t) && (t[k] == '\r' || t[k] == '\n' || slash && t[k] == '/') {
		k++
	}
	return k
}

// o200kWord matches [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+ (first == true)
// or [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]* at t[p], then the optional
// contraction. It returns the end of the match or -1.
func o200kWord(ct *classTable, t []byte, p int, first bool) int {
	if p >= len(t) {
		return -1
	}
	var wEnd int
	if first {
		// Upper* is greedy and backs off one code point at a time until Lower+ matches, so
		// Lower+ starts at the last position k in [p, upperEnd] that is Lower.
		lastLower, lastLowerEnd := -1, -1
		e := p
		for e < len(t) {
			c, _, n := ct.at(t, e)
			if c&clsUpper == 0 {
				break
			}
			if c&clsLower != 0 {
				lastLower, lastLowerEnd = e, e+n
			}
			e += n
		}
		if e < len(t) {
			if c, _, _ := ct.at(t, e); c&clsLower != 0 {
				lastLower = e
			}
		}
		switch {
		case lastLower == e:
			wEnd = run(ct, t, e, clsLower)
		case lastLower >= 0:
			// Every code point after lastLower is not Lower, so Lower+ is one code point.
			wEnd = lastLowerEnd
		default:
			return -1
		}
	} else {
		c, _, n := ct.at(t, p)
		if c&clsUpper == 0 {
			return -1
		}
		e := run(ct, t, p+n, clsUpper)
		wEnd = run(ct, t, e, clsLower)
	}
	return wEnd + contraction(t, wEnd)
}

func splitO200K(ct *classTable, t []byte, i int) int {
	if e := asciiWord(t, i); e > 0 {
		return e
	}
	if e := asciiSymbols(t, i, true); e > 0 {
		return e
	}
	return splitO200KGeneral(ct, t, i)
}

// splitO200KGeneral is splitO200K for any input, without the ASCII fast path.
func splitO200KGeneral(ct *classTable, t []byte, i int) int {
	c, r, n := ct.at(t, i)
	// The two word alternatives, each first with the optional [^\r\n\p{L}\p{N}] prefix taken
	// (greedy ?), then without it.
	prefix := c&(clsLetter|clsNumber|clsNewline) == 0
	for _, first := range [2]bool{true, false} {
		if prefix {
			if e := o200kWord(ct, t, i+n, first); e > 0 {
				return e
			}
		}
		if e := o200kWord(ct, t, i, first); e > 0 {
			return e
		}
	}
	// \p{N}{1,3}
	if c&clsNumber != 0 {
		return numbers(ct, t, i)
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n/]*
	j := i
	if r == ' ' && i+1 < len(t) {
		if c2, _, _ := ct.at(t, i+1); c2&clsWord == 0 {
			j = i + 1
		}
	}
	if c2, _, _ := ct.at(t, j); c2&clsWord == 0 {
		e := symbolRun(ct, t, j)
		for e < len(t) && (t[e] == '\r' || t[e] == '\n' || t[e] == '/') {
			e++
		}
		return e
	}
	// \s*[\r\n]+|\s+(?!\S)|\s+  (t[i] is whitespace here)
	end, last, nlEnd := spaceRun(ct, t, i)
	switch {
	case nlEnd > 0:
		return nlEnd
	case end == len(t):
		return end
	case last > i:
		return last
	}
	return end
}

const oneBits, highBits = 0x0101010101010101, 0x8080808080808080

// lowerBytes sets bit 7 of each byte of x that is a lower-case ASCII letter: bit 7 of each
// byte of y+0x1f.. is set when the byte is >= 'a' (0x61), of y+0x05.. when it is > 'z' (0x7a),
// with y the 7 low bits of each byte (no carries between bytes); bytes with their own bit 7 set
// are not ASCII.
func lowerBytes(x uint64) uint64 {
	y := x &^ highBits
	return (y + 0x1f*oneBits) &^ (y + 0x05*oneBits) &^ x & highBits
}

// Byte classes of asciiRun.
const (
	lowerByte  = 0    // a-z
	letterByte = 0x20 // a-z and A-Z: setting bit 5 maps A-Z, and no other byte, onto a-z
)

// asciiRun returns the end of the run of ASCII letters (fold == letterByte) or lower-case
// letters (fold == lowerByte) starting at t[k]. It tests 8 bytes at a time: a word ends at an
// unpredictable length, and one branch per word instead of one per letter is most of what the
// fast paths above cost on English.
func asciiRun(t []byte, k int, fold uint64) int {
	for k+8 <= len(t) {
		x := binary.LittleEndian.Uint64(t[k:])
		// Setting bit 5 (fold) maps A-Z, and no other byte, onto a-z.
		n := bits.TrailingZeros64(^lowerBytes(x|fold*oneBits)&highBits) >> 3 // letters before the first other byte
		k += n
		if n < 8 {
			return k
		}
	}
	for k < len(t) && ('a' <= t[k]|byte(fold) && t[k]|byte(fold) <= 'z') {
		k++
	}
	return k
}
