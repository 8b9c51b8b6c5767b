package reconcile

import (
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

const providerTokens = provider.Tokens

// dims are what a response took from the provider's budget in each dimension.
type dims [provider.Dimensions]int64

// counted is what the provider counted of usage u in each dimension, by the profile the request
// was admitted with (r.Weight, r.CacheReadsFree):
//   - input_tokens: the prompt, cache writes included, cache reads excluded where they are free
//     (Anthropic's ITPM: https://docs.anthropic.com/en/api/rate-limits);
//   - output_tokens: the output times the output weight;
//   - tokens: their sum; the provider's own total when it gives one and the profile changes
//     nothing of it (OpenAI's total_tokens);
//   - requests: one;
//   - cost: what u costs at the price the request was admitted with (r.Price, none without):
//     uncached input, cache reads, cache writes and output each at its own price.
func counted(r *reservation.Reservation, u provider.Usage) dims {
	var c dims
	w := max(r.Weight, 1)
	in := u.Input
	if r.CacheReadsFree {
		in = max(in-u.CacheRead, 0)
	}
	c[provider.InputTokens] = in
	c[provider.OutputTokens] = min(u.Output*w, provider.MaxCount)
	c[provider.Tokens] = in + c[provider.OutputTokens]
	if u.Total > 0 && w == 1 && !(r.CacheReadsFree && u.CacheRead > 0) {
		c[provider.Tokens] = u.Total
	}
	c[provider.Requests] = 1
	c[provider.Cost] = spent(r, u)
	return c
}

// spent is what usage u costs at r's price, in micro-units; 0 without a price.
func spent(r *reservation.Reservation, u provider.Usage) int64 {
	if r.Price == nil {
		return 0
	}
	return r.Price.Cost(price.Usage{Input: u.Input, CacheRead: u.CacheRead, CacheWrite: u.CacheWrite, CacheWrite1h: u.CacheWrite1h, Output: u.Output})
}

// max is the largest token count of c.
func (c *dims) max() int64 {
	return max(c[provider.Tokens], c[provider.InputTokens], c[provider.OutputTokens])
}

// clamp bounds every token count of c by b, and the cost by the cost of usage u with each of its
// counts bounded by b.
func (c *dims) clamp(b int64, r *reservation.Reservation, u provider.Usage) {
	for _, d := range [...]provider.Dimension{provider.Tokens, provider.InputTokens, provider.OutputTokens} {
		c[d] = min(c[d], b)
	}
	u.Input, u.Output, u.CacheRead, u.CacheWrite = min(u.Input, b), min(u.Output, b), min(u.CacheRead, b), min(u.CacheWrite, b)
	u.CacheWrite1h = min(u.CacheWrite1h, u.CacheWrite)
	c[provider.Cost] = min(c[provider.Cost], spent(r, u))
}
