package tiktoken

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
	"unsafe"

	reference "github.com/pkoukk/tiktoken-go"
	loader "github.com/pkoukk/tiktoken-go-loader"
	"golang.org/x/sys/cpu"
)

func mustEncoding(tb testing.TB, name string) *Encoding {
	tb.Helper()
	e, err := Get(name)
	if err != nil {
		tb.Fatal(err)
	}
	return e
}

// oracle returns pkoukk/tiktoken-go's encoder, given the offline loader (it would download
// vocabularies otherwise). It is quadratic on long pieces: only short inputs go to it.
var oracleLoader sync.Once

func oracle(tb testing.TB, name string) *reference.Tiktoken {
	tb.Helper()
	oracleLoader.Do(func() { reference.SetBpeLoader(loader.NewOfflineLoader()) })
	o, err := reference.GetEncoding(name)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

type corpusRow struct {
	Kind   string `json:"kind"`
	Text   string `json:"text"`
	CL100K int    `json:"cl100k_base"`
	O200K  int    `json:"o200k_base"`
}

func readCorpus(tb testing.TB) []corpusRow {
	tb.Helper()
	f, err := os.Open("testdata/corpus.jsonl")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var rows []corpusRow
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r corpusRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatal(err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return rows
}

// TestCorpus: the counter equals Python tiktoken 0.14.0 on every corpus text, both encodings
// (testdata/gen_corpus.py).
func TestCorpus(t *testing.T) {
	t.Parallel()
	rows := readCorpus(t)
	if len(rows) < 1000 {
		t.Fatalf("corpus has %d texts, want >= 1000", len(rows))
	}
	cl, o2 := mustEncoding(t, CL100K), mustEncoding(t, O200K)
	kinds := map[string]int{}
	for i, r := range rows {
		kinds[r.Kind]++
		if got := cl.CountString(r.Text); got != r.CL100K {
			t.Errorf("row %d (%s) %q: cl100k_base = %d, tiktoken says %d", i+1, r.Kind, clip(r.Text), got, r.CL100K)
		}
		if got := o2.CountString(r.Text); got != r.O200K {
			t.Errorf("row %d (%s) %q: o200k_base = %d, tiktoken says %d", i+1, r.Kind, clip(r.Text), got, r.O200K)
		}
	}
	t.Logf("%d texts by kind: %v", len(rows), kinds)
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// stdClass is the class of r by Go's unicode package (Unicode 15.0.0 in Go 1.26).
func stdClass(r rune) uint8 {
	var c uint8
	if unicode.IsLetter(r) {
		c |= clsLetter
	}
	if unicode.IsNumber(r) {
		c |= clsNumber
	}
	if unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsUpper
	}
	if unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M) {
		c |= clsLower
	}
	if unicode.Is(unicode.White_Space, r) {
		c |= clsSpace
	}
	if r == '\r' || r == '\n' {
		c |= clsNewline
	}
	return c
}

// TestUnicodeTables documents where the split classes (Unicode 16.0, generated from tiktoken)
// differ from Go's unicode package: only code points Go has no class for, which gain one.
func TestUnicodeTables(t *testing.T) {
	t.Parallel()
	ct := classes()
	diff := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		ours, theirs := ct.of(r), stdClass(r)
		if ours == theirs {
			continue
		}
		diff++
		if theirs != 0 {
			t.Errorf("U+%04X: tiktoken class %#x, Go class %#x", r, ours, theirs)
		}
	}
	t.Logf("%d code points are classed by tiktoken's Unicode but not by Go's unicode %s", diff, unicode.Version)
	if diff == 0 || diff > 10000 {
		t.Errorf("%d code points differ; expected the Unicode 15.0 -> 16.0 additions (~5000)", diff)
	}
	for b := 0; b < utf8.RuneSelf; b++ {
		if asciiClass[b] != ct.of(rune(b)) {
			t.Errorf("ASCII %#x: fast path %#x, table %#x", b, asciiClass[b], ct.of(rune(b)))
		}
	}
}

// oracleComparable reports whether tiktoken-go can be compared on s: valid UTF-8 that its
// regexp engine classes like tiktoken (it uses Go's Unicode 15 tables, so code points new in
// Unicode 16 differ; see TestUnicodeTables).
func oracleComparable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	ct := classes()
	for _, r := range s {
		if r == utf8.RuneError || ct.of(r) != stdClass(r) {
			return false
		}
	}
	return true
}

