package tokens

import (
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Provider is the LLM provider a request is addressed to (internal/provider names them).
type Provider = provider.ID

// The providers, as internal/provider/dialects.Recognize returns them.
const (
	UnknownProvider = provider.Unknown
	OpenAI          = provider.OpenAI
	AzureOpenAI     = provider.Azure
	Anthropic       = provider.Anthropic
	Bedrock         = provider.Bedrock
)

// API is the kind of endpoint a request calls (internal/provider names them).
type API = provider.API

// The APIs, as internal/provider/dialects.Recognize returns them.
const (
	UnknownAPI      = provider.UnknownAPI
	Unpriced        = provider.Unpriced
	ChatCompletions = provider.ChatCompletions
	Completions     = provider.Completions
	Responses       = provider.Responses
	Embeddings      = provider.Embeddings
	Messages        = provider.Messages
)

// Input is what pricing reads of one HTTP request. It does not retain any of it.
type Input struct {
	// Host is the request's host (Envoy's :authority), in any case, with or without a port; ""
	// when unknown. It decides the provider before the path does (internal/provider/dialects.Recognize).
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
	// NoContentLength is true when the request had no content-length header (an HTTP/2 upload
	// without one, or HTTP/1.1 chunked): ContentLength is then Envoy's count of the bytes
	// received so far, not the body's size, and a body of Options.RequestBufferBytes or more
	// may be the first part only, which Envoy reports as complete.
	NoContentLength bool
}

// Estimate is the price of one request (internal/provider/pricing defines it, the rooms fill it
// in). Its Cost is the total tokens reserved.
type Estimate = pricing.Estimate

// Reason is a stable code saying why an estimate is approximate (internal/provider/pricing
// documents each). It is safe as a log field and metric label.
type Reason = pricing.Reason

// Reasons an estimate is approximate. When several apply, Estimate.Reason is the first found.
const (
	ReasonUnknownAPI          = pricing.ReasonUnknownAPI
	ReasonDeclaredEstimate    = pricing.ReasonDeclaredEstimate
	ReasonUnpricedAPI         = pricing.ReasonUnpricedAPI
	ReasonNotJSON             = pricing.ReasonNotJSON
	ReasonWrongType           = pricing.ReasonWrongType
	ReasonPartialBody         = pricing.ReasonPartialBody
	ReasonTooLarge            = pricing.ReasonTooLarge
	ReasonGzip                = pricing.ReasonGzip
	ReasonUnsupportedEncoding = pricing.ReasonUnsupportedEncoding
	ReasonUnknownModel        = pricing.ReasonUnknownModel
	ReasonContentParts        = pricing.ReasonContentParts
	ReasonImage               = pricing.ReasonImage
	ReasonTools               = pricing.ReasonTools
	ReasonUnpricedPart        = pricing.ReasonUnpricedPart
	ReasonResponses           = pricing.ReasonResponses
	ReasonAnthropicEstimate   = pricing.ReasonAnthropicEstimate
	ReasonInvalidUTF8         = pricing.ReasonInvalidUTF8
	ReasonLongRun             = pricing.ReasonLongRun
	ReasonPreviousResponse    = pricing.ReasonPreviousResponse
	ReasonConversation        = pricing.ReasonConversation
	ReasonStoredPrompt        = pricing.ReasonStoredPrompt
	ReasonItemReference       = pricing.ReasonItemReference
	ReasonFileInput           = pricing.ReasonFileInput
	ReasonDocumentURL         = pricing.ReasonDocumentURL
	ReasonMCPServers          = pricing.ReasonMCPServers
	ReasonContainerUpload     = pricing.ReasonContainerUpload
	ReasonGeminiEstimate      = pricing.ReasonGeminiEstimate
	ReasonCachedContent       = pricing.ReasonCachedContent
	ReasonInternal            = pricing.ReasonInternal
)
