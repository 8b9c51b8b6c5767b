package config

import (
	"fmt"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Accounting is a compiled accounting override: the fields of a provider's profile it sets for
// the models matching Model.
type Accounting struct {
	Provider string
	Model    Glob
	set      accountingFields
	p        provider.Profile
}

type accountingFields uint8

const (
	setCounting accountingFields = 1 << iota
	setUnsetOutput
	setWeight
	setCacheReads
	setSettles
)

// MaxOutputWeight bounds accounting.output_weight.
const MaxOutputWeight = 100

// Apply overrides p, the built-in profile of providerName's model, with the first accounting
// entry that matches them. It allocates nothing.
func (c *Config) Apply(p *provider.Profile, providerName, model string) {
	for i := range c.Accounting {
		a := &c.Accounting[i]
		if a.Provider != providerName || !a.Model.Match(model) {
			continue
		}
		if a.set&setCounting != 0 {
			p.Counting = a.p.Counting
		}
		if a.set&setUnsetOutput != 0 {
			p.UnsetOutput = a.p.UnsetOutput
		}
		if a.set&setWeight != 0 {
			p.OutputWeight = a.p.OutputWeight
		}
		if a.set&setCacheReads != 0 {
			p.CacheReadsFree = a.p.CacheReadsFree
		}
		if a.set&setSettles != 0 {
			p.Settles = a.p.Settles
		}
		return
	}
}

// builtinProviders names the providers with a room of their own, as the limits file spells them.
const builtinProviders = "openai, azure, anthropic, bedrock, gemini, vertex"

// compileAccounting validates accounting[i].
func compileAccounting(s *AccountingSpec, key string, c *Config) (Accounting, []error) {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", key, k, fmt.Sprintf(format, args...)))
	}
	a := Accounting{Provider: s.Provider, Model: NewGlob(s.Model)}
	if !c.IsProvider(s.Provider) {
		bad("provider", "%q is not one of %s", s.Provider, c.providerNames())
	}
	switch s.Counting {
	case "":
	case "sum":
		a.set |= setCounting
	case "max_of_chars":
		a.set |= setCounting
		a.p.Counting = provider.MaxOfChars
	default:
		bad("counting", "%q is not sum or max_of_chars", s.Counting)
	}
	switch s.UnsetOutput {
	case "":
	case "default":
		a.set |= setUnsetOutput
	case "context_window":
		a.set |= setUnsetOutput
		a.p.UnsetOutput = provider.ContextWindow
	default:
		bad("unset_output", "%q is not default or context_window", s.UnsetOutput)
	}
	switch {
	case s.OutputWeight == 0:
	case s.OutputWeight < 1 || s.OutputWeight > MaxOutputWeight:
		bad("output_weight", "%d is not in [1, %d]", s.OutputWeight, MaxOutputWeight)
	default:
		a.set |= setWeight
		a.p.OutputWeight = s.OutputWeight
	}
	switch s.CacheReads {
	case "":
	case "counted":
		a.set |= setCacheReads
	case "free":
		a.set |= setCacheReads
		a.p.CacheReadsFree = true
	default:
		bad("cache_reads", "%q is not counted or free", s.CacheReads)
	}
	if s.Settles != nil {
		a.set |= setSettles
		for i, d := range *s.Settles {
			switch d {
			case "tokens":
				a.p.Settles = a.p.Settles.With(provider.Tokens)
			case "input_tokens":
				a.p.Settles = a.p.Settles.With(provider.InputTokens)
			case "output_tokens":
				a.p.Settles = a.p.Settles.With(provider.OutputTokens)
			default:
				bad(fmt.Sprintf("settles[%d]", i), "%q is not tokens, input_tokens or output_tokens", d)
			}
		}
	}
	return a, errs
}
