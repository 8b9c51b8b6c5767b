package openai

import (
	"encoding/json"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// rawUsage is OpenAI's usage: chat completions, completions and embeddings (prompt_tokens,
// completion_tokens, total_tokens; https://platform.openai.com/docs/api-reference/chat/object)
// and the Responses API (input_tokens, output_tokens, total_tokens;
// https://platform.openai.com/docs/api-reference/responses/object). Cached prompt tokens are
// part of prompt_tokens and input_tokens, and counted apart in prompt_tokens_details and
// input_tokens_details (cached_tokens), which a cost limit prices at the cached input price
// (https://platform.openai.com/docs/guides/prompt-caching).
type rawUsage struct {
	PromptTokens       int64         `json:"prompt_tokens"`
	CompletionTokens   int64         `json:"completion_tokens"`
	TotalTokens        int64         `json:"total_tokens"`
	InputTokens        int64         `json:"input_tokens"`
	OutputTokens       int64         `json:"output_tokens"`
	PromptDetails      *tokenDetails `json:"prompt_tokens_details"`
	InputTokensDetails *tokenDetails `json:"input_tokens_details"`
}

// tokenDetails is the part of a usage's prompt read from the prompt cache.
type tokenDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// envelope finds usage at the top level (a body, or a chat stream's last chunk, which needs
// stream_options.include_usage) or in a Responses event ("response": response.completed).
type envelope struct {
	Usage    *rawUsage `json:"usage"`
	Response *envelope `json:"response"`
}

func (e *envelope) find() *rawUsage {
	switch {
	case e == nil:
		return nil
	case e.Usage != nil:
		return e.Usage
	}
	return e.Response.find()
}

// Usage reads the usage of one JSON document of OpenAI's family.
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
		Input:  provider.Count(r.PromptTokens) + provider.Count(r.InputTokens),
		Output: provider.Count(r.CompletionTokens) + provider.Count(r.OutputTokens),
		Total:  provider.Count(r.TotalTokens),
	}
	for _, d := range [...]*tokenDetails{r.PromptDetails, r.InputTokensDetails} {
		if d != nil {
			u.CacheRead += provider.Count(d.CachedTokens)
		}
	}
	u.CacheRead = min(u.CacheRead, u.Input)
	return u, true
}

// Budgets reads x-ratelimit-{remaining,limit}-{tokens,requests}, which OpenAI and Azure OpenAI
// send on every response (https://platform.openai.com/docs/guides/rate-limits;
// learn.microsoft.com/azure/ai-foundry/openai/how-to/quota). A negative value (Azure's
// Responses API sends -1) says nothing.
func (Dialect) Budgets(get func(string) (string, bool)) provider.Budgets {
	var b provider.Budgets
	for _, k := range [...]struct {
		d                provider.Dimension
		remaining, limit string
	}{
		{provider.Tokens, "x-ratelimit-remaining-tokens", "x-ratelimit-limit-tokens"},
		{provider.Requests, "x-ratelimit-remaining-requests", "x-ratelimit-limit-requests"},
	} {
		if rem, ok := provider.HeaderCount(get, k.remaining); ok {
			limit, _ := provider.HeaderCount(get, k.limit)
			b[k.d] = provider.Budget{Remaining: rem, Limit: limit, OK: true}
		}
	}
	return b
}

// RateHeaders names x-ratelimit-{limit,remaining,reset}-{tokens,requests}, whose reset is a
// duration ("1s", "6m0s"; https://platform.openai.com/docs/guides/rate-limits). OpenAI has no
// headers of its own for input or output tokens.
func (Dialect) RateHeaders(_ provider.API, d provider.Dimension) (provider.RateHeaders, bool) {
	switch d {
	case provider.Tokens:
		return provider.RateHeaders{Limit: "x-ratelimit-limit-tokens", Remaining: "x-ratelimit-remaining-tokens", Reset: "x-ratelimit-reset-tokens"}, true
	case provider.Requests:
		return provider.RateHeaders{Limit: "x-ratelimit-limit-requests", Remaining: "x-ratelimit-remaining-requests", Reset: "x-ratelimit-reset-requests"}, true
	}
	return provider.RateHeaders{}, false
}

// Profile is how OpenAI and Azure OpenAI count: prompt plus max_tokens at admission (Sum; the
// guide's character rule is the MaxOfChars option, https://platform.openai.com/docs/guides/rate-limits),
// nothing adjusted afterwards, cached prompt tokens counted like any other ("Caching does not
// affect rate limits", https://platform.openai.com/docs/guides/prompt-caching). Azure OpenAI
// reserves the model's context size for a request without max_tokens
// (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/how-to/quota).
func (Dialect) Profile(id provider.ID, _ string) provider.Profile {
	if id == provider.Azure {
		return provider.Profile{UnsetOutput: provider.ContextWindow}
	}
	return provider.Profile{}
}