// TestOracleShort compares with pkoukk/tiktoken-go on the corpus's short texts. The oracle uses
// the pre-0.14 cl100k pattern (\s*[\r\n]+ without \s++$), which splits trailing whitespace
// differently, so texts are given a non-space ending.
func TestOracleShort(t *testing.T) {
	t.Parallel()
	for _, name := range []string{CL100K, O200K} {
		e, o := mustEncoding(t, name), oracle(t, name)
		for _, r := range readCorpus(t) {
			if len(r.Text) > 200 || !oracleComparable(r.Text) {
				continue
			}
			s := r.Text + "."
			if got, want := e.CountString(s), len(o.EncodeOrdinary(s)); got != want {
				t.Errorf("%s %q: %d, tiktoken-go %d", name, clip(s), got, want)
			}
		}
	}
}

// FuzzCount is the differential fuzz test against pkoukk/tiktoken-go on short valid UTF-8.
// Long fuzzing: go test -run '^$' -fuzz FuzzCount -fuzztime 10m ./internal/tiktoken/
func FuzzCount(f *testing.F) {
	for _, s := range []string{"hello world", "I'm", "  \n x", "中文", "e\u0301", "'ſ", "<|endoftext|>", "ǅA", "1234567"} {
		f.Add(s)
	}
	cl, o2 := mustEncoding(f, CL100K), mustEncoding(f, O200K)
	ocl, oo2 := oracle(f, CL100K), oracle(f, O200K)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 256 || !oracleComparable(s) {
			return
		}
		s += "." // see TestOracleShort
		if got, want := cl.CountString(s), len(ocl.EncodeOrdinary(s)); got != want {
			t.Errorf("cl100k_base %q: %d, tiktoken-go %d", s, got, want)
		}
		if got, want := o2.CountString(s), len(oo2.EncodeOrdinary(s)); got != want {
			t.Errorf("o200k_base %q: %d, tiktoken-go %d", s, got, want)
		}
	})
}

// TestOracleLong: texts of up to 2.5 KB, dense in words (short, long, capitalised, not one
// token) and in what breaks a run of them, count as tiktoken-go encodes them: the word loop's
// windows, its table of long words and the piece cache (warm from the texts before) together
// against the reference, both encodings.
func TestOracleLong(t *testing.T) {
	t.Parallel()
	alphabet := []string{" ", " ", "a", "Z", "'", "'s", "7", ",", ".", ". ", "\n", "\t", "é", "中",
		"\u00a0", "(", "-", "  ", "ſ", "ǅ", "'LL", "12345"}
	words := []string{" the", " of", "the", " The", " model", " Model", " tokens", " throughput",
		" summarize", " paragraph", " international", " straightforwardly", " abcdefghijklmnop",
		" userId", " iPhone", " HTTP", "hello", " it's", " résumé", " x", " requests", " overall",
		" breakfast", " qwertyuiop", " Responsibilities", " Throughput", " Latency", " Xylophonic"}
	rng := rand.New(rand.NewPCG(21, 22))
	for _, name := range []string{O200K, CL100K} {
		e, o := mustEncoding(t, name), oracle(t, name)
		for k := range 1000 {
			var sb strings.Builder
			for range 10 + rng.IntN(300) {
				if rng.IntN(5) > 0 {
					sb.WriteString(words[rng.IntN(len(words))])
				} else {
					sb.WriteString(alphabet[rng.IntN(len(alphabet))])
				}
			}
			s := sb.String() + "." // see TestOracleShort
			if got, want := e.CountString(s), len(o.EncodeOrdinary(s)); got != want {
				t.Fatalf("%s text %d %q: %d, tiktoken-go %d", name, k, s, got, want)
			}
		}
	}
}

// TestProbeBound: a lookup, of a token or of anything else, probes at most the longest run of
// occupied slots, fixed when the table is built; keep it short so that hostile input cannot
// make lookups slow.
func TestProbeBound(t *testing.T) {
	t.Parallel()
	for _, name := range []string{CL100K, O200K} {
		v := mustEncoding(t, name).vocab
		longest, run := 0, 0
		for i := 0; i < 2*len(v.slots); i++ {
			if v.slots[i%len(v.slots)].rank != 0 {
				run++
				longest = max(longest, run)
			} else {
				run = 0
			}
		}
		t.Logf("%s: longest probe %d slots of %d", name, longest, len(v.slots))
		if longest > 64 {
			t.Errorf("%s: longest probe run %d slots, want <= 64", name, longest)
		}
	}
}

