package provider

import (
	"strconv"
	"strings"
	"time"
)

// ID is the provider a request is addressed to: an API family or one of its dialects.
type ID uint8

// The providers.
const (
	Unknown ID = iota
	OpenAI
	Azure
	Anthropic
	// Bedrock is the Amazon Bedrock runtime (bedrock-runtime.{region}.amazonaws.com).
	Bedrock
	// Gemini is the Gemini API (generativelanguage.googleapis.com).
	Gemini
	// Vertex is Vertex AI's generative models ({region-}aiplatform.googleapis.com): Gemini, and
	// Anthropic's models through rawPredict.
	Vertex
)

// String returns a stable name used in configuration, logs, metrics and the reservation's tag.
func (p ID) String() string {
	switch p {
	case OpenAI:
		return "openai"
	case Azure:
		return "azure"
	case Anthropic:
		return "anthropic"
	case Bedrock:
		return "bedrock"
	case Gemini:
		return "gemini"
	case Vertex:
		return "vertex"
	}
	return "unknown"
}

// Parse is the ID whose String is name; Unknown for any other name.
func Parse(name string) ID {
	switch name {
	case "openai":
		return OpenAI
	case "azure":
		return Azure
	case "anthropic":
		return Anthropic
	case "bedrock":
		return Bedrock
	case "gemini":
		return Gemini
	case "vertex":
		return Vertex
	}
	return Unknown
}

// API is the kind of endpoint a request calls.
type API uint8

// The APIs.
const (
	UnknownAPI API = iota
	ChatCompletions
	Completions
	Responses
	Embeddings
	Messages
	// Unpriced is any other path on a provider's host (images, audio, files, batches, realtime,
	// models): a request of that provider that takes no token budget of its own.
	Unpriced
	// Converse and ConverseStream are Bedrock's model-agnostic Converse API; InvokeModel and
	// InvokeModelStream its native-body InvokeModel and InvokeModelWithResponseStream.
	Converse
	ConverseStream
	InvokeModel
	InvokeModelStream
	// GenerateContent is Gemini's models/{model}:generateContent (one JSON answer).
	GenerateContent
	// StreamGenerateContent is models/{model}:streamGenerateContent: a JSON array of answers,
	// or server-sent events with ?alt=sse.
	StreamGenerateContent
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
	case Unpriced:
		return "unpriced"
	case Converse:
		return "converse"
	case ConverseStream:
		return "converse_stream"
	case InvokeModel:
		return "invoke_model"
	case InvokeModelStream:
		return "invoke_model_stream"
	case GenerateContent:
		return "generate_content"
	case StreamGenerateContent:
		return "stream_generate_content"
	}
	return "unknown"
}

// ParseAPI is the API whose String is name; UnknownAPI for any other name.
func ParseAPI(name string) API {
	for a := ChatCompletions; a <= StreamGenerateContent; a++ {
		if a.String() == name {
			return a
		}
	}
	return UnknownAPI
}

// Dialect is what one API family tells the limiter. Implementations are stateless values, safe
// for concurrent use, and allocate only what they return.
type Dialect interface {
	// AppendError appends the body of an error answer to a request of api, in the format that
	// the family's official SDK parses.
	AppendError(b []byte, api API, e Error) []byte
	// Usage reads the usage one JSON document reports: a whole response body, or the data of
	// one server-sent event. ok is false when the document reports none. Each count is
	// bounded by Count.
	Usage(doc []byte) (u Usage, ok bool)
	// Budgets reads what a response's rate-limit headers say is left of the provider's budgets,
	// one per dimension it reports. get looks a header up by lower-case name.
	Budgets(get func(name string) (string, bool)) Budgets
	// RateHeaders names the rate-limit headers that api of the family sends for dimension d; ok
	// is false when it sends none for d. The limiter's own answers report its buckets in them.
	RateHeaders(api API, d Dimension) (h RateHeaders, ok bool)
	// Profile is how the family counts a request to model against its limits, before the
	// operator's overrides.
	Profile(id ID, model string) Profile
}

// Dimension is what a limit counts.
type Dimension uint8

