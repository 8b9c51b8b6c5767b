//go:build !purego

package tiktoken

import (
	"math/bits"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// TestWordsWindow: wordsSSE's window, classified by SSE2 and by AVX2, must cut where its
// rules (words_amd64.s) say, stated here byte by byte, and with the same starts, at every
// position of random texts dense in every class of byte; and on prose of common words it must
// decide most of each window, all 64 bytes of many (TestWordsSSE cannot tell a window that cuts too early: loop16
// then decides the same pieces, only slower).
func TestWordsWindow(t *testing.T) {
	t.Parallel()
	alphabet := []string{" ", " ", "a", "z", "A", "Z", "'", "7", "0", "9", ",", ".", ". ", "\n",
		"\t", "\r", "\v", "\f", "\x08", "\x0e", "/", ":", "@", "[", "`", "{", "~", "\x7f", "\x00",
		"\x01", "é", "中", "\xff", "  "}
	words := []string{" the", " of", "the", " The", " model", " Model", " throughput", " userId",
		" iPhone", " HTTP", "hello", " it's", " x", " A", "Ab"}
	prose := commonWords(64, 2000)
	rng := rand.New(rand.NewPCG(13, 14))
	for _, mode := range []struct {
		name string
		avx2 bool
	}{{O200K, false}, {CL100K, false}, {O200K, true}, {CL100K, true}} {
		v := mustEncoding(t, mode.name).vocab
		table, name := v.table, mode.name
		if table.avx2 = mode.avx2; mode.avx2 {
			if !cpu.X86.HasAVX2 {
				t.Logf("%s: this machine has no AVX2; its windows are tested by SSE2 alone", name)
				continue
			}
			name += " (AVX2)"
		}
		windows := 0
		for range 4000 {
			var b []byte
			for len(b) < 64+rng.IntN(64) {
				if rng.IntN(2) == 0 {
					b = append(b, words[rng.IntN(len(words))]...)
				} else {
					b = append(b, alphabet[rng.IntN(len(alphabet))]...)
				}
			}
			for i := 0; i+64 <= len(b); i++ {
				cut, starts := wordsWindow(b, i, &table)
				wantCut, wantStarts := windowRef(b[i:i+64], v.o200k)
				if cut != wantCut || starts != wantStarts {
					t.Fatalf("%s %q from %d: cut %d, starts %064b; want %d, %064b", name, b[i:i+64], i, cut, bits.Reverse64(starts), wantCut, bits.Reverse64(wantStarts))
				}
				windows++
			}
		}
		cuts, n := 0, 0
		for _, p := range prose {
			for i := 0; i+64 <= len(p); i += 7 {
				cut, starts := wordsWindow(p, i, &table)
				if wantCut, wantStarts := windowRef(p[i:i+64], v.o200k); cut != wantCut || starts != wantStarts {
					t.Fatalf("%s %q from %d: cut %d, starts %064b; want %d, %064b", name, p[i:i+64], i, cut, bits.Reverse64(starts), wantCut, bits.Reverse64(wantStarts))
				}
				cuts, n = cuts+cut, n+1
			}
		}
		t.Logf("%s: %d random windows; on prose of common words the window decides %.1f bytes of 64 on average", name, windows, float64(cuts)/float64(n))
		if cuts < 50*n {
			t.Fatalf("%s: on prose of common words the window decides only %.1f bytes of 64 on average", name, float64(cuts)/float64(n))
		}
	}
}

// windowRef is the window's cut and starts, byte by byte: a piece starts at byte 0, at a
// space, at a capital (o200k_base) not after a space, and at every byte that is neither these
// nor a letter. A byte lies in a piece wordsSSE decides when it is a space before a letter or
// a capital, a capital before a lower-case letter, a letter before a byte that may end a word
// (ASCII, and in o200k_base not the apostrophe), or ASCII punctuation (not a letter, digit or
// white space) before a space. The byte after the window is in no class. The cut is the last
// start at or before the first byte in no piece (63 if all are).
func windowRef(w []byte, o200k bool) (cut int, starts uint64) {
	at := func(j int) int {
		if j < len(w) {
			return int(w[j])
		}
		return -1
	}
	lower := func(j int) bool {
		b := at(j)
		return 'a' <= b && b <= 'z' || !o200k && 'A' <= b && b <= 'Z'
	}
	upper := func(j int) bool { b := at(j); return o200k && 'A' <= b && b <= 'Z' }
	space := func(j int) bool { return at(j) == ' ' }
	ending := func(j int) bool { b := at(j); return b < 0x80 && !(o200k && b == '\'') }
	punct := func(j int) bool {
		b := at(j)
		return b >= 0 && b < 0x80 && !('0' <= b && b <= '9') && !('\t' <= b && b <= '\r') &&
			!space(j) && !upper(j) && !lower(j) && !('A' <= b && b <= 'Z')
	}
	inPiece := func(j int) bool {
		switch {
		case space(j):
			return lower(j+1) || upper(j+1)
		case upper(j):
			return lower(j + 1)
		case lower(j):
			return ending(j + 1)
		default:
			return punct(j) && space(j+1)
		}
	}
	first := 63
	for j := range 63 {
		if !inPiece(j) {
			first = j
			break
		}
	}
	for j := 0; j <= first; j++ {
		if j == 0 || space(j) || upper(j) && !space(j-1) || !space(j) && !upper(j) && !lower(j) {
			starts |= 1 << j
			cut = j
		}
	}
	return cut, starts
}
