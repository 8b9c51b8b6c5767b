package tokens

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"path"
	"strings"
	"sync"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// OutputRule sets the output reservation for models matching a glob.
type OutputRule = pricing.OutputRule

// Options configures a Pricer. The zero value is usable: New fills the documented defaults.
type Options struct {
	// DefaultOutputTokens is the output reserved when a request names no maximum
	// (max_tokens, max_completion_tokens, max_output_tokens) and no OutputRules entry matches
	// its model. It is a typical answer's budget, not the model's context size. Default 4096.
	DefaultOutputTokens int64
	// OutputRules override DefaultOutputTokens per model; the first match wins.
	OutputRules []OutputRule
	// FallbackEncoding counts text for models with no known OpenAI encoding
	// (OpenAI-compatible servers, new model names). Default "cl100k_base": it yields as many
	// or more tokens than o200k_base for nearly all text, so unknown models are not
	// under-priced by picking the denser vocabulary.
	FallbackEncoding string
	// MaxBodyBytes bounds the (decoded) body that is parsed, and so the time pricing takes
	// (about 50 ms per MiB of English); bigger bodies are priced from their first
	// MaxBodyBytes scaled to their size. Default 4 MiB.
	MaxBodyBytes int64
	// MaxDecodedBytes bounds what a gzip or deflate body may decode to. Default 4 MiB.
	MaxDecodedBytes int64
	// OpenAI are the settings of OpenAI's family (OpenAI, Azure OpenAI, OpenAI-compatible
	// servers): the Azure deployments' models and the cost of an image of unknown size. The
	// zero value is its defaults.
	OpenAI openai.Settings
	// Anthropic are the settings of Anthropic's family: the multipliers of its estimate and the
	// cost of an image of unknown size. The zero value is its defaults.
	Anthropic anthropic.Settings
	// RequestBufferBytes is Envoy's with_request_body.max_request_bytes (1 MiB in the shipped
	// envoy.yaml): a body of this size or more that came without a content-length may be the
	// first part only (Envoy reports it complete), and is priced at the upper bound. Default
	// 1 MiB.
	RequestBufferBytes int64
	// ModelLimits are the per-model context windows and maximum outputs the upper bounds use
	// (bound.go); first match wins. Nil means DefaultModelLimits.
	ModelLimits []ModelLimits
	// UnreadableOutputTokens is the output reserved for a body that cannot be read in full
	// whose model ModelLimits does not know, when it names no max_tokens that can be trusted.
	// 0 means the provider's largest maximum output (128,000).
	UnreadableOutputTokens int64
	// RefuseUnreadable prices every body that cannot be read in full above any bucket, so that
	// it is refused (413) instead of admitted at its upper bound.
	RefuseUnreadable bool
	// UnseenContextTokens bounds the input a request brings that its body does not show
	// (previous_response_id, conversation, stored prompts, file ids, document URLs, MCP
	// servers): it is added to the visible prompt, up to the context window. 0 means the
	// model's context window.
	UnseenContextTokens int64
	// Providers are the providers the limits file declares, by host (nil: none): a request to
	// one of their hosts is theirs, priced by their dialect's room with their encoding or
	// estimate (dialects.RecognizeIn). Read only once New has it.
	Providers *provider.Hosts
	// CountCache is the number of entries (8 bytes each, rounded up to a power of two, at most
	// 2^24) of the cache of counts of the texts clients resend: system prompts, tool
	// definitions and every message of a conversation but the last. 0 means
	// DefaultCountCache (65,536 entries, 512 KiB); a negative value turns it off.
	CountCache int
}

// Defaults New applies to zero Options fields.
const (
	DefaultOutputTokens = 4096
	DefaultMaxBodyBytes = 4 << 20
	DefaultCountCache   = 1 << 16
	// DefaultRequestBufferBytes is the max_request_bytes of the shipped envoy.yaml.
	DefaultRequestBufferBytes = 1 << 20
)

// Pricer prices requests. It is immutable after New and safe for concurrent use.
type Pricer struct {
	opts     Options
	fallback *tiktoken.Encoding
	cl100k   *tiktoken.Encoding
	o200k    *tiktoken.Encoding
	// cfg is what every room reads of opts; rooms are opts.OpenAI and opts.Anthropic, validated
	// and with their defaults filled.
	cfg   pricing.Config
	rooms dialects.Settings
	work  sync.Pool // *work
}