// The dimensions, in the order of the Budgets array.
const (
	// Tokens counts input plus (weighted) output tokens.
	Tokens Dimension = iota
	// InputTokens counts the prompt's tokens that the provider counts (Anthropic's ITPM).
	InputTokens
	// OutputTokens counts the (weighted) output tokens (Anthropic's OTPM).
	OutputTokens
	// Requests counts requests.
	Requests
	// Cost counts money, in micro-units of the limit's currency (internal/price): the most a
	// request can cost at admission, its usage's cost at settlement.
	Cost
	// Dimensions is the number of dimensions.
	Dimensions
)

// String returns the configuration name of the dimension ("input_tokens").
func (d Dimension) String() string {
	switch d {
	case Tokens:
		return "tokens"
	case InputTokens:
		return "input_tokens"
	case OutputTokens:
		return "output_tokens"
	case Requests:
		return "requests"
	case Cost:
		return "cost"
	}
	return "unknown"
}

// Words names the dimension in a message ("output tokens").
func (d Dimension) Words() string {
	switch d {
	case InputTokens:
		return "input tokens"
	case OutputTokens:
		return "output tokens"
	case Requests:
		return "requests"
	case Cost:
		return "spend"
	}
	return "tokens"
}

// RateHeaders are the names of one dimension's rate-limit headers.
type RateHeaders struct {
	Limit, Remaining, Reset string
	// ResetAt: Reset holds the instant the budget is full again, in RFC 3339 (Anthropic), not
	// the time until then as a Go duration ("6m0s", OpenAI).
	ResetAt bool
}

// Class is the kind of an error answer, which each dialect names in its own words.
type Class uint8

// The classes of error answers.
const (
	// RateLimited: over a limit, retry later (429).
	RateLimited Class = iota
	// TooLarge: the request can never fit the limits (413).
	TooLarge
	// Unavailable: the limiter cannot decide now (503).
	Unavailable
	// Misconfigured: the limiter's configuration for the route is invalid (500).
	Misconfigured
	// InvalidRequest: the request is malformed (400).
	InvalidRequest
	// Forbidden: the limiter's policy refuses the request outright (403).
	Forbidden
	// Unauthenticated: the request carries no identity the limiter can charge (401).
	Unauthenticated
	// QuotaExhausted: a money budget is spent until its period renews (429, not to be
	// retried: the answer says x-should-retry: false).
	QuotaExhausted
)

// Error is one error answer, before a dialect renders it.
type Error struct {
	Class Class
	// Limit names the exhausted limit of a RateLimited answer: a Dimension's String
	// ("tokens", "input_tokens", "output_tokens", "requests").
	Limit string
	// Code is the limiter's stable code for the error (rate_limit_exceeded, request_too_large...).
	Code string
	// Message is the human-readable text.
	Message string
	// RetryAfter is how long a RateLimited answer asks the client to wait (0 when unknown), for
	// the dialects whose body says it (Gemini's google.rpc.RetryInfo).
	RetryAfter time.Duration
}

// Usage is what a provider reports it counted for one response.
type Usage struct {
	// Input is the prompt's tokens (cache writes and reads included); Output the generated ones.
	Input, Output int64
	// CacheRead and CacheWrite are the parts of Input read from and written to the provider's
	// prompt cache, when it reports them (0 otherwise).
	CacheRead, CacheWrite int64
	// CacheWrite1h is the part of CacheWrite written for an hour rather than five minutes,
	// which Anthropic bills at a higher price, when the provider reports it (0 otherwise).
	CacheWrite1h int64
	// Total is the provider's own total when it gives one (OpenAI), else 0.
	Total int64
}

// Tokens is what the response took from the provider's token budget.
func (u Usage) Tokens() int64 {
	if u.Total > 0 {
		return u.Total
	}
	return u.Input + u.Output
}

// Merge folds one report into u: every count a report carries replaces the earlier value, so
// that a stream's last report wins field by field (Anthropic's message_delta carries the
// cumulative output and, in newer versions, the input again; message_start carries the input).
func (u *Usage) Merge(r Usage) {
	if r.Input > 0 {
		u.Input = r.Input
	}
	if r.Output > 0 {
		u.Output = r.Output
	}
	if r.Total > 0 {
		u.Total = r.Total
	}
	if r.CacheRead > 0 {
		u.CacheRead = r.CacheRead
	}
	if r.CacheWrite > 0 {
		u.CacheWrite = r.CacheWrite
	}
	if r.CacheWrite1h > 0 {
		u.CacheWrite1h = r.CacheWrite1h
	}
}

