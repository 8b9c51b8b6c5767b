package anthropic

import (
	"errors"
	"fmt"
	"path"
)

// FactorRule sets the estimate's multiplier for the models matching a glob.
type FactorRule struct {
	Model  string // path.Match glob over the model name
	Factor float64
}

// DefaultFactors returns the rules used when Settings.Factors is nil: 1.6 for the models that
// use Anthropic's earlier tokenizer (Claude 3 through Opus 4.6, Sonnet 4.6 and Haiku 4.5);
// newer models fall back to Settings.Factor. The package doc gives the evidence.
func DefaultFactors() []FactorRule {
	return []FactorRule{
		{Model: "claude-3*", Factor: 1.6},
		{Model: "claude-*-4-[0-6]*", Factor: 1.6},
		{Model: "claude-*-4", Factor: 1.6},
	}
}

// Defaults Validate gives zero Settings fields.
const (
	// DefaultFactor is the multiplier of newer and unknown models.
	DefaultFactor = 2.0
	// DefaultImageTokens is the most Anthropic's published image formula gives
	// (1.15 megapixels / 750).
	DefaultImageTokens = 1600
)

// Settings are the family's pricing settings (tokens.Options.Anthropic). The zero value is the
// defaults, which Validate fills in; after it, a Settings is read only, and so safe for
// concurrent use.
type Settings struct {
	// Factors set the multiplier of the cl100k_base count of request text per model glob (first
	// match wins). Nil means DefaultFactors; an empty non-nil slice means none.
	Factors []FactorRule
	// Factor is the multiplier for the models no Factors rule matches (newer and unknown
	// models). Must be in [1, 10]. 0 means DefaultFactor.
	Factor float64
	// ImageTokens is the cost of an image whose size is unknown. 0 means DefaultImageTokens.
	ImageTokens int64
}

// Validate fills the defaults of zero fields and reports every invalid setting at once, each
// error naming it. Call it once, before the Settings price a request.
func (s *Settings) Validate() error {
	if s.Factors == nil {
		s.Factors = DefaultFactors()
	}
	if s.Factor == 0 {
		s.Factor = DefaultFactor
	}
	if s.ImageTokens == 0 {
		s.ImageTokens = DefaultImageTokens
	}
	var errs []error
	if !(s.Factor >= 1 && s.Factor <= 10) {
		errs = append(errs, fmt.Errorf("anthropic: Factor %v out of range [1, 10]", s.Factor))
	}
	for i, r := range s.Factors {
		if _, err := path.Match(r.Model, ""); err != nil {
			errs = append(errs, fmt.Errorf("anthropic: Factors[%d]: model glob %q: %w", i, r.Model, err))
		}
		if !(r.Factor >= 1 && r.Factor <= 10) {
			errs = append(errs, fmt.Errorf("anthropic: Factors[%d]: factor %v out of range [1, 10]", i, r.Factor))
		}
	}
	if s.ImageTokens < 0 {
		errs = append(errs, fmt.Errorf("anthropic: ImageTokens %d is negative", s.ImageTokens))
	}
	return errors.Join(errs...)
}

// factor is the multiplier for model.
func (s *Settings) factor(model string) float64 {
	for _, r := range s.Factors {
		if ok, _ := path.Match(r.Model, model); ok {
			return r.Factor
		}
	}
	return s.Factor
}
