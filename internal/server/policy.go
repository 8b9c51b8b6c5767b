package server

import (
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reconcile"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

var _ filter.Estimator = (*tokens.Pricer)(nil)

// NewPolicy builds the estimator of a configuration: a reload replaces both together.
func NewPolicy(c *config.Config) (*filter.Policy, error) {
	p := c.File.Pricing
	opts := tokens.Options{
		DefaultOutputTokens: p.DefaultOutputTokens,
		FallbackEncoding:    p.FallbackEncoding,
		RequestBufferBytes:  p.MaxRequestBytes,
		OpenAI:              openai.Settings{AzureDeployments: p.AzureDeployments},
		// The config's defaults are the tokens package's: 0 means the table's maxima.
		UnreadableOutputTokens: p.Unreadable.OutputTokens,
		RefuseUnreadable:       c.RefuseUnreadable,
		UnseenContextTokens:    p.UnseenContextTokens,
		Providers:              c.Hosts,
	}
	for _, m := range p.OutputTokens {
		opts.OutputRules = append(opts.OutputRules, tokens.OutputRule{Model: m.Model, Tokens: m.Tokens})
	}
	est, err := tokens.New(opts)
	if err != nil {
		return nil, err
	}
	return &filter.Policy{Config: c, Estimator: est}, nil
}

// SettlementOf compiles a configuration's settlement section for the response path.
func SettlementOf(c *config.Config) (reconcile.Settlement, error) {
	f := c.File.Settlement
	set := reconcile.Settlement{KeepOnClientError: f.KeepOnClientError, UsageFactor: f.UsageFactor, MaxUsage: f.MaxUsageTokens}
	for _, spec := range c.File.Providers {
		if d := c.Declared(spec.Name); d != nil {
			if set.Declared == nil {
				set.Declared = map[string]provider.ID{}
			}
			set.Declared[d.Name] = d.Family
		}
	}
	for _, name := range f.Decode {
		e, err := reconcile.ParseEncoding(name)
		if err != nil {
			return set, err
		}
		set.Decode |= e
	}
	return set, set.Validate()
}