// MaxCount is the largest count a dialect reports for one field: the store's largest amount
// (bucket.MaxAmount; a test holds them equal), so that no sum of a few fields overflows.
const MaxCount = 1_000_000_000_000

// Count bounds one reported count to [0, MaxCount], so that a negative count takes nothing away.
func Count(n int64) int64 { return min(max(n, 0), MaxCount) }

// Budget is what a response's rate-limit headers say of one of the provider's budgets.
type Budget struct {
	// Remaining and Limit are what the provider has left and its limit (Limit 0 when not given).
	Remaining, Limit int64
	// Rounding is the unit the provider rounds Remaining to (Anthropic: the nearest thousand),
	// 0 when exact: the truth may be up to half of it above Remaining.
	Rounding int64
	// OK is true when the headers reported this budget.
	OK bool
}

// Budgets are a response's reports, one per Dimension.
type Budgets [Dimensions]Budget

// HeaderCount reads a non-negative integer header; ok is false when it is absent, malformed or
// negative (Azure's Responses API has been seen sending -1).
func HeaderCount(get func(string) (string, bool), name string) (int64, bool) {
	v, ok := get(name)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	return n, err == nil && n >= 0
}

// Counting is how a provider counts a request's tokens at admission.
type Counting uint8

// The counting rules.
const (
	// Sum counts the prompt plus the output the request may generate (max_tokens).
	Sum Counting = iota
	// MaxOfChars counts the larger of max_tokens and an estimate from the request's characters:
	// "the maximum of max_tokens and the estimated number of tokens based on the character count
	// of your request" (https://platform.openai.com/docs/guides/rate-limits).
	MaxOfChars
)

// String returns the configuration name of the rule.
func (c Counting) String() string {
	if c == MaxOfChars {
		return "max_of_chars"
	}
	return "sum"
}

// UnsetOutput is what a provider counts as output when a request names no maximum.
type UnsetOutput uint8

// The rules for a request without an output maximum.
const (
	// DefaultOutput counts the configured default (pricing.default_output_tokens and its
	// per-model overrides).
	DefaultOutput UnsetOutput = iota
	// ContextWindow counts the model's context window (Azure OpenAI: "the maximum possible value
	// of the model context size will be inferred").
	ContextWindow
)

// String returns the configuration name of the rule.
func (u UnsetOutput) String() string {
	if u == ContextWindow {
		return "context_window"
	}
	return "default"
}

// DimensionSet is a set of dimensions.
type DimensionSet uint8

// Has is true when d is in the set.
func (s DimensionSet) Has(d Dimension) bool { return s&(1<<d) != 0 }

// With returns the set with d.
func (s DimensionSet) With(d Dimension) DimensionSet { return s | 1<<d }

// Profile is how a provider counts a request against its limits: what its admission counts and
// what it adjusts to the actual usage afterwards.
type Profile struct {
	// Counting is how the tokens dimension is counted at admission.
	Counting Counting
	// UnsetOutput is what is counted as output when the request names no maximum.
	UnsetOutput UnsetOutput
	// OutputWeight multiplies the output tokens in every dimension that counts them (Bedrock
	// burns 5 quota tokens per output token of Claude 4-era models); 0 means 1.
	OutputWeight int64
	// CacheReadsFree is true when prompt-cache reads do not count as input (Anthropic's ITPM for
	// most models): they are reserved at admission, where they cannot be known, and given back
	// at settlement.
	CacheReadsFree bool
	// Settles are the dimensions the provider adjusts to the actual usage at the end of a
	// request (Anthropic: input and output); the others keep what admission counted (OpenAI's
	// TPM), and are only charged when the usage exceeds it.
	Settles DimensionSet
	// OutputAsGenerated is true when the provider counts output tokens against its limits only
	// as they are generated, never a requested maximum at admission (Gemini): a reservation of
	// less than max_tokens (a rule's reserve_output: learned) cannot make the provider refuse
	// what the limiter admitted. OpenAI, Azure, Anthropic and Bedrock count max_tokens up front.
	OutputAsGenerated bool
}

// Weight is OutputWeight, 1 when unset.
func (p *Profile) Weight() int64 { return max(p.OutputWeight, 1) }
