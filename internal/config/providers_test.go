package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

func TestProviders(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
providers:
  - {name: mistral, hosts: [api.mistral.ai], dialect: openai, encoding: o200k_base}
  - {name: deepseek, hosts: [API.DeepSeek.com, "*.deepseek.internal"], dialect: openai, estimate: 1.3}
  - {name: kimi, hosts: [api.moonshot.ai], dialect: anthropic}
accounting:
  - {provider: deepseek, counting: max_of_chars}
rules:
  - name: mistral
    match: {provider: mistral, host: "API.mistral.*"}
    per: [provider, model]
    tokens: {limit: 1000, period: minute}
  - name: declared
    match: {provider: "*"}
    tokens: {limit: 1000, period: minute}
`), "providers")
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]provider.Declared{
		"api.mistral.ai":          {Name: "mistral", Family: provider.OpenAI, Encoding: "o200k_base"},
		"api.deepseek.com":        {Name: "deepseek", Family: provider.OpenAI, Ratio: 1.3},
		"gpu-1.deepseek.internal": {Name: "deepseek", Family: provider.OpenAI, Ratio: 1.3},
		"Api.Moonshot.ai":         {Name: "kimi", Family: provider.Anthropic},
	} {
		d := c.Hosts.Lookup(host)
		if d == nil || *d != want {
			t.Errorf("Hosts.Lookup(%q) = %+v, want %+v", host, d, want)
		}
	}
	if c.Hosts.Lookup("api.openai.com") != nil || c.Declared("kimi") != c.Hosts.Lookup("api.moonshot.ai") || c.Declared("openai") != nil {
		t.Error("Declared and Hosts disagree")
	}
	if !c.IsProvider("mistral") || !c.IsProvider("bedrock") || c.IsProvider("groq") {
		t.Error("IsProvider")
	}
	if r := c.Rules[0]; !r.Provider.Match("mistral") || !r.Host.Match("api.mistral.ai") || r.Host.Match("api.openai.com") {
		t.Errorf("rule mistral: provider %q host %q", r.Provider, r.Host)
	}
	var p provider.Profile
	c.Apply(&p, "deepseek", "deepseek-chat")
	if p.Counting != provider.MaxOfChars {
		t.Errorf("accounting of a declared provider not applied: %+v", p)
	}
	// A file without the section declares nothing, and its table is empty, not nil.
	c, err = Parse([]byte("rules: []\n"), "none")
	if err != nil || c.Hosts == nil || c.Hosts.Len() != 0 {
		t.Fatalf("empty providers: %v %+v", err, c)
	}
}

func TestProvidersReportEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`
providers:
  - {name: OpenAI-2, hosts: [], dialect: gemini, encoding: p50k_base}
  - {name: openai, hosts: [api.openai.com, x.openai.azure.com, "*.googleapis.com", "*.amazonaws.com", "*.eu-west-1.amazonaws.com", "*.anthropic.com"], dialect: openai}
  - {name: mistral, hosts: ["api.mistral.ai:443", "*.com", "a.*.example.com", "bad_host!", "..x", api.mistral.ai], dialect: openai, encoding: cl100k_base, estimate: 1.2}
  - {name: mistral, hosts: [API.mistral.ai, api.mistral.ai], estimate: 11, ratio: 2}
  - {name: unknown, hosts: ["*.anthropic.com"], dialect: anthropic}
  - {name: "", hosts: [""], dialect: openai, estimate: -1}
accounting:
  - {provider: groq}
rules:
  - {name: a, match: {provider: groq, host: "api.groq.com:443"}, tokens: {limit: 1, period: second}}
`), "bad")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Parse = %v, want *Error", err)
	}
	want := []string{
		"line 6: field ratio not found in type config.ProviderSpec",
		`providers[0].name: "OpenAI-2" must be 1 to 32 of [a-z0-9_-]`,
		`providers[0].dialect: "gemini" is not openai or anthropic`,
		`providers[0].encoding: "p50k_base" is not o200k_base or cl100k_base`,
		`providers[0].hosts: needs at least one host`,
		`providers[1].name: "openai" is a built-in provider's name (openai, azure, anthropic, bedrock, gemini, vertex)`,
		`providers[1].hosts[0]: "api.openai.com" is (or covers) a host of the built-in provider openai`,
		`providers[1].hosts[1]: "x.openai.azure.com" is (or covers) a host of the built-in provider azure`,
		`providers[1].hosts[2]: "*.googleapis.com" is (or covers) a host of the built-in provider gemini`,
		`providers[1].hosts[3]: "*.amazonaws.com" is (or covers) a host of the built-in provider bedrock`,
		`providers[1].hosts[4]: "*.eu-west-1.amazonaws.com" is (or covers) a host of the built-in provider bedrock`,
		`providers[1].hosts[5]: "*.anthropic.com" is (or covers) a host of the built-in provider anthropic`,
		`providers[2].estimate: give encoding or estimate, not both`,
		`providers[2].hosts[0]: "api.mistral.ai:443" has a port: name the host alone (ports are ignored)`,
		`providers[2].hosts[1]: "*.com" is too wide: a wildcard needs a name of two labels under it (*.example.com)`,
		`providers[2].hosts[2]: "a.*.example.com" has a * that is not its whole first label (*.example.com)`,
		`providers[2].hosts[3]: "bad_host!" is not a host name (labels of a-z, 0-9, - and _, joined by dots)`,
		`providers[2].hosts[4]: "..x" is not a host name (labels of a-z, 0-9, - and _, joined by dots)`,
		`providers[3].name: "mistral" is declared twice`,
		`providers[3].dialect: required: openai or anthropic`,
		`providers[3].estimate: 11 is not in [0.1, 10] (a ratio over cl100k_base counts)`,
		`providers[3].hosts[0]: "API.mistral.ai" is already declared by providers[2].hosts[5]`,
		`providers[3].hosts[1]: "api.mistral.ai" is already declared by providers[2].hosts[5]`,
		`providers[4].name: "unknown" is a built-in provider's name (openai, azure, anthropic, bedrock, gemini, vertex)`,
		`providers[4].hosts[0]: "*.anthropic.com" is (or covers) a host of the built-in provider anthropic`,
		`providers[5].name: "" must be 1 to 32 of [a-z0-9_-]`,
		`providers[5].estimate: -1 is not in [0.1, 10] (a ratio over cl100k_base counts)`,
		`providers[5].hosts[0]: "" is empty`,
		`accounting[0].provider: "groq" is not one of openai, azure, anthropic, bedrock, gemini, vertex, mistral`,
		`rules[0].match.provider: "groq" is not one of openai, azure, anthropic, bedrock, gemini, vertex, mistral`,
		`rules[0].match.host: "api.groq.com:443" has a port: hosts are matched without theirs`,
	}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), "bad: 31 problem(s)") {
		t.Errorf("message: %v", err)
	}
}
