package main

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// The mock prices requests like a provider's rate limiter does: prompt tokens counted with
// pkoukk/tiktoken-go (an implementation independent of the project's own counter) plus the output
// the request reserves (max_tokens or its API's equivalent, times n). Chat messages follow OpenAI's
// published rule: 3 tokens per message, 1 more per name, 3 to prime the reply.

func init() { tiktoken.SetBpeLoader(tiktoken_loader.NewOfflineLoader()) }

// Price is what one request costs the provider's budget.
type Price struct {
	Provider string // openai, anthropic or azure
	API      string // chat_completions, completions, responses, embeddings, messages
	Model    string
	Prompt   int64
	Output   int64
	// OutputUnset is true when the request names no output maximum (Output is then the default).
	OutputUnset bool
	// BestOf is the completions generated server-side of which n are returned (1 when unset).
	BestOf int
	// Stream asks for server-sent events; IncludeUsage for OpenAI's final usage chunk.
	Stream       bool
	IncludeUsage bool
	// N is the number of choices (chat), Inputs the number of embedding inputs.
	N      int
	Inputs int
	// EncodingFormat is the embeddings' encoding_format (float or base64).
	EncodingFormat string
	// PreviousResponseID is the Responses turn this request continues ("" when none).
	PreviousResponseID string
	// CacheKey names the cacheable prefix of an Anthropic system prompt ("" when none) and
	// CachePrefix is its tokens, part of Prompt (anthropic.go); CacheRead and CacheWrite are
	// what the admission found (a read of a cached prefix, or its write).
	CacheKey                           string
	CachePrefix, CacheRead, CacheWrite int64
}

// Cost is the total the request takes from the token budget.
func (p *Price) Cost() int64 { return p.Prompt + p.Output }

// Pricer counts tokens. It is safe for concurrent use.
type Pricer struct {
	// DefaultOutput is reserved when a request names no maximum output.
	DefaultOutput int64
	// AnthropicEncoding counts Anthropic prompts, scaled by AnthropicFactor. Anthropic publishes
	// no tokenizer for its current models; public comparisons of its count_tokens with tiktoken put
	// Claude at roughly 1.15-1.3x the OpenAI encodings, so the mock counts cl100k_base x 1.25.
	AnthropicEncoding string
	AnthropicFactor   float64
	// factor, when set (SetAnthropicFactor, the control endpoint), replaces AnthropicFactor: a
	// model whose tokenizer changes mid-run.
	factor atomic.Uint64
	// MaxCounted, when positive, is the longest text counted with tiktoken-go (which takes
	// seconds per MiB); a longer one is charged one token per byte, the most a byte-level BPE
	// gives, so that floods of huge bodies stay cheap to the mock and are never under-charged.
	MaxCounted int

	mu   sync.Mutex
	encs map[string]*tiktoken.Tiktoken
}

// anthropicFactor is the factor Anthropic prompts are counted with now.
func (p *Pricer) anthropicFactor() float64 {
	if b := p.factor.Load(); b != 0 {
		return math.Float64frombits(b)
	}
	return p.AnthropicFactor
}

// SetAnthropicFactor changes the factor Anthropic prompts are counted with from now on (f > 0).
func (p *Pricer) SetAnthropicFactor(f float64) { p.factor.Store(math.Float64bits(f)) }

func (p *Pricer) encoding(name string) (*tiktoken.Tiktoken, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e, ok := p.encs[name]; ok {
		return e, nil
	}
	e, err := tiktoken.GetEncoding(name)
	if err != nil {
		return nil, fmt.Errorf("price: encoding %s: %w", name, err)
	}
	if p.encs == nil {
		p.encs = map[string]*tiktoken.Tiktoken{}
	}
	p.encs[name] = e
	return e, nil
}

// encodingFor returns the encoding OpenAI uses for model (o200k_base when unknown).
func encodingFor(model string) string {
	if e, ok := tiktoken.MODEL_TO_ENCODING[model]; ok {
		return e
	}
	for prefix, e := range tiktoken.MODEL_PREFIX_TO_ENCODING {
		if strings.HasPrefix(model, prefix) {
			return e
		}
	}
	return tiktoken.MODEL_O200K_BASE
}

// text is a JSON value that is either a string or a list of content parts with "text" fields
// (OpenAI content parts, Anthropic content blocks).
type text []string