// work is the per-call scratch, pooled.
type work struct {
	sc      pricing.Scratch // the parsed body and its decoded strings
	decoded []byte          // decompressed body
	text    []byte          // a UTF-16 or UTF-32 body as UTF-8
	gz      *gzip.Reader
}

// New validates opts, fills defaults and loads both encodings (so the first request does not
// pay for it). Every invalid option is reported.
func New(opts Options) (*Pricer, error) {
	var errs []error
	if opts.DefaultOutputTokens == 0 {
		opts.DefaultOutputTokens = DefaultOutputTokens
	}
	if opts.FallbackEncoding == "" {
		opts.FallbackEncoding = tiktoken.CL100K
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxDecodedBytes == 0 {
		opts.MaxDecodedBytes = DefaultMaxBodyBytes
	}
	if opts.CountCache == 0 {
		opts.CountCache = DefaultCountCache
	}
	if opts.RequestBufferBytes == 0 {
		opts.RequestBufferBytes = DefaultRequestBufferBytes
	}
	if opts.ModelLimits == nil {
		opts.ModelLimits = DefaultModelLimits()
	}
	for i, l := range opts.ModelLimits {
		if _, err := path.Match(l.Model, ""); err != nil {
			errs = append(errs, fmt.Errorf("tokens: ModelLimits[%d]: model glob %q: %w", i, l.Model, err))
		}
		if l.Context <= 0 || l.Output < 0 || l.Context > 1<<40 || l.Output > 1<<40 {
			errs = append(errs, fmt.Errorf("tokens: ModelLimits[%d]: context %d, output %d out of range", i, l.Context, l.Output))
		}
	}
	if opts.RequestBufferBytes < 0 || opts.RequestBufferBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("tokens: RequestBufferBytes %d out of range (0, 1 GiB]", opts.RequestBufferBytes))
	}
	if opts.UnreadableOutputTokens < 0 || opts.UnreadableOutputTokens > 1<<40 {
		errs = append(errs, fmt.Errorf("tokens: UnreadableOutputTokens %d out of range", opts.UnreadableOutputTokens))
	}
	if opts.UnseenContextTokens < 0 || opts.UnseenContextTokens > 1<<40 {
		errs = append(errs, fmt.Errorf("tokens: UnseenContextTokens %d out of range", opts.UnseenContextTokens))
	}
	if opts.CountCache > 1<<24 {
		errs = append(errs, fmt.Errorf("tokens: CountCache %d entries is over 2^24", opts.CountCache))
	}
	if opts.DefaultOutputTokens < 0 {
		errs = append(errs, fmt.Errorf("tokens: DefaultOutputTokens %d is negative", opts.DefaultOutputTokens))
	}
	for i, r := range opts.OutputRules {
		if _, err := path.Match(r.Model, ""); err != nil {
			errs = append(errs, fmt.Errorf("tokens: OutputRules[%d]: model glob %q: %w", i, r.Model, err))
		}
		if r.Tokens < 0 {
			errs = append(errs, fmt.Errorf("tokens: OutputRules[%d]: tokens %d is negative", i, r.Tokens))
		}
	}
	if opts.MaxBodyBytes < 0 || opts.MaxBodyBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("tokens: MaxBodyBytes %d out of range (0, 1 GiB]", opts.MaxBodyBytes))
	}
	if opts.MaxDecodedBytes < 0 || opts.MaxDecodedBytes > 1<<30 {
		errs = append(errs, fmt.Errorf("tokens: MaxDecodedBytes %d out of range (0, 1 GiB]", opts.MaxDecodedBytes))
	}
	rooms := dialects.Settings{OpenAI: opts.OpenAI, Anthropic: opts.Anthropic}
	if err := rooms.Validate(); err != nil {
		errs = append(errs, err)
	}
	p := &Pricer{opts: opts, rooms: rooms}
	var err error
	if p.cl100k, err = tiktoken.Get(tiktoken.CL100K); err != nil {
		errs = append(errs, err)
	}
	if p.o200k, err = tiktoken.Get(tiktoken.O200K); err != nil {
		errs = append(errs, err)
	}
	if p.fallback, err = tiktoken.Get(opts.FallbackEncoding); err != nil {
		errs = append(errs, fmt.Errorf("tokens: FallbackEncoding: %w", err))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.cfg = pricing.Config{
		DefaultOutputTokens: opts.DefaultOutputTokens,
		OutputRules:         opts.OutputRules,
		Cache:               pricing.NewCache(opts.CountCache),
		CL100K:              p.cl100k,
		O200K:               p.o200k,
		Fallback:            p.fallback,
	}
	p.work.New = func() any { return new(work) }
	return p, nil
}

