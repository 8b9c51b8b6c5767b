// Package tiktoken counts tokens exactly as OpenAI's tiktoken encodes text, for the cl100k_base
// and o200k_base encodings: Encoding.Count(text) is len(encode_ordinary(text)) of Python tiktoken
// 0.14.0 and of the Go port github.com/pkoukk/tiktoken-go, the reference the tests compare with,
// without building the token list. It owns the split patterns, the byte-pair merge, the
// vocabularies, the counter's caches and the table of which OpenAI model uses which encoding
// (EncodingForModel).
//
// # Contract
//
//   - Get, EncodingForModel and every method of Encoding are safe for concurrent use. An
//     Encoding's vocabulary is immutable; its piece cache only ever returns counts it was given
//     for the same bytes, so no interleaving of callers changes a count.
//   - Time and memory are bounded per input: a count takes time linear in the text, O(n log n)
//     for a piece of n bytes that cannot be cut (one character repeated), and allocates nothing
//     for ordinary text. Scratch for long pieces is pooled and about 40 bytes per byte of the
//     longest segment merged whole; CountBounded caps that segment (longer ones are counted in
//     chunks and reported as chunked), so the scratch of one call is bounded whatever the text.
//   - Nothing downloads at run time: the vocabularies are embedded in the binary
//     (github.com/pkoukk/tiktoken-go-loader) and parsed on the first Get of each encoding.
//   - Text is bytes: special-token strings such as "<|endoftext|>" are ordinary text (as
//     encode_ordinary treats them), and invalid UTF-8 bytes are kept and split like symbols
//     (tiktoken itself accepts only valid UTF-8).
//
// It sees text, never requests: it must never import encoding/json, the provider packages,
// internal/tokens (pricing), internal/config or internal/filter (TestImports holds it to
// that). Its consumers pick the encoding and the text.
//
// # Splitting
//
// The split patterns of tiktoken_ext/openai_public.py are reproduced by hand-written scanners
// (split.go), without regular expressions: each returns the end of the piece at a position,
// alternatives tried in the pattern's order (leftmost-first), never backtracking more than one
// code point and reading each byte a bounded number of times, so splitting is linear. Their
// character classes are tiktoken's own (Unicode 16.0, newer than Go's unicode package), read
// from its regex engine into unicode_tables.go and built into a two-level class table shared by
// both encodings (unicode.go). asciiWord, asciiLetters and asciiSymbols decide most ASCII
// pieces without the general scanners; TestASCIIWordFastPath holds them to the general ones.
//
// # Merging
//
// Merges follow tiktoken's rule: the adjacent pair whose concatenation has the lowest rank is
// merged first, the leftmost on a tie (bpe.go). A piece that is one token is looked up whole. A
// long piece is first cut wherever no token of the vocabulary can span (no 2- or 3-byte token
// and no 4-gram of any token crosses the position; exact, since every part of a merge is a
// token), which splits CJK and other non-Latin runs into characters. Segments then merge with
// tiktoken's quadratic scan up to 48 bytes, a binary heap up to 2 KiB and, above, a per-rank
// bucket queue whose initial pairs are counting-sorted, O(n log n) at worst. A segment of more
// than 4 KiB of one byte repeated is counted by that byte's periodic rule (uniform.go,
// uniform_table.go): merged on a residue of a few periods, the rest added, exactly.
// TestMergeAlgorithmsAgree holds the three merges and the cutting to each other.
//
// The vocabulary (vocab.go) is an open-addressing hash table over one byte arena, each slot
// holding a token's first 8 bytes, so most lookups compare one word; its longest probe sequence
// is fixed when it is built, so no input can make a lookup slower. Tokens of 9 to 15 bytes are
// held whole again in a second table, one cache line a lookup. Cache-resident Bloom filters of
// the 3-byte tokens and of the 4-grams of longer ones stop most failed lookups before the table
// and decide the cuts. On Linux the hash table sits on transparent huge
// pages where the kernel allows them (huge_linux.go), unmapped when the vocabulary is collected.
//
// # Words and their windows
//
// Most pieces of prose are a short word or a punctuation byte that is one token. vocab.words
// decides runs of them and looks each up without a call (words.go): on amd64 the pieces of each
// 64-byte window are found at once from bitmaps of SSE2 (or AVX2, where the machine has it)
// compares and looked up independently of each other (words_amd64.s, reading the wordTable laid
// out in words_table.go; the purego build tag turns it off); elsewhere, and near the end of the
// text, each word is classified from 8-byte loads in general registers. The first piece they
// cannot decide goes the general way. TestWords, TestWordsSSE, TestWordsWindow and
// TestWordTableLayout hold them to the general matchers, to each other and to the assembly's
// offsets.
//
// # Caches
//
// Each Encoding remembers the counts of pieces of 2 to 16 bytes that are not one token
// (pieces.go): 2,048 entries of 32 bytes, each holding the whole piece under a sequence lock of
// atomic words, so a hit is exact, a reader never waits and a writer that finds an entry busy
// skips it. Counting builds no token list; scratch for pieces over 48 bytes comes from a
// per-Encoding pool.
//
// # Generated tables
//
// unicode_tables.go is written by testdata/gen_unicode.py from Python tiktoken's regex engine
// (the project's virtualenv); uniform_table.go is measured by TestUniformRuns -update from the
// vocabularies and the merge. go generate ./internal/tiktoken/ regenerates both, and
// TestUnicodeTablesGenerated and TestUniformTableGenerated fail when a checked-in table is not
// what its generator writes.
//
// # Proof
//
// testdata/corpus.jsonl (texts with their counts from Python tiktoken, both encodings,
// testdata/gen_corpus.py), differential fuzzing against pkoukk/tiktoken-go (FuzzCount),
// TestOracleShort and TestOracleLong, and the tests named above. Benchmarks: BenchmarkCount,
// BenchmarkOracle, BenchmarkSpeed (CPU time per byte against the reference and against English),
// BenchmarkLoad, BenchmarkUniformRun. Long fuzzing:
//
//	go test -run '^$' -fuzz FuzzCount -fuzztime 10m ./internal/tiktoken/
package tiktoken