func (t *text) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*t = text{s}
		return nil
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return fmt.Errorf("content is neither a string nor a list of parts")
	}
	*t = (*t)[:0]
	for _, p := range parts {
		*t = append(*t, p.Text)
	}
	return nil
}

type message struct {
	Role    string  `json:"role"`
	Content text    `json:"content"`
	Name    *string `json:"name"`
}

// stringsOrTokens is an embeddings or completions input: a string, a list of strings, a list of
// token ids or a list of lists of token ids.
type stringsOrTokens struct {
	texts  []string
	tokens int64
	n      int
}

func (s *stringsOrTokens) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		s.texts, s.n = []string{one}, 1
		return nil
	}
	var many []string
	if json.Unmarshal(b, &many) == nil {
		s.texts, s.n = many, len(many)
		return nil
	}
	var ids []int64
	if json.Unmarshal(b, &ids) == nil {
		s.tokens, s.n = int64(len(ids)), 1
		return nil
	}
	var lists [][]int64
	if err := json.Unmarshal(b, &lists); err != nil {
		return fmt.Errorf("input is not a string, strings or token ids")
	}
	for _, l := range lists {
		s.tokens += int64(len(l))
	}
	s.n = len(lists)
	return nil
}

type request struct {
	Model               string          `json:"model"`
	Messages            []message       `json:"messages"`
	System              *text           `json:"system"`
	Input               json.RawMessage `json:"input"`
	Instructions        *string         `json:"instructions"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	N                   *int            `json:"n"`
	BestOf              *int            `json:"best_of"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	EncodingFormat     string `json:"encoding_format"`
	PreviousResponseID string `json:"previous_response_id"`
}

// APIOf maps a request path to the provider and API it calls ("" when not a priced endpoint).
func APIOf(path string) (provider, api string) {
	switch path {
	case "/v1/chat/completions":
		return "openai", "chat_completions"
	case "/v1/completions":
		return "openai", "completions"
	case "/v1/responses":
		return "openai", "responses"
	case "/v1/embeddings":
		return "openai", "embeddings"
	case "/v1/messages":
		return "anthropic", "messages"
	}
	if _, api := azureDeployment(path); api != "" {
		return "azure", api
	}
	return "", ""
}

// APIOnHost is APIOf on host: on Anthropic's host, /v1/chat/completions is Anthropic's
// OpenAI-compatible endpoint, and no other OpenAI path exists.
func APIOnHost(host, path string) (provider, api string) {
	provider, api = APIOf(path)
	if h, _, _ := strings.Cut(strings.ToLower(host), ":"); h == "api.anthropic.com" {
		switch api {
		case "messages":
		case "chat_completions":
			provider = "anthropic"
		default:
			return "", ""
		}
	}
	return provider, api
}

// Price reads and prices one request body for path.
func (p *Pricer) Price(path string, body []byte) (*Price, error) { return p.PriceOn("", path, body) }

