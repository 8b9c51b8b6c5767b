package tiktoken

import (
	"bytes"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// englishProse returns n bytes of English prose: the GNU and Apache licence texts in
// testdata/english.txt (verbatim copying permitted), repeated if needed and cut at a rune
// boundary.
func englishProse(tb testing.TB, n int) []byte {
	tb.Helper()
	b, err := os.ReadFile("testdata/english.txt")
	if err != nil {
		tb.Fatal(err)
	}
	out := bytes.Repeat(b, n/len(b)+1)[:n]
	for !utf8.Valid(out) {
		out = out[:len(out)-1]
	}
	return out
}

// pathological returns n bytes of one of the inputs that make naive BPE quadratic: each is a
// single huge piece (or, for random bytes, many pieces that rarely merge).
func pathological(kind string, n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	switch kind {
	case "letter":
		return bytes.Repeat([]byte("a"), n)
	case "spaces":
		return bytes.Repeat([]byte(" "), n)
	case "newlines":
		return bytes.Repeat([]byte("\n"), n)
	case "cjk":
		// Random common CJK ideographs with no punctuation: one \p{L}+ piece.
		var sb strings.Builder
		for sb.Len() < n-3 {
			sb.WriteRune(rune(0x4E00 + rng.IntN(0x9FA5-0x4E00)))
		}
		return []byte(sb.String())
	case "random":
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	panic("unknown kind " + kind)
}

// commonWords returns k texts of about n bytes of sentences made of common English words (the
// kind of prompt whose vocabulary entries stay in cache, as in cmd/loadgen's bodies), so that
// the tokenizer's own work shows, not the memory's.
func commonWords(k, n int) [][]byte {
	words := strings.Fields(`the of and to in is it you that he was for on are with as his they be at
one have this from or had by word but what some we can out other were all there when up use your
how said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no most
people my over know water than call first who may down side been now find any new work part take
get place made live where after back little only round man year came show every good me give our
under name very through just form sentence great think say help low line differ turn cause much
mean before move right boy old too same tell does set three want air well also play small end put`)
	rng := rand.New(rand.NewPCG(5, 6))
	texts := make([][]byte, k)
	for t := range texts {
		var sb strings.Builder
		for sb.Len() < n {
			w := words[rng.IntN(len(words))]
			switch {
			case sb.Len() == 0:
			case rng.IntN(10) == 0:
				sb.WriteString(". ")
				w = strings.ToUpper(w[:1]) + w[1:]
			case rng.IntN(8) == 0:
				sb.WriteString(", ")
			default:
				sb.WriteByte(' ')
			}
			sb.WriteString(w)
		}
		texts[t] = []byte(sb.String()[:n])
	}
	return texts
}

var pathologicalKinds = []string{"letter", "spaces", "newlines", "cjk", "random"}

// BenchmarkCount: ours on 100 KB of English prose, 1 KB texts of common words and 1 MiB
// pathological inputs. Compare ns/byte (MB/s): every input is counted in linear time; the
// docs/performance.md (the tokenizer) lists each pathological input's cost per byte against English.
func BenchmarkCount(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		e := mustEncoding(b, name)
		b.Run(name+"/english-100KB", func(b *testing.B) {
			text := englishProse(b, 100<<10)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				e.Count(text)
			}
		})
		b.Run(name+"/english-100KB-cold", func(b *testing.B) {
			// The same text, the piece cache emptied before each count: what a text of new
			// words costs (above, its rare words are counted once and then remembered).
			cold := &Encoding{name: e.name, vocab: e.vocab, classes: e.classes, split: e.split, pieces: new(pieceCache)}
			cold.pool.New = func() any { return new(scratch) }
			text := englishProse(b, 100<<10)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				*cold.pieces = pieceCache{}
				cold.Count(text)
			}
		})
		b.Run(name+"/common-words-1KB", func(b *testing.B) {
			texts := commonWords(256, 1000)
			b.SetBytes(1000)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				e.Count(texts[i%len(texts)])
				i++
			}
		})
		for _, kind := range pathologicalKinds {
			b.Run(name+"/"+kind+"-1MiB", func(b *testing.B) {
				text := pathological(kind, 1<<20)
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					e.Count(text)
				}
			})
		}
	}
}

