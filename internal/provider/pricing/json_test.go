package pricing

import (
	"math/rand/v2"
	"testing"
)

func TestHasControl(t *testing.T) {
	for n := 0; n <= 40; n++ {
		for k := 0; k < n; k++ {
			for b := 0; b < 256; b++ {
				s := make([]byte, n)
				for i := range s {
					s[i] = 'a'
				}
				s[k] = byte(b)
				if got := hasControl(s); got != (b < 0x20) {
					t.Fatalf("len %d, byte %#x at %d: hasControl = %v", n, b, k, got)
				}
			}
		}
	}
	// Text-like words, where the subtraction's borrows matter.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 200_000; i++ {
		s := make([]byte, rng.IntN(40))
		want := false
		for k := range s {
			s[k] = byte(rng.IntN(0x60)) + 0x20
			if rng.IntN(64) == 0 {
				s[k] = byte(rng.IntN(256))
			}
			want = want || s[k] < 0x20
		}
		if got := hasControl(s); got != want {
			t.Fatalf("%q: hasControl = %v", s, got)
		}
	}
}

// strRef is the string scan one byte at a time: the end after the closing quote, whether an
// escape was seen, or ok false.
func strRef(src []byte, i int) (end int, escaped, ok bool) {
	for j := i + 1; j < len(src); j++ {
		switch c := src[j]; {
		case c == '"':
			return j + 1, escaped, true
		case c == '\\':
			escaped = true
			j++
		case c < 0x20:
			return 0, false, false
		}
	}
	return 0, false, false
}

// TestStringScan holds parser.str to the byte-at-a-time scan on strings dense in quotes,
// backslashes and control bytes, at every length across the word-sized steps.
func TestStringScan(t *testing.T) {
	alphabet := []byte{'a', 'b', ' ', '"', '\\', '\\', 0x01, '\n', 'n', 'u', 0xC3, 0xA9}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 300_000; i++ {
		src := make([]byte, 1+rng.IntN(70))
		src[0] = '"'
		sparse := rng.IntN(2) == 0
		for k := 1; k < len(src); k++ {
			src[k] = alphabet[rng.IntN(len(alphabet))]
			if sparse && rng.IntN(8) != 0 {
				src[k] = 'x'
			}
		}
		d := &Doc{}
		p := parser{d: d, src: src}
		end, err := p.str(0)
		wantEnd, wantEscaped, ok := strRef(src, 0)
		if (err == nil) != ok || ok && (end != wantEnd || d.nodes[0].escaped != wantEscaped ||
			int(d.nodes[0].start) != 1 || int(d.nodes[0].end) != end-1) {
			t.Fatalf("%q: str = %d, %v (node %+v); want %d, escaped %v, ok %v", src, end, err, d.nodes, wantEnd, wantEscaped, ok)
		}
	}
}
