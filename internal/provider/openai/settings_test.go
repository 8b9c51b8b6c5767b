package openai

import (
	"strings"
	"testing"
)

func TestSettingsValidate(t *testing.T) {
	t.Parallel()
	var zero Settings
	if err := zero.Validate(); err != nil {
		t.Errorf("zero Settings: %v", err)
	}
	bad := Settings{ImageTokens: -1, AzureDeployments: map[string]string{"": "gpt-4o", "d": ""}}
	err := bad.Validate()
	if err == nil {
		t.Fatal("Validate accepted bad settings")
	}
	for _, want := range []string{"openai: ImageTokens", `AzureDeployments: empty deployment or model ("": "gpt-4o")`, `("d": "")`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// TestDeploymentModel: the deployment decides the model, whatever spelling reaches it.
func TestDeploymentModel(t *testing.T) {
	t.Parallel()
	s := Settings{AzureDeployments: map[string]string{"prod-4o": "gpt-4o", "Mixed": "gpt-4.1"}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("A", maxFoldedName+1)
	for d, want := range map[string]string{
		"":           "",
		"prod-4o":    "gpt-4o",
		"PROD-4o":    "gpt-4o",
		"%70rod-4o":  "gpt-4o",
		"%50ROD-4O":  "gpt-4o",
		"mixed":      "gpt-4.1",
		"other":      "other",
		"%zz":        "%zz", // not percent-encoding: the name as sent
		"gpt-35-tur": "gpt-35-tur",
		long:         long, // too long to fold: looked up as sent
	} {
		if got := s.DeploymentModel(d); got != want {
			t.Errorf("DeploymentModel(%q) = %q, want %q", d, got, want)
		}
	}
}

// A deployment's model is looked up on every Azure request: regardless of case, it allocates
// nothing.
func TestDeploymentModelAllocatesNothing(t *testing.T) {
	s := Settings{AzureDeployments: map[string]string{"prod-4o": "gpt-4o"}}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.DeploymentModel("PROD-4o") }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