// Estimate prices one request. It never panics, runs in time linear in the body size (bounded
// by MaxBodyBytes and MaxDecodedBytes), does not retain in, and is safe for concurrent use.
func (p *Pricer) Estimate(in *Input) (est Estimate) { return p.estimate(in, false) }

// estimate is Estimate, or Bound when noCount is set.
func (p *Pricer) estimate(in *Input, noCount bool) (est Estimate) {
	if in == nil {
		return Estimate{Reason: ReasonNotJSON}
	}
	w := p.work.Get().(*work)
	defer func() {
		if r := recover(); r != nil {
			// A bug, not an input problem: price the raw body rather than fail the request.
			body := in.Body[:min(len(in.Body), int(p.opts.MaxBodyBytes))]
			n := int64(len(body))
			if !noCount {
				n = int64(p.fallback.Count(body))
			}
			est = Estimate{Provider: est.Provider, Name: est.Name, API: est.API, Reason: ReasonInternal, PromptTokens: n}
			w = new(work) // do not pool scratch a panic may have left inconsistent
		}
		p.work.Put(w)
	}()
	counting := pricing.Tokenize
	if noCount {
		counting = pricing.ByLength
	}
	s := call{Request: pricing.NewRequest(&p.cfg, &w.sc, counting), p: p, w: w}
	if noCount {
		s.Est.Reason = ReasonDeadline
	}
	var d *provider.Declared
	s.Est.Provider, s.Est.API, s.deployment, d = dialects.RecognizeIn(p.opts.Providers, in.Host, in.Path)
	if d != nil {
		s.declare(d)
	}
	s.price(in)
	s.Est.Exact = s.Est.Reason == ""
	s.Est.PromptTokens = max(s.Est.PromptTokens, 0)
	s.Est.OutputTokens = max(s.Est.OutputTokens, 0)
	return s.Est
}

// call is the state of one Estimate call: the rooms' pricing.Request, and what only this
// package reads (the scratch of decoding, the Azure deployment).
type call struct {
	pricing.Request
	p          *Pricer
	w          *work
	deployment string
	// ratio is the declared provider's estimate (provider.Declared.Ratio), 0 when none.
	ratio float64
}

// declare prices the request as declared provider d's: named after it, its texts counted in its
// encoding, or in cl100k_base scaled by its estimate's ratio (ReasonDeclaredEstimate).
func (s *call) declare(d *provider.Declared) {
	s.Est.Name = d.Name
	switch {
	case d.Ratio > 0:
		s.ratio = d.Ratio
		s.FixEncoding(s.p.cl100k)
		s.Approx(ReasonDeclaredEstimate)
	case d.Encoding == tiktoken.O200K:
		s.FixEncoding(s.p.o200k)
	case d.Encoding == tiktoken.CL100K:
		s.FixEncoding(s.p.cl100k)
	}
}

func (s *call) price(in *Input) {
	if s.Est.API == Unpriced {
		s.Approx(ReasonUnpricedAPI) // no tokens: request limits count it
		return
	}
	size, partial := s.extent(in)
	if s.Est.API == UnknownAPI {
		s.unknownAPI(in, size, partial)
		return
	}
	body := in.Body
	enc := strings.ToLower(strings.TrimSpace(in.ContentEncoding))
	switch enc {
	case "", "identity":
	case "gzip", "x-gzip", "deflate":
		decoded, _, err := s.decode(enc, body)
		switch {
		case len(decoded) == 0 && len(body) > 0:
			// Nothing decodes: the provider can only read it plain, if at all.
			s.plainOrBound(ReasonGzip, body, partial)
			return
		case partial:
			s.unreadable(ReasonPartialBody, s.utf8(decoded), -1, false)
			return
		case err != nil:
			// Corrupt, truncated or beyond MaxDecodedBytes: its decoded size is unknown.
			s.unreadable(ReasonGzip, s.utf8(decoded), -1, false)
			return
		}
		body, size = decoded, int64(len(decoded))
	default:
		s.plainOrBound(ReasonUnsupportedEncoding, body, partial)
		return
	}
	if partial {
		s.unreadable(ReasonPartialBody, s.utf8(body), s.textSize(body, size), false)
		return
	}
	text := s.utf8(body)
	if int64(len(text)) > s.p.opts.MaxBodyBytes {
		s.unreadable(ReasonTooLarge, text, s.textSize(body, size), true)
		return
	}
	s.parsed(text, s.textSize(body, size))
}