// TestLongLookup: vocab.longs holds every token of 9 to 15 bytes and nothing else: isLong
// agrees with rank on each of them, and on strings of those lengths that are not tokens (a
// token with one byte changed, or cut, or extended).
func TestLongLookup(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(11, 12))
	for _, name := range []string{CL100K, O200K} {
		v := mustEncoding(t, name).vocab
		tokens, others := 0, 0
		for r := 0; r+1 < len(v.off); r++ {
			tok := v.arena[v.off[r]:v.off[r+1]]
			if len(tok) < 8 || len(tok) > 16 {
				continue
			}
			changed := append([]byte(nil), tok...)
			changed[rng.IntN(len(changed))] ^= byte(1 + rng.IntN(255))
			for _, b := range [][]byte{tok, changed, tok[:len(tok)-1], append(tok[:len(tok):len(tok)], 'e')} {
				if len(b) < 9 || len(b) > 15 {
					continue
				}
				want := v.rank(b) != noRank
				if got := v.isLong(longKey(b)); got != want {
					t.Fatalf("%s: isLong(%q) = %v, rank says %v", name, b, got, want)
				}
				if want {
					tokens++
				} else {
					others++
				}
			}
		}
		t.Logf("%s: %d tokens and %d other strings of 9-15 bytes; %d entries", name, tokens, others, len(v.longs))
		if tokens < 10000 || others < 10000 {
			t.Fatalf("%s: only %d tokens and %d other strings: the test exercises too little", name, tokens, others)
		}
	}
}

// TestASCIIWordFastPath: wherever an ASCII fast path of splitO200K or splitCL100K (asciiWord,
// asciiLetters, asciiSymbols) decides, it must end the piece where the general matcher does,
// on random texts dense in the cases that end or extend a word
// (capitals, apostrophes and contractions, digits, punctuation, newlines, non-ASCII letters,
// combining marks, a title-case letter).
func TestASCIIWordFastPath(t *testing.T) {
	ct := classes()
	alphabet := []string{" ", " ", "a", "z", "e", "s", "t", "A", "Z", "H", "'", "'s", "'LL", "0", "7",
		",", ".", "-", "_", "\n", "\r\n", "\t", "é", "É", "\u0301", "ǅ", "ſ", "中", "!?", "/",
		"(", "\"", "\r", "\v", "\x01", "\x1c", "\x7f", "\u0085", "\u00a0", "«", "\xff", ". ", ", "}
	// Runs of letters long enough for asciiRun's 8-byte steps, ended by any of the above.
	letters := []string{"abcdefgh", "wxyz", "qrstuvwxyzab", "ABCDEFGH", "QrStUvWxYz", "e", "Z"}
	rng := rand.New(rand.NewPCG(1, 2))
	var decided [4]int
	for k := range 40000 {
		var b []byte
		for range 1 + rng.IntN(16) {
			if k%2 == 1 && rng.IntN(2) == 0 {
				b = append(b, letters[rng.IntN(len(letters))]...)
				continue
			}
			b = append(b, alphabet[rng.IntN(len(alphabet))]...)
		}
		for i := range b {
			if fast := asciiWord(b, i); fast >= 0 {
				decided[0]++
				if want := splitO200KGeneral(ct, b, i); fast != want {
					t.Fatalf("o200k %q at %d: fast path ends the piece at %d, the general matcher at %d", b, i, fast, want)
				}
			}
			if fast := asciiLetters(b, i); fast >= 0 {
				decided[1]++
				if want := splitCL100KGeneral(ct, b, i); fast != want {
					t.Fatalf("cl100k %q at %d: fast path ends the piece at %d, the general matcher at %d", b, i, fast, want)
				}
			}
			if fast := asciiSymbols(b, i, true); fast >= 0 {
				decided[2]++
				if want := splitO200KGeneral(ct, b, i); fast != want {
					t.Fatalf("o200k %q at %d: symbol fast path ends the piece at %d, the general matcher at %d", b, i, fast, want)
				}
			}
			if fast := asciiSymbols(b, i, false); fast >= 0 {
				decided[3]++
				if want := splitCL100KGeneral(ct, b, i); fast != want {
					t.Fatalf("cl100k %q at %d: symbol fast path ends the piece at %d, the general matcher at %d", b, i, fast, want)
				}
			}
		}
	}
	if min(decided[0], decided[1], decided[2], decided[3]) < 20000 {
		t.Fatalf("the fast paths decided only %v times: the test exercises too little", decided)
	}
}

