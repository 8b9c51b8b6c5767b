package tokens

// Provider is the LLM provider family a request is addressed to.
type Provider uint8

const (
	UnknownProvider Provider = iota
	OpenAI
	AzureOpenAI
	Anthropic
)

// String returns a stable name used in configuration, logs and metrics.
func (p Provider) String() string {
	switch p {
	case OpenAI:
		return "openai"
	case AzureOpenAI:
		return "azure"
	case Anthropic:
		return "anthropic"
	}
	return "unknown"
}

// API is the kind of endpoint a request calls.
type API uint8

const (
	UnknownAPI API = iota
	ChatCompletions
	Completions
	Responses
	Embeddings
	Messages
)

// String returns a stable name used in configuration, logs and metrics.
func (a API) String() string {
	switch a {
	case ChatCompletions:
		return "chat_completions"
	case Completions:
		return "completions"
	case Responses:
		return "responses"
	case Embeddings:
		return "embeddings"
	case Messages:
		return "messages"
	}
	return "unknown"
}

// Input is what pricing reads of one HTTP request. It does not retain any of it.
type Input struct {
	// Host is the request's host (Envoy's :authority), in any case, with or without a port; ""
	// when unknown. It decides the provider before the path does (see Recognize).
	Host string
	// Path is the request path including the query string (Envoy's :path).
	Path string
	// Body is the request body as Envoy sent it (possibly the first bytes only).
	Body []byte
	// ContentType and ContentEncoding are the request's headers of those names ("" when absent).
	ContentType     string
	ContentEncoding string
	// ContentLength is the request's declared body size, or -1 when unknown.
	ContentLength int64
	// Partial is true when Envoy sent only the first bytes of the body
	// (header x-envoy-auth-partial-body: true).
	Partial bool
}

// Estimate is the price of one request.
type Estimate struct {
	Provider Provider
	API      API
	// Model is the model the request calls: on an Azure deployment path the deployment's (from
	// Options.AzureDeployments, else the deployment name), elsewhere the body's; "" when unknown.
	// Callers must not log it without bounding its length.
	Model string
	// PromptTokens is the input token count (exact or estimated).
	PromptTokens int64
	// OutputTokens is the output reserved: max_tokens (or its API's equivalent) times n, or the
	// configured default.
	OutputTokens int64
	// Stream is true when the request asks for a streamed response.
	Stream bool
	// Exact is true when PromptTokens equals what the provider will count.
	Exact bool
	// Reason says why the estimate is approximate: a stable reason code ("" when Exact).
	Reason Reason
}

// Cost is the total tokens reserved for the request: prompt plus output.
func (e *Estimate) Cost() int64 { return e.PromptTokens + e.OutputTokens }

// Reason is a stable code saying why an estimate is approximate. It is safe as a log field and
// metric label.
type Reason string

// Reasons an estimate is approximate. When several apply, Estimate.Reason is the first found.
const (
	// ReasonUnknownAPI: the path is not one of the priced APIs; the raw body is counted as
	// text with the fallback encoding (an upper bound for JSON-wrapped text) and the default
	// output reservation is added.
	ReasonUnknownAPI Reason = "unknown_api"
	// ReasonNotJSON: the body is not valid JSON (including nesting deeper than 128 levels or a
	// top-level value that is not an object); the raw body is counted as text.
	ReasonNotJSON Reason = "not_json"
	// ReasonWrongType: a priced field has an unexpected type (e.g. "messages" is not an array,
	// "max_tokens" is not a non-negative integer); the field is counted as raw JSON text, or the
	// default output reservation is used.
	ReasonWrongType Reason = "wrong_type"
	// ReasonPartialBody: Envoy sent only the first bytes of the body
	// (x-envoy-auth-partial-body) or the body is shorter than content-length; the raw prefix is
	// counted and scaled by content-length / received bytes.
	ReasonPartialBody Reason = "partial_body"
	// ReasonTooLarge: the (decoded) body exceeds Options.MaxBodyBytes; the first
	// MaxBodyBytes are counted as raw text and scaled to the full size.
	ReasonTooLarge Reason = "too_large"
	// ReasonGzip: a gzip or deflate body could not be decoded, or decoded beyond
	// Options.MaxDecodedBytes; the decoded prefix is counted and scaled by compressed bytes
	// consumed, or, when nothing decodes, one token per compressed byte is charged.
	ReasonGzip Reason = "gzip"
	// ReasonUnsupportedEncoding: a content-encoding other than identity, gzip or deflate
	// (e.g. br, zstd); one token per compressed byte is charged (text compresses about 4:1 and
	// English averages about 4 bytes per token).
	ReasonUnsupportedEncoding Reason = "unsupported_encoding"
	// ReasonUnknownModel: the model has no known OpenAI encoding; text is counted with
	// Options.FallbackEncoding.
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
	// ReasonAnthropicEstimate: Anthropic publishes no tokenizer; see the package doc for the
	// estimator.
	ReasonAnthropicEstimate Reason = "anthropic_estimate"
	// ReasonInvalidUTF8: priced text is not valid UTF-8; invalid bytes are counted as bytes.
	ReasonInvalidUTF8 Reason = "invalid_utf8"
	// ReasonLongRun: a run of more than 256 KiB that no token boundary can be proven in (such
	// as "abab...") is counted in 256 KiB chunks, which bounds memory. One byte repeated is
	// not: its periodic rule counts it exactly at any length (uniform.go).
	ReasonLongRun Reason = "long_run"
	// ReasonInternal: pricing failed unexpectedly (a bug); the raw body is counted as text.
	ReasonInternal Reason = "internal"
)

// AnthropicDialect reports whether the request speaks Anthropic's own API (the Messages API),
// whose SDK reads Anthropic's error body. Every other priced API, Anthropic's OpenAI-compatible
// endpoint included, is answered in OpenAI's format, which the OpenAI SDK reads.
func (e *Estimate) AnthropicDialect() bool { return e.API == Messages }
