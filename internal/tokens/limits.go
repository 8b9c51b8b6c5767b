package tokens

import (
	"path"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// ModelLimits are the most a model takes in and gives out in one request, as its provider
// documents them (internal/provider/pricing defines them, each room holds its family's table
// with its sources).
type ModelLimits = pricing.ModelLimits

// DefaultModelLimits returns a copy of the rooms' tables (Options.ModelLimits when nil).
func DefaultModelLimits() []ModelLimits { return dialects.ModelLimits() }

// limits returns the model's limits, or its provider's maxima (known false) when no entry
// matches. An unknown provider gets OpenAI's, the largest of all.
func (s *call) limits() (l ModelLimits, known bool) {
	for _, r := range s.p.opts.ModelLimits {
		if ok, _ := path.Match(r.Model, s.Est.Model); ok && s.Est.Model != "" {
			return r, true
		}
	}
	return dialects.Maxima(s.Est.Provider), false
}
