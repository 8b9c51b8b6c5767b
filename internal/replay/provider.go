package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// ProviderLimits are a provider's own limits, as token buckets per model: what the provider
// would have refused of the traffic the limits let through. The file is strict YAML:
//
//	limits:
//	  - {provider: openai, model: "gpt-4o*", tokens_per_minute: 30000, requests_per_minute: 500}
//	  - {provider: anthropic, model: "claude-*", input_tokens_per_minute: 40000, output_tokens_per_minute: 8000}
//
// The first entry whose provider and model globs match applies, each model in its own
// buckets. A request counts as its provider counts it (the accounting profile of its dialect,
// internal/provider: what tokens_per_minute sums, whether cache reads count as input, the
// output weight, what an unset maximum reserves; output_weight overrides the weight), at
// admission; the dimensions the profile settles (Anthropic's input and output) are adjusted to
// the recorded usage when the response settles, and the others charged only what the usage
// exceeds. A request no entry matches is never refused.
type ProviderLimits struct {
	Limits []ProviderLimit `yaml:"limits"`

	globs [][2]config.Glob
}

// ProviderLimit is one entry of ProviderLimits.
type ProviderLimit struct {
	Provider              string `yaml:"provider"`
	Model                 string `yaml:"model"`
	TokensPerMinute       int64  `yaml:"tokens_per_minute"`
	InputTokensPerMinute  int64  `yaml:"input_tokens_per_minute"`
	OutputTokensPerMinute int64  `yaml:"output_tokens_per_minute"`
	RequestsPerMinute     int64  `yaml:"requests_per_minute"`
	// OutputWeight, when set, replaces the profile's output weight.
	OutputWeight int64 `yaml:"output_weight"`
}

// perMinute is l's limit in each dimension (0: none).
func (l *ProviderLimit) perMinute() [provider.Dimensions]int64 {
	var m [provider.Dimensions]int64
	m[provider.Tokens], m[provider.InputTokens], m[provider.OutputTokens], m[provider.Requests] =
		l.TokensPerMinute, l.InputTokensPerMinute, l.OutputTokensPerMinute, l.RequestsPerMinute
	return m
}

// LoadProviderLimits reads and validates a provider limits file.
func LoadProviderLimits(path string) (*ProviderLimits, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	return ParseProviderLimits(data, path)
}

// ParseProviderLimits decodes and validates provider limits; name is for messages. Every
// problem is reported at once.
func ParseProviderLimits(data []byte, name string) (*ProviderLimits, error) {
	var p ProviderLimits
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&p); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("replay: provider limits %s: %w", name, err)
	}
	var errs []error
	if len(p.Limits) == 0 {
		errs = append(errs, errors.New("limits: none given"))
	}
	for i, l := range p.Limits {
		set := false
		for _, v := range l.perMinute() {
			if v < 0 {
				errs = append(errs, fmt.Errorf("limits[%d]: a limit must not be negative", i))
			}
			set = set || v > 0
		}
		if !set {
			errs = append(errs, fmt.Errorf("limits[%d]: one of tokens_per_minute, input_tokens_per_minute, output_tokens_per_minute and requests_per_minute must be set", i))
		}
		if l.OutputWeight < 0 {
			errs = append(errs, fmt.Errorf("limits[%d]: output_weight must not be negative", i))
		}
		prov, model := l.Provider, l.Model
		if prov == "" {
			prov = "*"
		}
		if model == "" {
			model = "*"
		}
		p.globs = append(p.globs, [2]config.Glob{config.NewGlob(prov), config.NewGlob(model)})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("replay: provider limits %s: %w", name, err)
	}
	return &p, nil
}

// providerSim keeps the provider's buckets, in a memory store of its own on the replay's clock,
// and what each admitted request was charged there until it settles.
type providerSim struct {
	limits  *ProviderLimits
	store   *bucket.Memory
	specs   []bucket.Spec
	charged map[string]simCharge // replay reservation id -> its charge
}

// simCharge is what the provider's buckets charged one request, for its settlement.
type simCharge struct {
	specs []bucket.Spec // the buckets, Cost what each was charged
	dims  []provider.Dimension
	prof  provider.Profile
	tag   string
}

func newProviderSim(l *ProviderLimits, now func() time.Time) *providerSim {
	return &providerSim{limits: l, store: bucket.NewMemory(bucket.MemoryOptions{Now: now}), charged: map[string]simCharge{}}
}

// admit reports whether the provider would have accepted d, and debits it when so; id names
// the request's settlement ("" when none will come).
func (p *providerSim) admit(d *decisionlog.Decision, id string) bool {
	for i, g := range p.limits.globs {
		if !g[0].Match(d.Provider) || !g[1].Match(d.Model) {
			continue
		}
		l := &p.limits.Limits[i]
		pid := provider.Parse(d.Provider)
		prof := dialects.Of(pid).Profile(pid, d.Model)
		if l.OutputWeight > 0 {
			prof.OutputWeight = l.OutputWeight
		}
		est := tokens.Estimate{Provider: pid, Model: d.Model, PromptTokens: d.Prompt, OutputTokens: d.Output,
			OutputUnset: d.OutputUnset, Context: d.Context, Chars: d.Chars, CacheRead: d.CacheRead}
		cost := filter.Charge(&prof, &est)
		name := d.Provider + "|" + d.Model
		p.specs = p.specs[:0]
		var dims []provider.Dimension
		for dim, limit := range l.perMinute() {
			if limit > 0 {
				p.specs = append(p.specs, bucket.Spec{Name: name, Limit: limit, Period: time.Minute,
					Cost: min(cost[dim], bucket.MaxAmount), Slot: uint8(dim + 1)})
				dims = append(dims, provider.Dimension(dim))
			}
		}
		res, err := p.store.Take(context.Background(), &bucket.Request{Tag: d.Provider, Buckets: p.specs})
		ok := err == nil && (res.Outcome == bucket.Allowed || res.Outcome == bucket.Delayed)
		if ok && id != "" {
			p.charged[id] = simCharge{specs: append([]bucket.Spec(nil), p.specs...), dims: dims, prof: prof, tag: d.Provider}
		}
		return ok
	}
	return true
}

// settle adjusts the provider's buckets of the request id to its usage: the dimensions its
// profile settles to what it used, the others only charged what the usage exceeds.
func (p *providerSim) settle(id string, s *decisionlog.Settlement) {
	c, ok := p.charged[id]
	if !ok {
		return
	}
	delete(p.charged, id)
	if !s.Found || s.Status >= 400 || s.Local {
		return
	}
	in := s.Input
	if c.prof.CacheReadsFree {
		in -= s.CacheRead
	}
	var used [provider.Dimensions]int64
	used[provider.InputTokens] = max(in, 0)
	used[provider.OutputTokens] = s.Output * c.prof.Weight()
	used[provider.Tokens] = used[provider.InputTokens] + used[provider.OutputTokens]
	adj := make([]bucket.Adjustment, 0, len(c.specs))
	for i, sp := range c.specs {
		dim := c.dims[i]
		if dim == provider.Requests {
			continue
		}
		d := sp.Cost - used[dim]
		if d > 0 && !c.prof.Settles.Has(dim) {
			d = 0 // counted at admission and kept
		}
		if d != 0 {
			adj = append(adj, bucket.Adjustment{Spec: sp, Delta: d})
		}
	}
	if len(adj) > 0 {
		_ = p.store.Adjust(context.Background(), c.tag, adj) // the memory store fails only on invalid specs
	}
}
