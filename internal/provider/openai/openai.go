package openai

import (
	"encoding/json"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Dialect is OpenAI's family as a provider.Dialect. Its zero value is ready to use.
type Dialect struct{}

var _ provider.Dialect = Dialect{}

// errorType is the "type" of OpenAI's error body for each class of answer: OpenAI's
// https://platform.openai.com/docs/guides/error-codes (rate limits name the exhausted limit,
// "tokens" or "requests", as OpenAI's own 429 bodies do).
func errorType(e provider.Error) string {
	switch e.Class {
	case provider.RateLimited:
		if e.Limit != "" {
			return e.Limit
		}
		return "tokens"
	case provider.TooLarge, provider.InvalidRequest, provider.Forbidden, provider.Unauthenticated:
		return "invalid_request_error"
	case provider.QuotaExhausted:
		// OpenAI's answer when an account's credit is spent: a 429 of type and code
		// insufficient_quota (https://platform.openai.com/docs/guides/error-codes).
		return "insufficient_quota"
	}
	return "server_error"
}

// errorBody is OpenAI's error format, {"error": {"message", "type", "param", "code"}}, which
// its SDKs parse.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

// AppendError appends e in OpenAI's error format, whatever the API: every API of the family
// answers errors so.
func (Dialect) AppendError(b []byte, _ provider.API, e provider.Error) []byte {
	var v errorBody
	v.Error.Message, v.Error.Type, v.Error.Code = e.Message, errorType(e), e.Code
	out, _ := json.Marshal(&v) // cannot fail: fixed types of strings
	if b == nil {
		return out
	}
	return append(b, out...)
}
