package tiktoken

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestMergeAlgorithmsAgree: the three merge implementations (tiktoken's scan, the heap, the
// bucket queue) and the cutting of long pieces give the same count on long pieces built to
// merge a lot: small alphabets, runs, CJK, mixed scripts. mergeSmall is the reference on
// pieces it can take; mergeHeap is checked against it and is then the reference for longer
// ones.
func TestMergeAlgorithmsAgree(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	alphabets := []string{"a", " ", "\n", "ab", "aab", " \n", "abc", "ab ", "中文字", "中中a", "🙂", "é", "\xe4\xb8", "0123456789abcdef", "aaaaaaaaab"}
	for _, name := range []string{CL100K, O200K} {
		v := mustEncoding(t, name).vocab
		sc := new(scratch)
		for i := 0; i < 150; i++ {
			alpha := []rune(alphabets[i%len(alphabets)])
			var b strings.Builder
			n := 2 + rng.IntN(smallPiece-1)
			if i%3 != 0 {
				n = hugePiece + rng.IntN(3000)
			}
			for b.Len() < n {
				b.WriteRune(alpha[rng.IntN(len(alpha))])
			}
			piece := []byte(b.String())
			heap := v.mergeHeap(piece, sc)
			if len(piece) <= smallPiece {
				if small := v.mergeSmall(piece); small != heap {
					t.Fatalf("%s %q: mergeSmall %d, mergeHeap %d", name, piece, small, heap)
				}
				continue
			}
			if huge := v.mergeHuge(piece, sc); huge != heap {
				t.Fatalf("%s %d bytes of %q: mergeHuge %d, mergeHeap %d", name, len(piece), string(alpha), huge, heap)
			}
			if long, _ := v.mergeLong(piece, sc, 0); long != heap {
				t.Fatalf("%s %d bytes of %q: mergeLong %d, mergeHeap %d", name, len(piece), string(alpha), long, heap)
			}
		}
	}
}

// maxSegment is the bound the tests give CountBounded (256 KiB, as the pricer's).
const maxSegment = 256 << 10

// TestLongRunChunks: CountBounded counts uncuttable runs longer than maxSegment in chunks
// (bounded memory), except one byte repeated, which its periodic rule counts exactly
// (uniform.go).
func TestLongRunChunks(t *testing.T) {
	t.Parallel()
	for _, name := range []string{CL100K, O200K} {
		e := mustEncoding(t, name)
		for _, c := range []string{"a", " ", "\n", "中", "ab", "x y"} {
			run := []byte(strings.Repeat(c, (maxSegment+maxSegment/3)/len(c)))
			exact := e.Count(run)
			got, chunked := e.CountBounded(run, maxSegment)
			if want := c == "ab"; chunked != want && c != "中" { // 中 runs are cut or not per encoding
				t.Errorf("%s %q: chunked %v, want %v", name, c, chunked, want)
			}
			if got != exact {
				t.Errorf("%s %d x %q: chunked count %d, exact %d", name, len(run)/len(c), c, got, exact)
			}
		}
	}
}
