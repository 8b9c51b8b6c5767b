package tokens

import "unsafe"

// wordTable is what wordsSSE (words_amd64.s) reads of a vocab and its split, at fixed offsets
// (TestWordTableLayout checks them against the assembly's).
type wordTable struct {
	slots unsafe.Pointer // 0: the hash table (vocab.slots)
	mask  uint64         // 8: len(slots) - 1
	shift uint64         // 16: vocab.shift
	caps  uint64         // 24: 0xFFFF when a capital may start a word (o200k_base), else 0
	apos  uint64         // 32: 0xFFFF when an apostrophe may not end a word (o200k_base), else 0
	arena unsafe.Pointer // 40: vocab.arena
	off   unsafe.Pointer // 48: vocab.off
	class unsafe.Pointer // 56: asciiClass
	word  uint64         // 64: clsWord
	fold  [16]byte       // 72: 0x20 in every byte when A-Z count as a-z (cl100k_base), else 0
}

// setWords fills v.table for the split of o200k_base (o200k) or cl100k_base.
func (v *vocab) setWords(o200k bool) {
	w := &v.table
	w.slots, w.mask, w.shift = unsafe.Pointer(unsafe.SliceData(v.slots)), uint64(len(v.slots)-1), uint64(v.shift)
	w.arena, w.off = unsafe.Pointer(unsafe.SliceData(v.arena)), unsafe.Pointer(unsafe.SliceData(v.off))
	w.class, w.word = unsafe.Pointer(&asciiClass), uint64(clsWord)
	if o200k {
		w.caps, w.apos = 0xFFFF, 0xFFFF
	} else {
		for i := range w.fold {
			w.fold[i] = letterByte
		}
	}
}
