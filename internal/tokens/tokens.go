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
	// Model is the model named by the body (or by the Azure deployment map); "" when unknown.
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