// parsed prices a whole body that is text: field by field when it parses as a JSON object,
// else at the upper bound. size is its size in bytes as the bound counts them.
func (s *call) parsed(body []byte, size int64) {
	if err := s.Doc.Parse(body); err != nil || s.Doc.Kind(0) != pricing.Object {
		s.unreadable(ReasonNotJSON, body, size, true)
		return
	}
	root := 0
	if s.Est.Model = s.pathModel(); s.Est.Model == "" {
		model := s.Doc.Get(root, "model")
		if m, ok := s.Doc.Text(nil, model); ok {
			s.Est.Model = string(m)
		} else if model >= 0 && s.Doc.Kind(model) != pricing.Null {
			s.Approx(ReasonWrongType)
		}
	}
	if st := s.Doc.Get(root, "stream"); s.Doc.Kind(st) == pricing.Bool {
		s.Est.Stream = s.Doc.Raw(st)[0] == 't'
	}
	dialects.Price(&s.Request, root, &s.p.rooms)
	if s.ratio > 0 {
		s.Est.PromptTokens = scaled(s.Est.PromptTokens, s.ratio)
		for i := range s.Est.NCache {
			s.Est.CachePoints[i].Tokens = scaled(s.Est.CachePoints[i].Tokens, s.ratio)
		}
	}
	s.Est.Chars = int64(len(body))
	if s.Est.OutputUnset {
		l, _ := s.limits()
		s.Est.Context = l.Context
	}
	if s.HasUnseen() {
		s.addUnseen()
	}
}

// plainOrBound prices a body whose content-encoding cannot be decoded: as plain JSON when it is
// (the provider can only have ignored the header), else at the upper bound of an unknown size.
// Either way it costs at least its plain reading.
func (s *call) plainOrBound(r Reason, body []byte, partial bool) {
	s.Bound(r)
	text := s.utf8(body)
	if !partial && int64(len(text)) <= s.p.opts.MaxBodyBytes {
		if s.Doc.Parse(text) == nil && s.Doc.Kind(0) == pricing.Object {
			s.parsed(text, int64(len(body)))
			return
		}
	}
	s.unreadable(r, text, -1, false)
}

// extent returns the body's whole size (-1 when unknown) and whether in.Body is only its first
// part: shorter than its content-length, marked partial by Envoy, or, without a
// content-length, as long as Envoy's buffer (Envoy then reports a body cut at exactly
// max_request_bytes as complete).
func (s *call) extent(in *Input) (size int64, partial bool) {
	n := int64(len(in.Body))
	if in.NoContentLength {
		if in.Partial || in.ContentLength > n || n >= s.p.opts.RequestBufferBytes {
			return -1, true
		}
		return n, false
	}
	switch {
	case in.ContentLength > n:
		return in.ContentLength, true
	case in.Partial:
		return -1, true
	}
	return n, false
}

// utf8 returns body as UTF-8 (asUTF8), in the call's scratch.
func (s *call) utf8(body []byte) []byte {
	text, grown := asUTF8(body, s.w.text)
	s.w.text = grown[:0]
	return text
}

// textSize is the size the bound counts for a body of size bytes: 1.5 times it for UTF-16,
// whose 2-byte units can become 3 bytes of UTF-8.
func (s *call) textSize(body []byte, size int64) int64 {
	if size < 0 {
		return size
	}
	if cs, _ := detectCharset(body); cs == utf16BE || cs == utf16LE {
		return size + size/2
	}
	return size
}

