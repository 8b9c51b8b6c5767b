package filter

import (
	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// costs are what one request counts in each dimension.
type costs [provider.Dimensions]int64

// charge is what a request priced est counts in each dimension, the way its provider counts it
// at admission (prof, the provider's profile after the file's accounting overrides):
//   - input_tokens: the prompt, less the prefix the provider is expected to read from its
//     prompt cache where cache reads are free (est.CacheRead, internal/promptcache; settlement
//     charges it back if the provider wrote it instead);
//   - output_tokens: the output reserved (max_tokens, or what prof.UnsetOutput says when the
//     request names none) times prof's output weight;
//   - tokens: their sum (Sum), or the larger of the weighted output and the request's characters
//     over four (MaxOfChars: OpenAI's "maximum of max_tokens and the estimated number of tokens
//     based on the character count of your request",
//     https://platform.openai.com/docs/guides/rate-limits);
//   - requests: one.
//
// Each is capped at the store's largest amount: a hostile max_tokens may price above any
// store's range, and capped it still can never fit (413) where the raw cost would be an invalid
// request (503, a store failure).
func charge(prof *provider.Profile, est *tokens.Estimate) costs {
	out := est.OutputTokens
	if prof.UnsetOutput == provider.ContextWindow && est.OutputUnset && est.Context > 0 {
		// Azure OpenAI: "If max_tokens isn't set, the maximum possible value of the model
		// context size will be inferred for the request's quota reservation"
		// (https://learn.microsoft.com/en-us/azure/ai-foundry/openai/how-to/quota).
		out = est.Context
	}
	out = pricing.SatMul(out, prof.Weight())
	in := est.PromptTokens
	if prof.CacheReadsFree {
		in -= est.CacheRead
	}
	var c costs
	c[provider.InputTokens] = min(in, bucket.MaxAmount)
	c[provider.OutputTokens] = min(out, bucket.MaxAmount)
	switch prof.Counting {
	case provider.MaxOfChars:
		chars := est.PromptTokens // an unread body: its bound is at least a token per byte
		if est.Chars > 0 {
			chars = (est.Chars + 3) / 4
		}
		c[provider.Tokens] = min(max(out, chars), bucket.MaxAmount)
	default:
		c[provider.Tokens] = min(in+out, bucket.MaxAmount)
	}
	c[provider.Requests] = 1
	return c
}

// Charge is what a request priced est counts in each dimension at admission under prof (see
// charge): for internal/replay's simulation of a provider's own limits.
func Charge(prof *provider.Profile, est *tokens.Estimate) [provider.Dimensions]int64 {
	return charge(prof, est)
}

// maxSpend is the most a request priced est can cost at p, in micro-units: its whole prompt at
// the dearest input price (a prompt may be written to the cache; admission cannot know that a
// read would cost less) and its output maximum at the output price. A request that names no
// output maximum may generate up to the model's context window, which is reserved when the
// pricer knows it. Reserved at admission, this is what makes a money budget a bound: the
// settled cost of a usage within the estimate is never above it (price.Price.Max).
func maxSpend(p *price.Price, est *tokens.Estimate) int64 {
	out := est.OutputTokens
	if est.OutputUnset && est.Context > 0 {
		out = max(out, est.Context)
	}
	return p.Max(est.PromptTokens, out)
}