// BenchmarkOracle: pkoukk/tiktoken-go on the same 100 KB of English (never on the
// pathological inputs: it takes seconds to minutes on them).
func BenchmarkOracle(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		o := oracle(b, name)
		e := mustEncoding(b, name)
		text := string(englishProse(b, 100<<10))
		if got, want := e.CountString(text), len(o.EncodeOrdinary(text)); got != want {
			b.Fatalf("%s: ours %d, tiktoken-go %d", name, got, want)
		}
		b.Run(name+"/english-100KB", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				o.EncodeOrdinary(text)
			}
		})
	}
}

// threadCPU returns the CPU time the calling OS thread has used
// (clock_gettime(CLOCK_THREAD_CPUTIME_ID), Linux). The machine this runs on is shared, so wall
// time measures the neighbours as much as the code; thread CPU time does not count time spent
// waiting for a CPU.
func threadCPU(tb testing.TB) time.Duration {
	var ts syscall.Timespec
	const clockThreadCPUTime = 3
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTime, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		tb.Fatal(errno)
	}
	return time.Duration(ts.Nano())
}

// cpuRatio runs a and b alternately (so both see the same contention from neighbours) until
// together they have used at least 600ms of CPU, and returns the CPU nanoseconds per byte of
// each.
func cpuRatio(tb testing.TB, na int, a func(), nb int, b func()) (nsA, nsB float64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	a() // warm up: pooled scratch, caches
	b()
	var ta, tb2 time.Duration
	runs := 0
	for ; runs < 3 || ta+tb2 < 600*time.Millisecond; runs++ {
		t0 := threadCPU(tb)
		a()
		t1 := threadCPU(tb)
		b()
		t2 := threadCPU(tb)
		ta += t1 - t0
		tb2 += t2 - t1
	}
	return float64(ta.Nanoseconds()) / float64(na*runs), float64(tb2.Nanoseconds()) / float64(nb*runs)
}

// BenchmarkSpeed is the one run that checks the counter's speed claims, in CPU time per byte
// (see threadCPU): ours vs pkoukk/tiktoken-go on 100 KB of English, and each 1 MiB
// pathological input relative to 1 MiB of English prose.
// Run: go test -run '^$' -bench Speed ./internal/tiktoken/
func BenchmarkSpeed(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		b.Run(name, func(b *testing.B) {
			e, o := mustEncoding(b, name), oracle(b, name)
			english := englishProse(b, 100<<10)
			if got, want := e.Count(english), len(o.EncodeOrdinary(string(english))); got != want {
				b.Fatalf("ours %d, tiktoken-go %d", got, want)
			}
			englishMiB := englishProse(b, 1<<20)
			for b.Loop() {
				ours, theirs := cpuRatio(b, len(english), func() { e.Count(english) },
					len(english), func() { o.EncodeOrdinary(string(english)) })
				b.ReportMetric(1e3/ours, "MB/s-english")
				b.ReportMetric(1e3/theirs, "MB/s-tiktoken-go")
				b.ReportMetric(theirs/ours, "x-faster")
				for _, kind := range pathologicalKinds {
					text := pathological(kind, 1<<20)
					eng, ns := cpuRatio(b, len(englishMiB), func() { e.Count(englishMiB) },
						len(text), func() { e.Count(text) })
					b.ReportMetric(ns/eng, "x-english-"+kind)
				}
			}
		})
	}
}

// BenchmarkLoad reports the time to parse each embedded vocabulary and the heap it keeps
// (the encoder's resident memory; the class table, ~0.2 MB, is shared).
func BenchmarkLoad(b *testing.B) {
	for _, name := range []string{CL100K, O200K} {
		b.Run(name, func(b *testing.B) {
			data, err := assets.Assets.ReadFile(name + ".tiktoken")
			if err != nil {
				b.Fatal(err)
			}
			var kept uint64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				v, err := parseVocab(data)
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				kept = after.HeapAlloc - before.HeapAlloc + uint64(v.mapped)
				runtime.KeepAlive(v)
			}
			b.ReportMetric(float64(kept)/(1<<20), "MB-resident")
		})
	}
}
