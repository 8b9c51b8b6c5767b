package pricing

import (
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Estimate is the price of one request: what tokens.Pricer returns and the rooms fill in. A
// plain value.
type Estimate struct {
	// Provider is the provider's API family: for a provider the limits file declares, the
	// family whose dialect it speaks (provider.Declared.Family).
	Provider provider.ID
	// Name is the declared provider's name, "" for a built-in one (ProviderName).
	Name string
	API  provider.API
	// Model is the model the request calls: on an Azure deployment path the deployment's
	// (openai.Settings.DeploymentModel), elsewhere the body's; "" when unknown.
	// Callers must not log it without bounding its length.
	Model string
	// PromptTokens is the input token count (exact or estimated).
	PromptTokens int64
	// OutputTokens is the output reserved: max_tokens (or its API's equivalent) times n, or the
	// configured default.
	OutputTokens int64
	// OutputUnset is true when the request names no output maximum: OutputTokens is the
	// configured default, and Context the model's context window (0 when unknown), for the
	// providers that reserve that instead (provider.ContextWindow).
	OutputUnset bool
	Context     int64
	// Chars is the size in bytes of the (decoded) body that was read field by field, for the
	// providers that count characters (provider.MaxOfChars); 0 when it was priced at a bound.
	Chars int64
	// CachePoints are the request's prompt-cache breakpoints (Anthropic's cache_control), the
	// first NCache of them, in prefix order; CacheRead is the tokens of the longest prefix the
	// provider is expected to read from its cache (internal/promptcache sets it; part of
	// PromptTokens; 0 when none).
	CachePoints [MaxCachePoints]CachePoint
	NCache      int
	CacheRead   int64
	// Stream is true when the request asks for a streamed response.
	Stream bool
	// Exact is true when PromptTokens equals what the provider will count.
	Exact bool
	// Reason says why the estimate is approximate: a stable reason code ("" when Exact).
	Reason Reason
	// Static is the prompt estimate before a learned factor (internal/learn) was applied to
	// PromptTokens and the cache points: set when the limiter learns this estimate's error (the
	// filter sets it), 0 otherwise.
	Static int64
}

// MaxCachePoints is the most breakpoints a request marks (Anthropic allows four:
// https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
const MaxCachePoints = 4

// CachePoint is one cacheable prefix of a request: its key (a hash of the model and the
// prefix's content, seeded per process, never stored outside it), its estimated tokens, and how
// long the provider keeps it after its last use.
type CachePoint struct {
	Key    uint64
	Tokens int64
	TTL    time.Duration
}

// ProviderName names the provider in rules, bucket keys, metrics, logs and the reservation's
// tag: the declared provider's name, else the built-in provider's. It allocates nothing.
func (e *Estimate) ProviderName() string {
	if e.Name != "" {
		return e.Name
	}
	return e.Provider.String()
}

// Cost is the total tokens reserved for the request: prompt plus output.
func (e *Estimate) Cost() int64 { return e.PromptTokens + e.OutputTokens }

// Reason is a stable code saying why an estimate is approximate. It is safe as a log field and
// metric label.
type Reason string

// Learnable is true for the reasons whose estimate is a count with a margin (a stand-in
// tokenizer, a formula for parts, tools or images), whose ratio to the provider's count
// internal/learn may learn; false for upper bounds (unreadable bodies, deadlines, long runs,
// unknown APIs) and for input the request does not show (stored conversations, files, caches):
// their price is a bound by design, or a guess no ratio describes.
func (r Reason) Learnable() bool {
	switch r {
	case ReasonDeclaredEstimate, ReasonUnknownModel, ReasonContentParts, ReasonImage, ReasonTools,
		ReasonUnpricedPart, ReasonResponses, ReasonAnthropicEstimate, ReasonInvalidUTF8,
		ReasonWrongType, ReasonGeminiEstimate:
		return true
	}
	return false
}

// Reasons an estimate is approximate. When several apply, Estimate.Reason is the first found.
const (
	// ReasonUnknownAPI: the path is not one of the priced APIs; the raw body is counted as
	// text with the fallback encoding (an upper bound for JSON-wrapped text) and the default
	// output reservation is added.
	ReasonUnknownAPI Reason = "unknown_api"
	// ReasonDeclaredEstimate: a provider the limits file declares with an estimate (its
	// providers entry's estimate: a ratio): the prompt is its cl100k_base count times that ratio.
	ReasonDeclaredEstimate Reason = "declared_estimate"
	// ReasonUnpricedAPI: a path of a provider's host outside the priced APIs (images, audio,
	// files, batches, realtime, models): no tokens are priced; request limits count it.
	ReasonUnpricedAPI Reason = "unpriced_api"
	// ReasonNotJSON: the body is not a JSON object the pricer can read (invalid syntax, nesting
	// deeper than 10,000 levels, a top-level value that is not an object); it is priced at the
	// upper bound (internal/tokens/bound.go): one token per byte up to the context window, and the top-level
	// max_tokens found by a scan of its bytes, else the model's maximum output.
	ReasonNotJSON Reason = "not_json"
	// ReasonWrongType: a priced field has an unexpected type (e.g. "messages" is not an array,
	// "max_tokens" is not a non-negative integer); the field is counted as raw JSON text, or the
	// default output reservation is used.
	ReasonWrongType Reason = "wrong_type"
	// ReasonPartialBody: Envoy sent only the first bytes of the body
	// (x-envoy-auth-partial-body, a body shorter than its content-length, or one of
	// tokens.Options.RequestBufferBytes with no content-length); priced at the upper bound: one token
	// per byte of content-length (the context window when the size is unknown), at most the
	// context window, and the model's maximum output (or a larger max_tokens seen).
	ReasonPartialBody Reason = "partial_body"
	// ReasonTooLarge: the (decoded) body exceeds tokens.Options.MaxBodyBytes; it is priced at the
	// upper bound, as ReasonNotJSON.
	ReasonTooLarge Reason = "too_large"
	// ReasonGzip: a gzip or deflate body could not be decoded, or decoded beyond
	// tokens.Options.MaxDecodedBytes: priced at the upper bound of an unknown size (the context
	// window, the model's maximum output); when nothing decodes and the body is plain JSON, it
	// is priced as that.
	ReasonGzip Reason = "gzip"
	// ReasonUnsupportedEncoding: a content-encoding other than identity, gzip or deflate
	// (e.g. br, zstd, or a bogus one): a body that is plain JSON is priced as that (the
	// provider can only have read it so); any other is priced at the upper bound of an unknown
	// size (the context window, the model's maximum output).
	ReasonUnsupportedEncoding Reason = "unsupported_encoding"
	// ReasonUnknownModel: the model has no known OpenAI encoding; text is counted with
	// tokens.Options.FallbackEncoding.
	ReasonUnknownModel Reason = "unknown_model"
	// ReasonContentParts: message content given as an array of parts; text parts are counted
	// one by one (OpenAI publishes no rule for parts).
	ReasonContentParts Reason = "content_parts"
	// ReasonImage: an image is priced by the provider's published size rule, or by a fixed
	// worst-case cost when its size is unknown (an image URL).
	ReasonImage Reason = "image"
	// ReasonTools: tool or function definitions, tool calls or a JSON-schema response format
	// are priced by counting their JSON text plus a fixed overhead (no published rule; biased
	// high).
	ReasonTools Reason = "tools"
	// ReasonUnpricedPart: a part with no published rule (audio, file, document, unknown
	// types) is priced by counting its JSON text.
	ReasonUnpricedPart Reason = "unpriced_part"
	// ReasonResponses: the Responses API's per-item overhead is not published; items are
	// priced with the chat rule.
	ReasonResponses Reason = "responses_formula"
	// ReasonAnthropicEstimate: Anthropic publishes no tokenizer; internal/provider/anthropic's
	// package doc gives the estimator.
	ReasonAnthropicEstimate Reason = "anthropic_estimate"
	// ReasonInvalidUTF8: priced text is not valid UTF-8; invalid bytes are counted as bytes.
	ReasonInvalidUTF8 Reason = "invalid_utf8"
	// ReasonLongRun: a run of more than 256 KiB that no token boundary can be proven in (such
	// as "abab...") is counted in 256 KiB chunks, which bounds memory. One byte repeated is
	// not: its periodic rule counts it exactly at any length (internal/tiktoken).
	ReasonLongRun Reason = "long_run"
	// ReasonPreviousResponse: a Responses request continues a stored response
	// (previous_response_id) whose turns the body does not show; the prompt is raised to the
	// unseen-context bound (tokens.Options.UnseenContextTokens, by default the model's context window).
	ReasonPreviousResponse Reason = "previous_response"
	// ReasonConversation: a Responses request names a stored conversation; priced as
	// ReasonPreviousResponse.
	ReasonConversation Reason = "conversation"
	// ReasonStoredPrompt: a Responses request uses a stored prompt template by id; priced as
	// ReasonPreviousResponse.
	ReasonStoredPrompt Reason = "stored_prompt"
	// ReasonItemReference: a Responses input item refers to a stored item by id; priced as
	// ReasonPreviousResponse.
	ReasonItemReference Reason = "item_reference"
	// ReasonFileInput: a file by id, a PDF, or file_search over stored files: the provider reads
	// content the body's bytes do not tell; priced as ReasonPreviousResponse.
	ReasonFileInput Reason = "file_input"
	// ReasonDocumentURL: an Anthropic document block by URL, fetched by the provider; priced as
	// ReasonPreviousResponse.
	ReasonDocumentURL Reason = "document_url"
	// ReasonMCPServers: remote MCP servers (Anthropic mcp_servers, OpenAI tools of type mcp)
	// whose tool lists and results enter the context; priced as ReasonPreviousResponse.
	ReasonMCPServers Reason = "mcp_servers"
	// ReasonContainerUpload: an Anthropic container_upload block (a file for code execution);
	// priced as ReasonPreviousResponse.
	ReasonContainerUpload Reason = "container_upload"
	// ReasonGeminiEstimate: Google publishes no tokenizer for Gemini; internal/provider/gemini's
	// package doc gives the estimator.
	ReasonGeminiEstimate Reason = "gemini_estimate"
	// ReasonCachedContent: a Gemini request names a context cache (cachedContent) whose tokens
	// count as its input; priced as ReasonPreviousResponse.
	ReasonCachedContent Reason = "cached_content"
	// ReasonInternal: pricing failed unexpectedly (a bug); the raw body is counted as text.
	ReasonInternal Reason = "internal"
)
