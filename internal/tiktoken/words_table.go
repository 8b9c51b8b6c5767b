package tiktoken

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// wordTable is what wordsSSE (words_amd64.s) reads of a vocab and its split, at fixed offsets
// (TestWordTableLayout checks them against the assembly's).
type wordTable struct {
	slots  unsafe.Pointer // 0: the hash table (vocab.slots)
	smask  uint64         // 8: the byte offset of the last slot (len(slots)-1)*16
	shift  uint64         // 16: vocab.shift - 4 (a hash >> shift, 16-aligned, is its slot's offset)
	caps   uint64         // 24: all ones when a capital may start a word (o200k_base), else 0
	longs  unsafe.Pointer // 32: vocab.longs
	lshift uint64         // 40: vocab.lshift
	class  unsafe.Pointer // 48: asciiClass
	word   uint64         // 56: clsWord
	fold   [16]byte       // 64: 0x20 in every byte when A-Z count as a-z (cl100k_base), else 0
	ending [16]byte       // 80: the apostrophe (o200k_base) or 0x80 (no ASCII byte), 16 times
	avx2   bool           // 96: classify windows with AVX2 (the machine has it)
}

// setWords fills v.table for the split of o200k_base (o200k) or cl100k_base.
func (v *vocab) setWords(o200k bool) {
	v.o200k = o200k
	w := &v.table
	w.slots = unsafe.Pointer(unsafe.SliceData(v.slots))
	w.smask, w.shift = uint64(len(v.slots)-1)*uint64(unsafe.Sizeof(slot{})), uint64(v.shift)-4
	w.longs, w.lshift = unsafe.Pointer(unsafe.SliceData(v.longs)), uint64(v.lshift)
	w.class, w.word = unsafe.Pointer(&asciiClass), uint64(clsWord)
	ending, fold := byte(0x80), byte(0)
	if o200k {
		w.caps, ending = ^uint64(0), '\''
	} else {
		fold = letterByte
	}
	w.avx2 = cpu.X86.HasAVX2
	for i := range w.fold {
		w.fold[i], w.ending[i] = fold, ending
	}
}
