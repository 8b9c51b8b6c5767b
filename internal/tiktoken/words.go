package tiktoken

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// words counts the run of pieces from t[i] on (i+8 <= len(t)) that it can decide from the 16
// (or 8) bytes at each piece and that are one token each, and returns where the run stops and
// its token count. It stops at the first piece it cannot decide or that is not one token, or
// where fewer than 8 bytes are left; the encoder's loop splits and counts that piece the
// general way and calls it again. The pieces it decides are most pieces of prose:
//
//   - a word: an optional space, (o200k_base) an optional capital, and ASCII lower-case letters
//     (cl100k_base: ASCII letters), ended by an ASCII byte that (o200k_base) is not an
//     apostrophe. The two word alternatives of o200k_base and [^\r\n\p{L}\p{N}]?+\p{L}++ of
//     cl100k_base match exactly this there: no ASCII byte extends the run, and no contraction
//     follows. The word and the byte that ends it lie within the 16 bytes at the word;
//   - one ASCII punctuation byte followed by a space, which both splits make a piece of its own
//     (" ?[^\s\p{L}\p{N}]+" stops at the space, and no word or number follows it).
//
// Where 16 bytes are left, wordsSSE (words_amd64.s) classifies them with SSE2 compares, 64
// bytes at a time where it can; the rest of the text, and machines without it, go through
// wordsGo, which classifies 8 bytes at a time in general registers. Both look up without a
// call (vocab.probe and vocab.isLong written out), so the text, the table and the count stay
// in registers. TestWords holds words to the general matchers and to rank, TestWordsSSE the
// two loops to each other, TestWordsWindow wordsSSE's windows to their rules.
func (v *vocab) words(t []byte, i int) (int, int) {
	if i < 0 {
		return i, 0
	}
	if haveSSE && i+16 <= len(t) {
		j, n := wordsSSE(t, i, &v.table)
		if j+16 <= len(t) {
			return j, n
		}
		i, n2 := v.wordsGo(t, j)
		return i, n + n2
	}
	return v.wordsGo(t, i)
}

// wordsGo is words in Go, over 8-byte loads: where fewer than 16 bytes are left, and on
// machines without wordsSSE.
func (v *vocab) wordsGo(t []byte, i int) (int, int) {
	slots := unsafe.Pointer(unsafe.SliceData(v.slots))
	mask, shift := uint64(len(v.slots)-1), v.shift
	var fold, caps, apos uint64
	if v.o200k {
		caps, apos = highBits, highBits // a capital may start a word; an apostrophe may not end it
	} else {
		fold = letterByte * oneBits // A-Z count as a-z
	}
	count := 0
next:
	for i+8 <= len(t) {
		x := load64(t, i)
		// The prefix p: byte 0 when it is a space or (o200k_base) a capital, and byte 1 when
		// it is a capital after a space (bit 7 of each). The piece is p and the letters after.
		y := x &^ highBits
		sp := uint64(uint32(byte(x)^' ')-1) >> 31 << 7
		up := (y + 0x3f*oneBits) &^ (y + 0x25*oneBits) &^ x & caps // upper-case ASCII
		p := up&0x80 | sp | sp<<8&up
		yf := (x | fold) &^ highBits
		// lower is lowerBytes before its mask; z has bit 7 of the bytes outside the piece, end
		// that of the byte that ends it (0: beyond this load).
		lower := (yf + 0x1f*oneBits) &^ (yf + 0x05*oneBits) &^ x
		z := ^(lower | p) & highBits
		end := z & -z
		if lower&(end-1)&highBits == 0 {
			// No letters: one punctuation byte before a space is a piece and a token.
			if b := byte(x); b < 0x80 && asciiClass[b&0x7f]&clsWord == 0 && byte(x>>8) == ' ' {
				count++
				i++
				continue
			}
			break
		}
		var head uint64
		var n int
		if end == 0 {
			// A longer word: it ends within the next load.
			if i+16 > len(t) {
				break
			}
			x2 := load64(t, i+8)
			yf := (x2 | fold) &^ highBits
			z := ^((yf + 0x1f*oneBits) &^ (yf + 0x05*oneBits) &^ x2) & highBits
			end := z & -z
			q := x2 ^ '\''*oneBits
			if end == 0 || (x2|(q-oneBits)&^q&apos)&end != 0 {
				break
			}
			// A word of 9 to 15 bytes is found whole in vocab.longs (isLong, written out);
			// one of 8 bytes is a short one.
			head, n = x, 8+bits.TrailingZeros64(end)>>3
			if n > 8 {
				rest := x2&(end>>7-1) | uint64(n)<<56
				for k := longHash(head, rest) >> v.lshift; ; k++ {
					e := &v.longs[k]
					if e.head == head && e.rest == rest {
						count++
						i += n
						continue next
					}
					if e.rest == 0 {
						break next
					}
				}
			}
		} else {
			// The byte that ends the word must be ASCII, and (o200k_base) not an apostrophe.
			// The apostrophe test q is exact up to the first apostrophe, and the word has none.
			q := x ^ '\''*oneBits
			if (x|(q-oneBits)&^q&apos)&end != 0 {
				break
			}
			head, n = x&(end>>7-1), bits.TrailingZeros64(end)>>3
		}
		for k := shortHash(head) >> shift; ; k = (k + 1) & mask {
			e := (*slot)(unsafe.Add(slots, k*uint64(unsafe.Sizeof(slot{}))))
			if e.head == head && int(e.n) == n {
				count++
				i += n
				continue next
			}
			if e.rank == 0 {
				break next
			}
		}
	}
	return i, count
}

// load64 returns the 8 bytes at t[i:], little-endian; the caller has checked that
// 0 <= i && i+8 <= len(t).
func load64(t []byte, i int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(unsafePointer(t), i))[:])
}
