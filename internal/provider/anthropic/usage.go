package anthropic

import (
	"encoding/json"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// rawUsage is the Messages API's usage (input_tokens, output_tokens and the cache_*_input_tokens
// that are input too; https://docs.anthropic.com/en/api/messages) and the compatibility
// endpoint's OpenAI usage (prompt_tokens, completion_tokens, total_tokens).
type rawUsage struct {
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadTokens     int64 `json:"cache_read_input_tokens"`
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
}

// envelope finds usage at the top level (a body, a stream's message_delta, the compatibility
// endpoint's last chunk) or in a message_start event ("message").
type envelope struct {
	Usage   *rawUsage `json:"usage"`
	Message *envelope `json:"message"`
}

func (e *envelope) find() *rawUsage {
	switch {
	case e == nil:
		return nil
	case e.Usage != nil:
		return e.Usage
	}
	return e.Message.find()
}

// Usage reads the usage of one JSON document of Anthropic's family.
func (Dialect) Usage(doc []byte) (provider.Usage, bool) {
	var e envelope
	if json.Unmarshal(doc, &e) != nil {
		return provider.Usage{}, false
	}
	r := e.find()
	if r == nil {
		return provider.Usage{}, false
	}
	return provider.Usage{
		Input: provider.Count(r.PromptTokens) + provider.Count(r.InputTokens) +
			provider.Count(r.CacheCreationTokens) + provider.Count(r.CacheReadTokens),
		Output: provider.Count(r.CompletionTokens) + provider.Count(r.OutputTokens),
		Total:  provider.Count(r.TotalTokens),
	}, true
}

// Budgets reads OpenAI's x-ratelimit-* headers, for the compatibility endpoint, which speaks
// OpenAI's dialect; else the anthropic-ratelimit-{tokens,input-tokens,output-tokens,requests}-*
// headers (https://docs.anthropic.com/en/api/rate-limits#response-headers).
func (Dialect) Budgets(get func(string) (string, bool)) provider.Budgets {
	if b := (openai.Dialect{}).Budgets(get); b[provider.Tokens].OK || b[provider.Requests].OK {
		return b
	}
	var b provider.Budgets
	for _, k := range [...]struct {
		d                provider.Dimension
		remaining, limit string
	}{
		{provider.Tokens, "anthropic-ratelimit-tokens-remaining", "anthropic-ratelimit-tokens-limit"},
		{provider.InputTokens, "anthropic-ratelimit-input-tokens-remaining", "anthropic-ratelimit-input-tokens-limit"},
		{provider.OutputTokens, "anthropic-ratelimit-output-tokens-remaining", "anthropic-ratelimit-output-tokens-limit"},
		{provider.Requests, "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-limit"},
	} {
		if rem, ok := provider.HeaderCount(get, k.remaining); ok {
			limit, _ := provider.HeaderCount(get, k.limit)
			b[k.d] = provider.Budget{Remaining: rem, Limit: limit, OK: true}
		}
	}
	return b
}

// RateHeaders names OpenAI's headers for now: the anthropic-ratelimit-* family, whose reset is an
// RFC 3339 instant, is the Anthropic answers' own.
func (Dialect) RateHeaders(api provider.API, d provider.Dimension) (provider.RateHeaders, bool) {
	return openai.Dialect{}.RateHeaders(api, d)
}

// Profile is Anthropic's counting, until the room says more: prompt plus max_tokens at admission.
func (Dialect) Profile(provider.ID, string) provider.Profile { return provider.Profile{} }