// TestWords: from every piece boundary of random texts, the run vocab.words counts must be
// exactly the pieces the general matcher splits there, each of them one token. The texts are
// dense in what ends or extends a word (capitals, apostrophes and contractions, digits,
// punctuation, white space, non-ASCII letters and bytes) and in real words, short and long, so
// that most runs are long and end for every reason there is (" straightforwardly" begins with
// a token of 16 bytes: a word too long for two loads must not be cut there).
func TestWords(t *testing.T) {
	t.Parallel()
	ct := classes()
	alphabet := []string{" ", " ", "a", "e", "s", "A", "Z", "'", "'s", "'LL", "0", "7", ",", ".",
		", ", ". ", ".\n", "-", "\n", "\r\n", "\t", "é", "É", "\u0301", "ſ", "中", "/", "(", "\"",
		"\x01", "\x1c", "\x7f", "\u0085", "\u00a0", "\xff", "\x00"}
	words := []string{" the", " of", " and", "the", "The", " The", " model", " Model", " tokens",
		" requests", " throughput", " summarize", " paragraph", " international", "Internationalization",
		" responsibilities", " abcdefghijklmnopqrstuvwxyz", " straightforwardly", " userId", " qzxv", " HTTP", " iPhone", "hello", " it's",
		" don't", " WORLD", "  two", " résumé", " naïve", " x"}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, enc := range []struct {
		name    string
		general splitFunc
	}{{O200K, splitO200KGeneral}, {CL100K, splitCL100KGeneral}} {
		v := mustEncoding(t, enc.name).vocab
		var short, long, punct, runs int
		for range 20000 {
			var b []byte
			for range 1 + rng.IntN(24) {
				if rng.IntN(3) > 0 {
					b = append(b, words[rng.IntN(len(words))]...)
				} else {
					b = append(b, alphabet[rng.IntN(len(alphabet))]...)
				}
			}
			for i := 0; i < len(b); i = enc.general(ct, b, i) {
				if i+8 > len(b) {
					break
				}
				end, n := v.words(b, i)
				k, pieces := i, 0
				for k < end {
					e := enc.general(ct, b, k)
					if e > end {
						t.Fatalf("%s %q from %d: words stops at %d, inside the piece %q", enc.name, b, i, end, b[k:e])
					}
					if v.rank(b[k:e]) == noRank {
						t.Fatalf("%s %q from %d: words counts %q as one token; it is not one", enc.name, b, i, b[k:e])
					}
					switch piece := b[k:e]; {
					case len(piece) > 7:
						long++
					case len(piece) == 1 && asciiClass[piece[0]&0x7f]&clsWord == 0:
						punct++
					default:
						short++
					}
					k, pieces = e, pieces+1
				}
				if pieces != n {
					t.Fatalf("%s %q from %d to %d: words counts %d pieces, the general matcher splits %d", enc.name, b, i, end, n, pieces)
				}
				if n > 0 {
					runs++
				}
			}
		}
		t.Logf("%s: %d runs, %d short words, %d long words, %d punctuation", enc.name, runs, short, long, punct)
		if min(short, long, punct) < 5000 {
			t.Fatalf("%s: words decided %d short words, %d long words and %d punctuation: the test exercises too little", enc.name, short, long, punct)
		}
	}
}

// TestWordsSSE: where 16 bytes are left, wordsSSE must count the same run as wordsGo, piece
// for piece, on texts dense in words of every length and in what ends them, up to 400 bytes
// long so that runs cross several of its 64-byte windows and end in every part of one;
// TestWords holds both, through words, to the general matchers.
func TestWordsSSE(t *testing.T) {
	t.Parallel()
	if !haveSSE {
		t.Log("no assembly on this platform: words is wordsGo")
		return
	}
	alphabet := []string{" ", "a", "Z", "'", "'s", "7", ",", ".", ". ", "\n", "\t", "é", "中",
		"\x01", "\x7f", "\u00a0", "\xff", "\x00", "(", "-", "  "}
	words := []string{" the", " of", "the", " The", " model", " Model", " tokens", " throughput",
		" summarize", " paragraph", " international", " straightforwardly", " abcdefghijklmnop",
		" userId", " iPhone", " HTTP", "hello", " it's", " résumé", " x", " requests", " overall",
		" breakfast", " qwertyuiop", " Responsibilities"}
	rng := rand.New(rand.NewPCG(9, 10))
	for _, mode := range []struct {
		name string
		avx2 bool
	}{{O200K, false}, {CL100K, false}, {O200K, true}, {CL100K, true}} {
		name, v := mode.name, mustEncoding(t, mode.name).vocab
		table := v.table // a copy: the classes of a window from SSE2, or from AVX2
		if table.avx2 = mode.avx2; mode.avx2 && !cpu.X86.HasAVX2 {
			t.Logf("%s: this machine has no AVX2; its windows are tested by SSE2 alone", name)
			continue
		}
		if mode.avx2 {
			name += " (AVX2)"
		}
		pieces, runs := 0, 0
		for range 30000 {
			var b []byte
			for range 2 + rng.IntN(48) {
				if rng.IntN(4) > 0 {
					b = append(b, words[rng.IntN(len(words))]...)
				} else {
					b = append(b, alphabet[rng.IntN(len(alphabet))]...)
				}
			}
			for i := 0; i+16 <= len(b); i++ {
				gi, gn := v.wordsGo(b, i)
				si, sn := wordsSSE(b, i, &table)
				if si+16 <= len(b) {
					if si != gi || sn != gn {
						t.Fatalf("%s %q from %d: wordsSSE stops at %d after %d pieces, wordsGo at %d after %d", name, b, i, si, sn, gi, gn)
					}
				} else if ti, tn := v.wordsGo(b, si); ti != gi || sn+tn != gn {
					t.Fatalf("%s %q from %d: wordsSSE then wordsGo stop at %d after %d pieces, wordsGo alone at %d after %d", name, b, i, ti, sn+tn, gi, gn)
				}
				pieces += sn
				if sn > 0 {
					runs++
				}
			}
		}
		t.Logf("%s: wordsSSE counted %d pieces in %d runs", name, pieces, runs)
		if pieces < 100000 {
			t.Fatalf("%s: wordsSSE counted only %d pieces: the test exercises too little", name, pieces)
		}
	}
}

