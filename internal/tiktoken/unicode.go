package tiktoken

import (
	"sync"
	"unicode/utf8"
)

// unicode_tables.go holds the classes as tiktoken's own regex engine defines them; it is
// generated from Python tiktoken (the project's virtualenv, make deps), and
// TestUnicodeTablesGenerated checks that it is what the generator writes.
//
//go:generate ../../.venv/bin/python testdata/gen_unicode.py

// Character class bits of one code point, as the split patterns see it.
const (
	clsLetter  uint8 = 1 << iota // \p{L}
	clsNumber                    // \p{N}
	clsUpper                     // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
	clsLower                     // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
	clsSpace                     // \s
	clsNewline                   // [\r\n]

	// clsWord are the classes that end a "[^\s\p{L}\p{N}]" run.
	clsWord = clsLetter | clsNumber | clsSpace
)

// classTable maps a code point to its class bits in two levels: blockIndex[r>>8] selects a
// 256-entry block of blocks. Identical blocks are shared, so the table is ~40 KB.
type classTable struct {
	blockIndex [0x110000 >> 8]uint16
	blocks     []uint8
}

// classes returns the immutable class table, built once on first use from unicode_tables.go.
var classes = sync.OnceValue(buildClassTable)

func buildClassTable() *classTable {
	flat := make([]uint8, 0x110000)
	set := func(tab []rune, bit uint8) {
		for i := 0; i+1 < len(tab); i += 2 {
			for r := tab[i]; r <= tab[i+1]; r++ {
				flat[r] |= bit
			}
		}
	}
	set(tabLetter, clsLetter)
	set(tabNumber, clsNumber)
	set(tabUpper, clsUpper)
	set(tabLower, clsLower)
	set(tabSpace, clsSpace)
	flat['\r'] |= clsNewline
	flat['\n'] |= clsNewline

	t := &classTable{}
	seen := make(map[[256]uint8]uint16)
	for b := range t.blockIndex {
		var blk [256]uint8
		copy(blk[:], flat[b<<8:(b+1)<<8])
		id, ok := seen[blk]
		if !ok {
			id = uint16(len(t.blocks) >> 8)
			seen[blk] = id
			t.blocks = append(t.blocks, blk[:]...)
		}
		t.blockIndex[b] = id
	}
	return t
}

// of returns the class bits of r; invalid code points have none (they split like symbols).
func (t *classTable) of(r rune) uint8 {
	if uint32(r) >= 0x110000 {
		return 0
	}
	return t.blocks[int(t.blockIndex[r>>8])<<8|int(r&0xFF)]
}

// at decodes the code point starting at t[i] (i < len(t)) and returns its class bits, the code
// point and its width in bytes. An invalid UTF-8 byte is one code point of width 1 and no class,
// so it is treated like a symbol and its byte is kept for the merges.
func (ct *classTable) at(t []byte, i int) (uint8, rune, int) {
	if b := t[i]; b < utf8.RuneSelf {
		return asciiClass[b], rune(b), 1
	}
	r, n := utf8.DecodeRune(t[i:])
	if r == utf8.RuneError && n == 1 {
		return 0, r, 1
	}
	return ct.of(r), r, n
}

// asciiClass is the class of each ASCII byte (a fast path for the common case).
var asciiClass = func() (a [128]uint8) {
	for b := 'a'; b <= 'z'; b++ {
		a[b] = clsLetter | clsLower
	}
	for b := 'A'; b <= 'Z'; b++ {
		a[b] = clsLetter | clsUpper
	}
	for b := '0'; b <= '9'; b++ {
		a[b] = clsNumber
	}
	for _, b := range "\t\n\v\f\r " {
		a[b] = clsSpace
	}
	a['\r'] |= clsNewline
	a['\n'] |= clsNewline
	return a
}()