// PriceOn prices one request body for path on host: Anthropic's host also serves its OpenAI SDK
// compatibility layer, /v1/chat/completions, whose requests count against Anthropic's limits
// ("Rate limits follow Anthropic's standard limits for the /v1/messages endpoint",
// platform.claude.com/docs/en/api/openai-sdk) and are counted as Anthropic counts.
func (p *Pricer) PriceOn(host, path string, body []byte) (*Price, error) {
	provider, api := APIOnHost(host, path)
	if api == "" {
		return nil, fmt.Errorf("price: %s is not a priced endpoint", path)
	}
	// Read as the providers' Python services read it (pyjson.go).
	body, err := pythonJSON(body)
	if err != nil {
		return nil, fmt.Errorf("price: body: %w", err)
	}
	var r request
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("price: body: %w", err)
	}
	if d, _ := azureDeployment(path); provider == "azure" {
		// The deployment decides the model, whatever the body says (azure.go).
		r.Model = d
	}
	if r.Model == "" {
		return nil, fmt.Errorf("price: body names no model")
	}
	pr := &Price{Provider: provider, API: api, Model: r.Model, Stream: r.Stream, N: 1, BestOf: 1, EncodingFormat: r.EncodingFormat,
		PreviousResponseID: r.PreviousResponseID}
	if r.StreamOptions != nil {
		pr.IncludeUsage = r.StreamOptions.IncludeUsage
	}
	if r.N != nil && *r.N > 1 {
		pr.N = *r.N
	}
	if r.BestOf != nil && *r.BestOf > 1 {
		pr.BestOf = *r.BestOf
	}
	encName := encodingFor(r.Model)
	if provider == "anthropic" {
		encName = p.AnthropicEncoding
	}
	enc, err := p.encoding(encName)
	if err != nil {
		return nil, err
	}
	count := func(s string) int64 {
		if p.MaxCounted > 0 && len(s) > p.MaxCounted {
			return int64(len(s))
		}
		return int64(len(enc.EncodeOrdinary(s)))
	}
	chat := func(msgs []message) int64 {
		n := int64(3) // every reply is primed with <|start|>assistant<|message|>
		for _, m := range msgs {
			n += 3 + count(m.Role)
			for _, t := range m.Content {
				n += count(t)
			}
			if m.Name != nil {
				n += count(*m.Name) + 1
			}
		}
		return n
	}
	output := func(vals ...*int64) int64 {
		for _, v := range vals {
			if v != nil {
				return *v
			}
		}
		pr.OutputUnset = true
		return p.DefaultOutput
	}

	switch api {
	case "chat_completions":
		pr.Prompt = chat(r.Messages)
		if provider == "anthropic" && p.anthropicFactor() > 0 {
			pr.Prompt = int64(math.Ceil(float64(pr.Prompt) * p.anthropicFactor()))
		}
		pr.Output = output(r.MaxCompletionTokens, r.MaxTokens) * int64(pr.N)
	case "completions":
		var in stringsOrTokens
		if err := json.Unmarshal(fieldOr(body, "prompt"), &in); err != nil {
			return nil, fmt.Errorf("price: prompt: %w", err)
		}
		pr.Prompt = in.tokens
		for _, t := range in.texts {
			pr.Prompt += count(t)
		}
		limit := int64(16) // the legacy endpoint's default max_tokens
		pr.Output = output(r.MaxTokens, &limit) * int64(pr.N) * int64(max(in.n, 1))
	case "responses":
		var msgs []message
		if r.Instructions != nil {
			msgs = append(msgs, message{Role: "system", Content: text{*r.Instructions}})
		}
		if len(r.Input) > 0 {
			var s string
			if json.Unmarshal(r.Input, &s) == nil {
				msgs = append(msgs, message{Role: "user", Content: text{s}})
			} else {
				var items []message
				if err := json.Unmarshal(r.Input, &items); err != nil {
					return nil, fmt.Errorf("price: input: %w", err)
				}
				msgs = append(msgs, items...)
			}
		}
		pr.Prompt = chat(msgs)
		pr.Output = output(r.MaxOutputTokens)
	case "embeddings":
		var in stringsOrTokens
		if err := json.Unmarshal(r.Input, &in); err != nil {
			return nil, fmt.Errorf("price: input: %w", err)
		}
		pr.Prompt = in.tokens
		for _, t := range in.texts {
			pr.Prompt += count(t)
		}
		pr.Inputs = in.n
	case "messages":
		msgs := r.Messages
		if r.System != nil {
			msgs = append([]message{{Role: "system", Content: *r.System}}, msgs...)
		}
		pr.Prompt = chat(msgs)
		if p.anthropicFactor() > 0 {
			pr.Prompt = int64(math.Ceil(float64(pr.Prompt) * p.anthropicFactor()))
		}
		if texts, key := systemPrefix(r.Model, fieldOr(body, "system")); key != "" {
			var n int64
			for _, t := range texts {
				n += count(t)
			}
			if p.anthropicFactor() > 0 {
				n = int64(math.Ceil(float64(n) * p.anthropicFactor()))
			}
			pr.CacheKey, pr.CachePrefix = key, n
		}
		if r.MaxTokens == nil {
			return nil, fmt.Errorf("price: max_tokens: Field required")
		}
		pr.Output = *r.MaxTokens
	}
	return pr, nil
}

// fieldOr returns the raw JSON of a top-level field, or null.
func fieldOr(body []byte, key string) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) == nil {
		if v, ok := m[key]; ok {
			return v
		}
	}
	return []byte("null")
}