// TestWordTableLayout: the offsets words_amd64.s reads wordTable's fields at.
func TestWordTableLayout(t *testing.T) {
	t.Parallel()
	var w wordTable
	for _, f := range []struct {
		name      string
		got, want uintptr
	}{
		{"slots", unsafe.Offsetof(w.slots), 0}, {"smask", unsafe.Offsetof(w.smask), 8},
		{"shift", unsafe.Offsetof(w.shift), 16}, {"caps", unsafe.Offsetof(w.caps), 24},
		{"longs", unsafe.Offsetof(w.longs), 32}, {"lshift", unsafe.Offsetof(w.lshift), 40},
		{"class", unsafe.Offsetof(w.class), 48}, {"word", unsafe.Offsetof(w.word), 56},
		{"fold", unsafe.Offsetof(w.fold), 64}, {"ending", unsafe.Offsetof(w.ending), 80},
		{"avx2", unsafe.Offsetof(w.avx2), 96},
	} {
		if f.got != f.want {
			t.Errorf("wordTable.%s at offset %d, words_amd64.s reads it at %d", f.name, f.got, f.want)
		}
	}
}

// TestShortLookup: the in-place lookup of a short piece agrees with rank, for every token of up
// to 8 bytes and for strings that are not tokens, whatever bytes follow the piece.
func TestShortLookup(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range []string{CL100K, O200K} {
		v := mustEncoding(t, name).vocab
		check := func(piece []byte) {
			// Whatever bytes follow the piece are masked off.
			// The piece's head as the encoder takes it: one load, masked to the piece's length.
			text := append(append([]byte{}, piece...), "\xff\x00 the end of a text"[:rng.IntN(8)+8-len(piece)]...)
			head := binary.LittleEndian.Uint64(text) & (^uint64(0) >> ((64 - 8*len(piece)) & 63))
			if got, want := v.shortHead(head, len(piece)), v.rank(piece) != noRank; got != want {
				t.Fatalf("%s: shortHead(%q) = %v, rank says %v", name, piece, got, want)
			}
			if got, want := v.probe(head, len(piece)), v.rank(piece) != noRank; got != want {
				t.Fatalf("%s: probe(%q) = %v, rank says %v", name, piece, got, want)
			}
		}
		tokens := 0
		for r := range len(v.off) - 1 {
			if tok := v.arena[v.off[r]:v.off[r+1]]; len(tok) > 0 && len(tok) <= 8 {
				check(tok)
				tokens++
				// The same token with its last byte changed is usually not one.
				other := append([]byte{}, tok...)
				other[len(other)-1] ^= byte(1 + rng.IntN(255))
				check(other)
			}
		}
		for range 100000 {
			piece := make([]byte, 1+rng.IntN(8))
			for i := range piece {
				const bytes = " etaoinsr.TE\n\xe4\x80"
				piece[i] = bytes[rng.IntN(len(bytes))]
			}
			check(piece)
		}
		if tokens < 50000 {
			t.Fatalf("%s: only %d tokens of up to 8 bytes checked", name, tokens)
		}
	}
}
