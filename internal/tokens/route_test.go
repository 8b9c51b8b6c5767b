package tokens

import (
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// TestEstimateByHost prices the same bodies on each host: the host, not the path or the body,
// decides the provider, the estimate and (on Azure) the model.
func TestEstimateByHost(t *testing.T) {
	t.Parallel()
	p, err := New(Options{OpenAI: openai.Settings{AzureDeployments: map[string]string{"prod-4o": "gpt-4o"}}})
	if err != nil {
		t.Fatal(err)
	}
	chat := []byte(`{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"Hello there, how are you?"}]}`)
	onOpenAI := p.Estimate(&Input{Host: "api.openai.com", Path: "/v1/chat/completions", Body: chat})
	compat := p.Estimate(&Input{Host: "api.anthropic.com", Path: "/v1/chat/completions", Body: chat})
	if onOpenAI.Provider != OpenAI || compat.Provider != Anthropic || compat.API != ChatCompletions {
		t.Fatalf("providers %v, %v", onOpenAI.Provider, compat.Provider)
	}
	if compat.Reason != ReasonAnthropicEstimate || compat.OutputTokens != 50 {
		t.Errorf("compat estimate %+v: want anthropic_estimate, 50 output", compat)
	}
	// Anthropic's estimate of the same text is above the chat rule's count (factor 2 on an
	// unknown Claude model, plus the Messages overheads).
	if compat.PromptTokens < 2*onOpenAI.PromptTokens {
		t.Errorf("compat prompt %d, OpenAI's %d: want Anthropic's estimate, at least twice", compat.PromptTokens, onOpenAI.PromptTokens)
	}
	tools := []byte(`{"model":"claude-sonnet-4-5","max_completion_tokens":7,"n":2,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}]}`)
	if e := p.Estimate(&Input{Host: "api.anthropic.com", Path: "/v1/chat/completions", Body: tools}); e.OutputTokens != 14 || e.PromptTokens < anthropicToolsSystem {
		t.Errorf("compat with tools %+v: want 14 output and the tool-use system prompt", e)
	}

	for _, c := range []struct{ path, body, model string }{
		{"/openai/deployments/prod-4o/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, "gpt-4o"},
		{"/openai/deployments/PROD-4o/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, "gpt-4o"},
		{"/openai/deployments/%70rod-4o/chat/completions", `{"messages":[]}`, "gpt-4o"},
		{"/openai/deployments/other/chat/completions", `{"model":"gpt-4o","messages":[]}`, "other"},
		{"/openai/deployments/prod-4o/chat/completions", `not json "model":"gpt-4o-mini"`, "gpt-4o"},
		{"/openai/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[]}`, "gpt-4o-mini"},
	} {
		e := p.Estimate(&Input{Host: "res.openai.azure.com", Path: c.path, Body: []byte(c.body)})
		if e.Provider != AzureOpenAI || e.Model != c.model {
			t.Errorf("%s %s: provider %v model %q, want azure %q", c.path, c.body, e.Provider, e.Model, c.model)
		}
	}
}