// unknownAPI prices a path that is not one of the priced APIs: its raw body counted as text
// (a prefix scaled to the declared size), no output.
func (s *call) unknownAPI(in *Input, size int64, partial bool) {
	s.Approx(ReasonUnknownAPI)
	body := in.Body[:min(int64(len(in.Body)), s.p.opts.MaxBodyBytes)]
	enc, known := s.p.cfg.Encoding(sniffModel(body))
	s.SetEncoding(enc)
	if !known {
		s.Approx(ReasonUnknownModel)
	}
	scale := 1.0
	switch {
	case size > int64(len(body)) && len(body) > 0:
		scale = float64(size) / float64(len(body))
	case partial:
		scale = 2 // total size unknown: assume at least twice what was received
	}
	s.Est.PromptTokens = scaled(s.Count(body), scale)
}

// pathModel is the model the request's path names (its deployment label), "" when it names
// none. The path decides, never the body's "model": an Azure deployment's model is the one
// deployed under it (openai.Settings.DeploymentModel); Bedrock's is the path's modelId label,
// URL-encoded by the SDKs (':' as %3A, an ARN's '/' as %2F), and a Gemini or Vertex AI path
// (models/{model}:generateContent) names the model itself: the model is their decoding.
func (s *call) pathModel() string {
	d := s.deployment
	if d == "" || s.Est.Provider == AzureOpenAI {
		return s.p.rooms.OpenAI.DeploymentModel(d)
	}
	if strings.IndexByte(d, '%') >= 0 {
		if u, err := url.PathUnescape(d); err == nil {
			return u
		}
	}
	return d
}

// errDecodeLimit reports a body that decodes beyond MaxDecodedBytes.
var errDecodeLimit = errors.New("decoded body too large")

// decode decompresses body into pooled memory, stopping at MaxDecodedBytes. It returns what was
// decoded, how many compressed bytes produced it, and an error when the stream is corrupt,
// truncated or too large.
func (s *call) decode(enc string, body []byte) ([]byte, int, error) {
	src := &countingReader{r: bytes.NewReader(body)}
	var r io.Reader
	var err error
	switch enc {
	case "deflate":
		// HTTP "deflate" is zlib-wrapped; some clients send raw deflate.
		if len(body) >= 2 && (uint16(body[0])<<8|uint16(body[1]))%31 == 0 && body[0]&0x0f == 8 {
			r, err = zlib.NewReader(src)
		} else {
			r = flate.NewReader(src)
		}
	default:
		if s.w.gz == nil {
			s.w.gz, err = gzip.NewReader(src)
		} else {
			err = s.w.gz.Reset(src)
		}
		r = s.w.gz
	}
	if err != nil {
		return nil, src.n, err
	}
	limit := s.p.opts.MaxDecodedBytes
	out := s.w.decoded[:0]
	for {
		if int64(len(out)) >= limit {
			s.w.decoded = out
			return out, src.n, errDecodeLimit
		}
		if len(out) == cap(out) {
			out = append(out, 0)[:len(out)]
		}
		n, err := r.Read(out[len(out):min(cap(out), int(limit))])
		out = out[:len(out)+n]
		if err == io.EOF {
			s.w.decoded = out
			return out, src.n, nil
		}
		if err != nil {
			s.w.decoded = out
			return out, src.n, err
		}
	}
}

type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func (c *countingReader) ReadByte() (byte, error) {
	b, err := c.r.ReadByte()
	if err == nil {
		c.n++
	}
	return b, err
}

func scaled(n int64, f float64) int64 {
	v := math.Ceil(float64(n) * f)
	if v > 1<<50 || math.IsNaN(v) {
		return 1 << 50
	}
	return int64(v)
}

// sniffModel finds "model":"..." in a body that could not be parsed, to pick an encoding.
func sniffModel(body []byte) string {
	i := bytes.Index(body, []byte(`"model"`))
	if i < 0 {
		return ""
	}
	rest := bytes.TrimLeft(body[i+7:], " \t\r\n")
	if len(rest) == 0 || rest[0] != ':' {
		return ""
	}
	rest = bytes.TrimLeft(rest[1:], " \t\r\n")
	if len(rest) == 0 || rest[0] != '"' {
		return ""
	}
	end := bytes.IndexByte(rest[1:], '"')
	if end < 0 || end > 200 {
		return ""
	}
	return string(rest[1 : 1+end])
}
