package anthropic

import (
	"slices"
	"strings"
	"testing"
)

func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	var s Settings
	if err := s.Validate(); err != nil {
		t.Fatalf("zero Settings: %v", err)
	}
	if s.Factor != DefaultFactor || s.ImageTokens != DefaultImageTokens || !slices.Equal(s.Factors, DefaultFactors()) {
		t.Errorf("zero Settings validated to %+v, want the defaults", s)
	}
	none := Settings{Factors: []FactorRule{}}
	if err := none.Validate(); err != nil || len(none.Factors) != 0 {
		t.Errorf("an empty Factors is no rule: %+v, %v", none.Factors, err)
	}
	bad := Settings{Factor: 0.5, ImageTokens: -1, Factors: []FactorRule{{Model: "[", Factor: 1.5}, {Model: "claude-*", Factor: 11}}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad settings")
	}
	for _, want := range []string{"anthropic: Factor 0.5", "anthropic: ImageTokens", "Factors[0]: model glob", "Factors[1]: factor 11"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestFactor: the first matching rule wins; a model no rule matches gets Factor.
func TestFactor(t *testing.T) {
	t.Parallel()
	var s Settings
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	for model, want := range map[string]float64{
		"claude-3-5-haiku-latest": 1.6,
		"claude-opus-4-1":         1.6,
		"claude-sonnet-4-6":       1.6,
		"claude-sonnet-4":         1.6,
		"claude-opus-4-7":         2,
		"claude-next":             2,
		"":                        2,
	} {
		if got := s.factor(model); got != want {
			t.Errorf("factor(%q) = %v, want %v", model, got, want)
		}
	}
}
