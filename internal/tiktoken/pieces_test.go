package tiktoken

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

// TestPieceCache: a piece is found only by itself, whatever its length (2-16 bytes, trailing
// zero bytes included) and whichever piece shares its entry.
func TestPieceCache(t *testing.T) {
	t.Parallel()
	var c pieceCache
	pieces := []string{"ab", "ab\x00", "abcdefgh", "abcdefgx", "abcdefgh\x00", "abcdefghijklmnop",
		"abcdefghijklmnox", "abcdefghijklmno", " Latency", " Throughput", "é", "\xff\xfe\xfd"}
	for k, p := range pieces {
		c.put([]byte(p), k+1)
	}
	for k, p := range pieces {
		n, ok := c.get([]byte(p))
		if ok && n != k+1 {
			t.Errorf("get(%q) = %d; want %d", p, n, k+1)
		}
		if !ok {
			// A miss is right only when a piece put later took the entry.
			_, _, idx := pieceKey([]byte(p))
			taken := false
			for _, q := range pieces[k+1:] {
				if _, _, j := pieceKey([]byte(q)); j == idx {
					taken = true
				}
			}
			if !taken {
				t.Errorf("get(%q) missed; want %d", p, k+1)
			}
		}
	}
	// Two pieces of one entry: the one put last is found, the other is not (never its count).
	rng := rand.New(rand.NewPCG(1, 2))
	first := []byte("Antidisestablish")
	_, _, want := pieceKey(first)
	var other []byte
	for other == nil {
		p := make([]byte, 2+rng.IntN(15))
		for i := range p {
			p[i] = 'a' + byte(rng.IntN(26))
		}
		if _, _, idx := pieceKey(p); idx == want {
			other = p
		}
	}
	c.put(first, 3)
	c.put(other, 2)
	if n, ok := c.get(first); ok {
		t.Errorf("get(%q) after put(%q) into its entry = %d, true; want a miss", first, other, n)
	}
	if n, ok := c.get(other); !ok || n != 2 {
		t.Errorf("get(%q) = %d, %v; want 2, true", other, n, ok)
	}
	if n, ok := c.get([]byte("zz")); ok {
		t.Errorf("get of a piece never put = %d, true", n)
	}
}

// TestPieceCacheConcurrent: goroutines counting texts full of pieces that are not one token,
// through one encoder and so one piece cache, get the counts of an encoder whose cache is
// empty for every text (run with -race: the entries are sequence locks of atomic words).
func TestPieceCacheConcurrent(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	words := []string{" Latency", " Throughput", " Tenant", " Replica", " qzx", " Xylophonic", " 12345",
		" 3.14159", " Antidisestablishment", " naïve", " ZZZ", " the", ".", ",", " Summarize", "\n"}
	texts := make([][]byte, 64)
	for k := range texts {
		var sb strings.Builder
		for range 20 + rng.IntN(200) {
			sb.WriteString(words[rng.IntN(len(words))])
		}
		texts[k] = []byte(sb.String())
	}
	for _, name := range []string{O200K, CL100K} {
		e := mustEncoding(t, name)
		want := make([]int, len(texts))
		for k, text := range texts {
			cold := &Encoding{name: e.name, vocab: e.vocab, classes: e.classes, split: e.split, pieces: new(pieceCache)}
			cold.pool.New = func() any { return new(scratch) }
			want[k] = cold.Count(text)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			wg.Go(func() {
				for r := range 200 {
					k := (g*31 + r*7) % len(texts)
					if got := e.Count(texts[k]); got != want[k] {
						errs <- fmt.Errorf("%s: text %d counted %d, want %d", name, k, got, want[k])
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	}
}
