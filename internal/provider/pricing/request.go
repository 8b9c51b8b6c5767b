package pricing

import (
	"path"
	"unicode/utf8"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// OutputRule sets the output reservation for models matching a glob.
type OutputRule struct {
	// Model is a path.Match glob over the model name, e.g. "gpt-4o-mini*" or "claude-*".
	Model string
	// Tokens is the output reserved when the request names no maximum.
	Tokens int64
}

// Config is what every room reads of tokens.Options, validated and with its defaults filled by
// tokens.New; the settings of one family are its room's own (its Settings, which
// internal/provider/dialects.Price hands it). It is immutable once a Request uses it, and so
// safe for concurrent use.
type Config struct {
	// DefaultOutputTokens and OutputRules set the output reserved when a request names no
	// maximum (DefaultOutput).
	DefaultOutputTokens int64
	OutputRules         []OutputRule
	// Cache holds the counts of resent texts; nil when off.
	Cache *Cache
	// CL100K and O200K are OpenAI's encodings; Fallback counts the text of models with no
	// known encoding (tokens.Options.FallbackEncoding).
	CL100K, O200K, Fallback *tiktoken.Encoding
}

// Encoding is the encoding of model (tiktoken.EncodingForModel), or Fallback with known false.
func (c *Config) Encoding(model string) (enc *tiktoken.Encoding, known bool) {
	switch tiktoken.EncodingForModel(model) {
	case tiktoken.O200K:
		return c.O200K, true
	case tiktoken.CL100K:
		return c.CL100K, true
	}
	return c.Fallback, false
}

// MaxChoices bounds the n (and best_of) a request multiplies its output by.
const MaxChoices = 128

// MaxPiece bounds the scratch memory of one request: a run longer than this that cannot be
// cut (one character repeated) is counted in chunks (ReasonLongRun). 256 KiB of run needs
// about 10 MiB of scratch.
const MaxPiece = 256 << 10

// Scratch is the memory one Request reuses: the parsed body and the buffers its strings and
// image headers are decoded into. Pool it; it is not safe for concurrent use.
type Scratch struct {
	Doc Doc
	buf []byte // unescaped strings
	img []byte // decoded image headers
}

// Counting says how a Request counts text.
type Counting uint8

const (
	// Tokenize counts every text with the Request's encoding.
	Tokenize Counting = iota
	// ByLength costs every text its length in bytes, the most a byte-level BPE can give it
	// (tokens.Pricer.Bound).
	ByLength
)

// Request is the state of pricing one request: the estimate being built, the parsed body, and
// how its texts are counted. tokens.Pricer starts one per request (recognising the provider and
// API, parsing the body) and hands it to the provider's room, which sets the encoding, walks Doc
// from the root and fills Est.PromptTokens and Est.OutputTokens. It is a value on the
// caller's stack: not safe for concurrent use.
type Request struct {
	// Est is the estimate being built: Provider, API and Model are set before a room is called.
	Est Estimate
	// Doc is the parsed body.
	Doc *Doc
	// Resent is set while a room counts what clients send again on later requests (system
	// prompts, tools, every message but the last): those counts go through Config.Cache.
	Resent bool

	cfg      *Config
	sc       *Scratch
	enc      *tiktoken.Encoding
	fixed    *tiktoken.Encoding // FixEncoding's, nil when the room chooses
	counting Counting
	// bounded is set once an upper bound decides the price (its reason is Est.Reason); unseen
	// when the request brings input its body does not show.
	bounded, unseen bool
}

// NewRequest starts a Request on cfg and sc, counting as c says. It allocates nothing.
func NewRequest(cfg *Config, sc *Scratch, c Counting) Request {
	return Request{cfg: cfg, sc: sc, Doc: &sc.Doc, counting: c}
}

// Config is the configuration the Request was started with.
func (r *Request) Config() *Config { return r.cfg }

// Tokenizes reports whether texts are counted with the encoding (not ByLength).
func (r *Request) Tokenizes() bool { return r.counting == Tokenize }

// SetEncoding sets the encoding texts are counted with. The room sets it before it counts; an
// encoding fixed by FixEncoding stays.
func (r *Request) SetEncoding(enc *tiktoken.Encoding) {
	if r.fixed != nil {
		enc = r.fixed
	}
	r.enc = enc
}

// FixEncoding makes enc the encoding of every text of the request, whatever the room chooses:
// a declared provider's (provider.Declared.Encoding, or cl100k_base under its Ratio).
func (r *Request) FixEncoding(enc *tiktoken.Encoding) { r.fixed, r.enc = enc, enc }

// EncodingFixed reports whether FixEncoding chose the encoding: the model's being unknown is
// then no reason for an approximation.
func (r *Request) EncodingFixed() bool { return r.fixed != nil }

// Approx records why the estimate is approximate; the first reason recorded stays.
func (r *Request) Approx(why Reason) {
	if r.Est.Reason == "" {
		r.Est.Reason = why
	}
}

// Bound records the reason an upper bound sets the price. The first such reason wins over any
// approximation recorded before it: it is what decided the price.
func (r *Request) Bound(why Reason) {
	if !r.bounded {
		r.Est.Reason = why
		r.bounded = true
	}
}

// Unseen records input the body refers to but does not hold (a stored conversation, a file, a
// URL, a tool server): tokens.Pricer raises the prompt to its bound (internal/tokens/bound.go).
func (r *Request) Unseen(why Reason) {
	r.Bound(why)
	r.unseen = true
}

// HasUnseen reports whether Unseen was called.
func (r *Request) HasUnseen() bool { return r.unseen }

// Count counts raw bytes as text, through the count cache for resent text.
func (r *Request) Count(b []byte) int64 {
	if r.counting == ByLength {
		return int64(len(b)) // see ByLength
	}
	c := r.cfg.Cache
	if !r.Resent || c == nil || len(b) < minCached {
		n, chunked := r.enc.CountBounded(b, MaxPiece)
		r.flags(chunked, !utf8.Valid(b))
		return int64(n)
	}
	idx, tag := c.key(b, r.enc.Name())
	n, chunked, invalid, ok := c.get(idx, tag)
	if !ok {
		n, chunked = r.enc.CountBounded(b, MaxPiece)
		invalid = !utf8.Valid(b)
		c.put(idx, tag, n, chunked, invalid)
	}
	r.flags(chunked, invalid)
	return int64(n)
}

// flags records what made a count approximate.
func (r *Request) flags(chunked, invalid bool) {
	if invalid {
		r.Approx(ReasonInvalidUTF8)
	}
	if chunked {
		r.Approx(ReasonLongRun)
	}
}

// CountText counts the decoded string value i (0 if it is not a string).
func (r *Request) CountText(i int) int64 {
	t, ok := r.Doc.Text(r.sc.buf, i)
	if !ok {
		return 0
	}
	if r.Doc.Escaped(i) {
		r.sc.buf = t[:0] // keep the grown buffer
	}
	return r.Count(t)
}

// CountRaw counts the JSON text of value i (0 for no value).
func (r *Request) CountRaw(i int) int64 {
	if i < 0 {
		return 0
	}
	return r.Count(r.Doc.Raw(i))
}

// DefaultOutput is the output reservation when the request names none: the first
// Config.OutputRules glob matching the model, else Config.DefaultOutputTokens; nothing for
// embeddings and unknown APIs.
func (r *Request) DefaultOutput() int64 {
	if r.Est.API == provider.Embeddings || r.Est.API == provider.UnknownAPI {
		return 0
	}
	for _, o := range r.cfg.OutputRules {
		if ok, _ := path.Match(o.Model, r.Est.Model); ok {
			return o.Tokens
		}
	}
	return r.cfg.DefaultOutputTokens
}

// MaxOutput reads the first present key of keys in object root as the output maximum, else def
// (ReasonWrongType when it is not a non-negative integer).
func (r *Request) MaxOutput(root int, def int64, keys ...string) int64 {
	d := r.Doc
	for _, k := range keys {
		i := d.Get(root, k)
		if i < 0 || d.Kind(i) == Null {
			continue
		}
		if v, ok := d.Int(i); ok {
			return v
		}
		r.Approx(ReasonWrongType)
		return def
	}
	r.Est.OutputUnset = true
	return def
}

// Choices reads the count key of object root ("n", "best_of"): default 1, at most MaxChoices.
func (r *Request) Choices(root int, key string) int64 {
	d := r.Doc
	i := d.Get(root, key)
	if i < 0 || d.Kind(i) == Null {
		return 1
	}
	v, ok := d.Int(i)
	if !ok || v < 1 {
		r.Approx(ReasonWrongType)
		return 1
	}
	return min(v, MaxChoices)
}

// ImageSize is the pixel size of the image the string value url gives as a data URL
// ("data:image/png;base64,..."), read from its header (PNG, GIF, JPEG, WebP). ok is false for
// plain URLs, unrecognised data and values that are not strings.
func (r *Request) ImageSize(url int) (w, h int, ok bool) {
	u, ok := r.Doc.Text(r.sc.buf, url)
	if !ok {
		return 0, 0, false
	}
	return imageSize(u, r.sc.img)
}

// Base64ImageSize is the pixel size of the image whose bytes the string value data holds in
// base64, read from its header; ok is false when it cannot be read.
func (r *Request) Base64ImageSize(data int) (w, h int, ok bool) {
	b, ok := r.Doc.Text(r.sc.buf, data)
	if !ok {
		return 0, 0, false
	}
	img := decodeB64Prefix(b, r.sc.img)
	r.sc.img = img[:0] // keep the grown buffer
	return headerSize(img)
}

// SatMul is a*b for non-negative counts, saturating at 2^50.
func SatMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > (1<<50)/b {
		return 1 << 50
	}
	return a * b
}
