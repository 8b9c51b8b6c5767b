package anthropic

import (
	"encoding/json"
	"strings"

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
	// CacheCreation splits the cache writes by lifetime: "ephemeral_5m_input_tokens" and
	// "ephemeral_1h_input_tokens", a 1-hour write costing twice the input price where a
	// 5-minute one costs 1.25 times (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
	CacheCreation *struct {
		Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
	} `json:"cache_creation"`
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
	u := provider.Usage{
		Input: provider.Count(r.PromptTokens) + provider.Count(r.InputTokens) +
			provider.Count(r.CacheCreationTokens) + provider.Count(r.CacheReadTokens),
		Output:     provider.Count(r.CompletionTokens) + provider.Count(r.OutputTokens),
		CacheRead:  provider.Count(r.CacheReadTokens),
		CacheWrite: provider.Count(r.CacheCreationTokens),
		Total:      provider.Count(r.TotalTokens),
	}
	if r.CacheCreation != nil {
		u.CacheWrite1h = min(provider.Count(r.CacheCreation.Ephemeral1h), u.CacheWrite)
	}
	return u, true
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
			if k.d != provider.Requests {
				// "The number of tokens remaining (rounded to the nearest thousand)" (same page).
				b[k.d].Rounding = 1000
			}
		}
	}
	return b
}

// RateHeaders names the anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-*
// headers on the Messages API, whose reset is the RFC 3339 instant the budget is full again
// (https://docs.anthropic.com/en/api/rate-limits#response-headers); the compatibility endpoint
// is read by OpenAI's SDK, and answers in OpenAI's names.
func (Dialect) RateHeaders(api provider.API, d provider.Dimension) (provider.RateHeaders, bool) {
	if api != provider.Messages {
		return openai.Dialect{}.RateHeaders(api, d)
	}
	if int(d) >= len(rateHeaders) || rateHeaders[d].Limit == "" {
		return provider.RateHeaders{}, false
	}
	return rateHeaders[d], true
}

var rateHeaders = [provider.Dimensions]provider.RateHeaders{
	provider.Tokens: {Limit: "anthropic-ratelimit-tokens-limit", Remaining: "anthropic-ratelimit-tokens-remaining",
		Reset: "anthropic-ratelimit-tokens-reset", ResetAt: true},
	provider.InputTokens: {Limit: "anthropic-ratelimit-input-tokens-limit", Remaining: "anthropic-ratelimit-input-tokens-remaining",
		Reset: "anthropic-ratelimit-input-tokens-reset", ResetAt: true},
	provider.OutputTokens: {Limit: "anthropic-ratelimit-output-tokens-limit", Remaining: "anthropic-ratelimit-output-tokens-remaining",
		Reset: "anthropic-ratelimit-output-tokens-reset", ResetAt: true},
	provider.Requests: {Limit: "anthropic-ratelimit-requests-limit", Remaining: "anthropic-ratelimit-requests-remaining",
		Reset: "anthropic-ratelimit-requests-reset", ResetAt: true},
}

// Profile is how Anthropic counts (https://docs.anthropic.com/en/api/rate-limits): input and
// output tokens per minute are separate budgets, both "estimated at the beginning of each
// request" and adjusted to the actual usage ("OTPM ... adjusted at the end"), so both settle;
// cache reads do not count toward ITPM ("cache_read_input_tokens ... do not count towards
// ITPM") but for the models the page marks, Claude Haiku 3 and 3.5, which count them.
func (Dialect) Profile(_ provider.ID, model string) provider.Profile {
	return provider.Profile{
		CacheReadsFree: !cacheReadsCounted(model),
		Settles:        provider.DimensionSet(0).With(provider.InputTokens).With(provider.OutputTokens),
	}
}

// cacheReadsCounted is true for the models whose cache reads count toward ITPM: Claude 3 Haiku
// and Claude 3.5 Haiku (claude-3-haiku-*, claude-3-5-haiku-*, and their -latest aliases).
func cacheReadsCounted(model string) bool {
	return strings.HasPrefix(model, "claude-3-haiku") || strings.HasPrefix(model, "claude-3-5-haiku")
}
