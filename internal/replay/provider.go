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
)

// ProviderLimits are a provider's own limits, as a simple token bucket per model: what the
// provider would have refused of the traffic the limits let through. The file is strict YAML:
//
//	limits:
//	  - {provider: openai, model: "gpt-4o*", tokens_per_minute: 30000, requests_per_minute: 500}
//
// The first entry whose provider and model globs match applies, each model in its own
// buckets. A request counts its prompt plus its output reserved, at admission (as OpenAI
// counts), and one request; a request no entry matches is never refused.
type ProviderLimits struct {
	Limits []ProviderLimit `yaml:"limits"`

	globs [][2]config.Glob
}

// ProviderLimit is one entry of ProviderLimits.
type ProviderLimit struct {
	Provider          string `yaml:"provider"`
	Model             string `yaml:"model"`
	TokensPerMinute   int64  `yaml:"tokens_per_minute"`
	RequestsPerMinute int64  `yaml:"requests_per_minute"`
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
		if l.TokensPerMinute < 0 || l.RequestsPerMinute < 0 || (l.TokensPerMinute == 0 && l.RequestsPerMinute == 0) {
			errs = append(errs, fmt.Errorf("limits[%d]: tokens_per_minute and requests_per_minute must not be negative, and one must be set", i))
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

// providerSim keeps the provider's buckets, in a memory store of its own on the replay's clock.
type providerSim struct {
	limits *ProviderLimits
	store  *bucket.Memory
	specs  []bucket.Spec
}

func newProviderSim(l *ProviderLimits, now func() time.Time) *providerSim {
	return &providerSim{limits: l, store: bucket.NewMemory(bucket.MemoryOptions{Now: now})}
}

// admit reports whether the provider would have accepted d, and debits it when so.
func (p *providerSim) admit(d *decisionlog.Decision) bool {
	for i, g := range p.limits.globs {
		if !g[0].Match(d.Provider) || !g[1].Match(d.Model) {
			continue
		}
		l := &p.limits.Limits[i]
		name := d.Provider + "|" + d.Model
		p.specs = p.specs[:0]
		if l.TokensPerMinute > 0 {
			p.specs = append(p.specs, bucket.Spec{Name: name, Limit: l.TokensPerMinute, Period: time.Minute,
				Cost: min(d.Prompt+d.Output, bucket.MaxAmount), Slot: 1})
		}
		if l.RequestsPerMinute > 0 {
			p.specs = append(p.specs, bucket.Spec{Name: name, Limit: l.RequestsPerMinute, Period: time.Minute, Cost: 1, Slot: 2})
		}
		res, err := p.store.Take(context.Background(), &bucket.Request{Tag: d.Provider, Buckets: p.specs})
		return err == nil && (res.Outcome == bucket.Allowed || res.Outcome == bucket.Delayed)
	}
	return true
}
