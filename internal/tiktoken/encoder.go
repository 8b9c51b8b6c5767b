package tiktoken

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"

	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// The names of the encodings Get returns.
const (
	CL100K = "cl100k_base"
	O200K  = "o200k_base"
)

// Encoding counts tokens exactly as OpenAI's tiktoken encodes ordinary text (encode_ordinary:
// special-token strings such as "<|endoftext|>" are plain text). It never builds the token
// list. Its vocabulary is immutable; it remembers the counts of short pieces that are not one
// token (pieceCache). An Encoding is safe for concurrent use.
type Encoding struct {
	name    string
	vocab   *vocab
	classes *classTable
	split   splitFunc
	pool    sync.Pool   // *scratch for long pieces
	pieces  *pieceCache // the counts of short pieces that are not one token
}

// encodings holds the lazily loaded encodings; each is built at most once per process.
var encodings = map[string]func() (*Encoding, error){
	CL100K: sync.OnceValues(func() (*Encoding, error) { return load(CL100K, splitCL100K) }),
	O200K:  sync.OnceValues(func() (*Encoding, error) { return load(O200K, splitO200K) }),
}

// Get returns the encoding named name (CL100K or O200K), the same one on every call. The
// vocabulary is embedded in the binary (github.com/pkoukk/tiktoken-go-loader) and parsed on
// the first call for each name; nothing is downloaded. Safe for concurrent use.
func Get(name string) (*Encoding, error) {
	get, ok := encodings[name]
	if !ok {
		return nil, fmt.Errorf("tiktoken: unknown encoding %q (want %s or %s)", name, CL100K, O200K)
	}
	return get()
}

func load(name string, split splitFunc) (*Encoding, error) {
	data, err := assets.Assets.ReadFile(name + ".tiktoken")
	if err != nil {
		return nil, fmt.Errorf("tiktoken: read embedded vocabulary %s: %w", name, err)
	}
	v, err := parseVocab(data)
	if err != nil {
		return nil, fmt.Errorf("tiktoken: %s: %w", name, err)
	}
	v.runs = uniformRules[name]
	v.setWords(name == O200K)
	e := &Encoding{name: name, vocab: v, classes: classes(), split: split, pieces: new(pieceCache)}
	e.pool.New = func() any { return new(scratch) }
	return e, nil
}

// Name returns the encoding's name (CL100K or O200K). Safe for concurrent use.
func (e *Encoding) Name() string { return e.name }

// Count returns the number of tokens text encodes to. It runs in time linear in len(text)
// (O(n log n) at worst for one piece of n bytes that cannot be cut, such as one character
// repeated) and allocates nothing for ordinary text; scratch for long pieces (up to ~40 bytes
// per byte of the longest uncuttable piece) is pooled. Invalid UTF-8 bytes are kept as bytes
// and split like symbols (tiktoken itself only accepts valid UTF-8). Safe for concurrent use.
func (e *Encoding) Count(text []byte) int {
	n, _ := e.count(text, 0)
	return n
}

// CountBounded is Count with a bound on the scratch memory: a piece that cannot be cut into
// segments of at most maxSegment bytes (maxSegment > 0) is counted in chunks of maxSegment
// bytes, cut before a character, and chunked is true; the count is then no longer exact.
// A run of one byte repeated whose byte has a periodic rule (almost every byte, uniform.go)
// is counted exactly at any length. Scratch is about 40 bytes per byte of maxSegment.
// maxSegment <= 0 is Count. Safe for concurrent use.
func (e *Encoding) CountBounded(text []byte, maxSegment int) (n int, chunked bool) {
	return e.count(text, maxSegment)
}

// count is CountBounded with limit for maxSegment; approx is chunked.
func (e *Encoding) count(text []byte, limit int) (total int, approx bool) {
	ct, v, split := e.classes, e.vocab, e.split
	var sc *scratch
	for i := 0; i < len(text); {
		// Most pieces of prose are short words and punctuation, one token each: words counts
		// runs of them. The piece it stops at goes the general way.
		if i+8 <= len(text) {
			var run int
			i, run = v.words(text, i)
			total += run
		}
		end := split(ct, text, i)
		// Other short pieces likewise: looked up in place; one that is not one token is merged
		// at once (countPiece would look it up again). Every other piece of 2 to 16 bytes goes
		// through the piece cache.
		merge := false
		if n := end - i; n <= 8 && i+8 <= len(text) {
			x := binary.LittleEndian.Uint64(text[i:])
			if v.shortHead(x&(^uint64(0)>>((64-8*n)&63)), n) {
				total++
				i = end
				continue
			}
			merge = true
		}
		piece := text[i:end]
		cached := len(piece) > 1 && len(piece) <= maxCachedPiece
		if cached {
			if c, ok := e.pieces.get(piece); ok {
				total += c
				i = end
				continue
			}
		}
		var n int
		var chunked bool
		if merge {
			n = v.mergeSmall(piece)
		} else {
			if len(piece) > smallPiece && sc == nil {
				sc = e.pool.Get().(*scratch)
			}
			n, chunked = v.countPiece(piece, sc, limit)
		}
		if cached && !chunked {
			e.pieces.put(piece, n)
		}
		total, approx = total+n, approx || chunked
		i = end
	}
	if sc != nil {
		e.pool.Put(sc)
	}
	return total, approx
}

// CountString is Count for a string. Safe for concurrent use.
func (e *Encoding) CountString(s string) int {
	// The conversion does not copy: Count does not retain or modify text.
	return e.Count(unsafeBytes(s))
}

// EncodingForModel returns the name of the encoding OpenAI uses for model (CL100K or O200K), or
// "" when the model is not a known OpenAI model. Rules (tiktoken's model.py,
// MODEL_PREFIX_TO_ENCODING, plus Azure's "gpt-35" spelling): o200k_base for gpt-4o,
// chatgpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1, o3, o4, gpt-oss, codex, omni-moderation; cl100k_base
// for gpt-4, gpt-3.5/gpt-35, text-embedding-3*, text-embedding-ada-002, davinci-002 and
// babbage-002. A fine-tune ("ft:gpt-4o-mini:org::id") or a provider-prefixed name
// ("openai/gpt-4o") uses its base model's encoding. Safe for concurrent use.
func EncodingForModel(model string) string {
	m := strings.ToLower(strings.TrimSpace(model))
	m = strings.TrimPrefix(m, "ft:")
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	for _, p := range modelPrefixes {
		if strings.HasPrefix(m, p.prefix) {
			return p.encoding
		}
	}
	return ""
}

var modelPrefixes = []struct{ prefix, encoding string }{
	// Order matters: the gpt-4 family's newer members first.
	{"gpt-4o", O200K}, {"chatgpt-4o", O200K}, {"gpt-4.1", O200K}, {"gpt-4.5", O200K},
	{"gpt-5", O200K}, {"gpt-oss", O200K}, {"o1", O200K}, {"o3", O200K}, {"o4", O200K},
	{"codex", O200K}, {"omni-moderation", O200K}, {"gpt-realtime", O200K},
	{"gpt-audio", O200K}, {"computer-use", O200K},
	{"gpt-4", CL100K}, {"gpt-3.5", CL100K}, {"gpt-35", CL100K},
	{"text-embedding-3", CL100K}, {"text-embedding-ada-002", CL100K},
	{"davinci-002", CL100K}, {"babbage-002", CL100K},
}
