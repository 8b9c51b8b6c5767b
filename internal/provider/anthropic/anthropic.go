package anthropic

import (
	"encoding/json"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// Dialect is Anthropic's family as a provider.Dialect. Its zero value is ready to use.
type Dialect struct{}

var _ provider.Dialect = Dialect{}

// errorType is the error.type of Anthropic's error body for each class of answer
// (https://docs.anthropic.com/en/api/errors).
func errorType(c provider.Class) string {
	switch c {
	case provider.RateLimited, provider.QuotaExhausted:
		// A spent budget is a 429 too: its answer's x-should-retry: false keeps the SDK from
		// retrying it.
		return "rate_limit_error"
	case provider.TooLarge:
		return "request_too_large"
	case provider.InvalidRequest:
		return "invalid_request_error"
	case provider.Forbidden:
		return "permission_error"
	case provider.Unauthenticated:
		return "authentication_error"
	}
	return "api_error"
}

// errorBody is Anthropic's error format, {"type": "error", "error": {"type", "message"}}, which
// its SDK parses.
type errorBody struct {
	Type  string `json:"type"`
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// AppendError appends e in Anthropic's error format for the Messages API, and in OpenAI's for
// every other API (the compatibility endpoint, whose client is the OpenAI SDK).
func (Dialect) AppendError(b []byte, api provider.API, e provider.Error) []byte {
	if api != provider.Messages {
		return openai.Dialect{}.AppendError(b, api, e)
	}
	v := errorBody{Type: "error"}
	v.Error.Type, v.Error.Message = errorType(e.Class), e.Message
	out, _ := json.Marshal(&v) // cannot fail: fixed types of strings
	if b == nil {
		return out
	}
	return append(b, out...)
}
