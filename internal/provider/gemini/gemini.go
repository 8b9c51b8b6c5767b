package gemini

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// Dialect is the Gemini API's and Vertex AI's family as a provider.Dialect. Its zero value is
// ready to use.
type Dialect struct{}

var _ provider.Dialect = Dialect{}

// status is the google.rpc.Code name and HTTP code of each class of answer, as Google's APIs
// map them (cloud.google.com/apis/design/errors#handling_errors: RESOURCE_EXHAUSTED 429,
// INVALID_ARGUMENT 400, UNAVAILABLE 503, INTERNAL 500). A request too large is INVALID_ARGUMENT
// at Google ("The input token count exceeds the maximum number of tokens allowed"); the
// limiter answers it with HTTP 413, and the body's code says the same.
func status(c provider.Class) (code int, name string) {
	switch c {
	case provider.RateLimited, provider.QuotaExhausted:
		return 429, "RESOURCE_EXHAUSTED"
	case provider.TooLarge:
		return 413, "INVALID_ARGUMENT"
	case provider.Unavailable:
		return 503, "UNAVAILABLE"
	case provider.InvalidRequest:
		return 400, "INVALID_ARGUMENT"
	}
	return 500, "INTERNAL"
}

// The google.rpc error details a 429 carries (github.com/googleapis/googleapis
// google/rpc/error_details.proto), as the Gemini API sends them: "@type" first.
type (
	quotaFailure struct {
		Type       string      `json:"@type"`
		Violations []violation `json:"violations"`
	}
	violation struct {
		QuotaMetric string `json:"quotaMetric"`
		QuotaID     string `json:"quotaId"`
		Description string `json:"description,omitempty"`
	}
	retryInfo struct {
		Type       string `json:"@type"`
		RetryDelay string `json:"retryDelay"`
	}
	errorBody struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Status  string `json:"status"`
			Details []any  `json:"details,omitempty"`
		} `json:"error"`
	}
)

const (
	typeQuotaFailure = "type.googleapis.com/google.rpc.QuotaFailure"
	typeRetryInfo    = "type.googleapis.com/google.rpc.RetryInfo"
)

// AppendError appends e as a google.rpc.Status in Google's JSON error format,
// {"error": {"code", "message", "status", "details"}}, the body google-genai reads: its
// errors.APIError takes code, message and status from "error", and raises ClientError for a
// 4xx (google/genai/errors.py, APIError.raise_for_response). A rate-limit answer carries a
// QuotaFailure naming the limiter's exhausted limit and a RetryInfo with the wait, as the
// Gemini API's own 429 does ("retryDelay": "12s"). The OpenAI-compatible endpoints answer in
// OpenAI's format, which their client, the OpenAI SDK, parses.
func (Dialect) AppendError(b []byte, api provider.API, e provider.Error) []byte {
	if api == provider.ChatCompletions {
		return openai.Dialect{}.AppendError(b, api, e)
	}
	var v errorBody
	v.Error.Code, v.Error.Status = status(e.Class)
	v.Error.Message = e.Message
	if e.Class == provider.RateLimited || e.Class == provider.QuotaExhausted {
		limit := e.Limit
		if limit == "" {
			limit = provider.Tokens.String()
		}
		v.Error.Details = append(v.Error.Details, quotaFailure{Type: typeQuotaFailure,
			Violations: []violation{{QuotaMetric: "llm-ratelimit/" + limit, QuotaID: e.Code}}})
		if e.RetryAfter > 0 {
			v.Error.Details = append(v.Error.Details, retryInfo{Type: typeRetryInfo, RetryDelay: Duration(e.RetryAfter)})
		}
	}
	out, _ := json.Marshal(&v) // cannot fail: fixed types of strings and numbers
	if b == nil {
		return out
	}
	return append(b, out...)
}

// Duration is d in google.protobuf.Duration's JSON form, seconds with a fraction and an "s"
// ("12s", "1.5s"), rounded up to the millisecond.
func Duration(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatFloat(float64(ms)/1000, 'f', -1, 64) + "s"
}

// Budgets reads OpenAI's x-ratelimit-* headers, for the OpenAI-compatible endpoints; the
// Gemini API and Vertex AI send no rate-limit headers of their own (none are documented:
// ai.google.dev/gemini-api/docs/rate-limits), so their budgets come from 429 bodies only
// (RetryAfter).
func (Dialect) Budgets(get func(string) (string, bool)) provider.Budgets {
	return openai.Dialect{}.Budgets(get)
}

// RateHeaders names OpenAI's headers on the OpenAI-compatible endpoints and, on the other
// APIs, none: Google's clients read none (google-genai raises on the status and the body).
func (Dialect) RateHeaders(api provider.API, d provider.Dimension) (provider.RateHeaders, bool) {
	if api == provider.ChatCompletions {
		return openai.Dialect{}.RateHeaders(api, d)
	}
	return provider.RateHeaders{}, false
}

// Profile is how the family counts a request to model. Gemini: "Tokens per minute (input)"
// (ai.google.dev/gemini-api/docs/rate-limits) is the input_tokens dimension; the usage's
// counts replace admission's estimate in every token dimension (the estimate is no provider
// rule, only a guess at its tokenizer), and cached content is counted like other input (no
// document says it is free). Claude on Vertex counts as Anthropic does.
func (Dialect) Profile(id provider.ID, model string) provider.Profile {
	if isClaude(model) {
		return anthropic.Dialect{}.Profile(id, model)
	}
	return provider.Profile{
		Settles: provider.DimensionSet(0).With(provider.Tokens).With(provider.InputTokens).With(provider.OutputTokens),
		// Its limits are "Requests per minute", "Tokens per minute (input)" and "Requests per
		// day" (ai.google.dev/gemini-api/docs/rate-limits): no maximum output is counted at
		// admission.
		OutputAsGenerated: true,
	}
}

// isClaude is true for Anthropic's models on Vertex ("claude-sonnet-4-5@20250929").
func isClaude(model string) bool { return len(model) >= 7 && model[:7] == "claude-" }
