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

// TestEstimateGeminiModelFromPath: Gemini and Vertex AI name the model in the path, which
// decides it whatever the body says, percent-decoded; an unreadable body is bounded by that
// model's limits.
func TestEstimateGeminiModelFromPath(t *testing.T) {
	t.Parallel()
	p, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"model":"gpt-4o","contents":[{"role":"user","parts":[{"text":"Hello there"}]}],"generationConfig":{"maxOutputTokens":20}}`
	for _, c := range []struct{ host, path, model string }{
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini-2.0-flash:generateContent", "gemini-2.0-flash"},
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini%2D2.5-pro:streamGenerateContent?alt=sse", "gemini-2.5-pro"},
		{"us-central1-aiplatform.googleapis.com", "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent", "gemini-2.0-flash"},
	} {
		e := p.Estimate(&Input{Host: c.host, Path: c.path, Body: []byte(body)})
		if e.Model != c.model || e.OutputTokens != 20 || e.Reason != ReasonGeminiEstimate || e.PromptTokens <= 0 {
			t.Errorf("%s%s: %+v, want model %q, 20 output, gemini_estimate", c.host, c.path, e, c.model)
		}
	}
	e := p.Estimate(&Input{Host: "generativelanguage.googleapis.com", Path: "/v1beta/models/gemini-2.0-flash:generateContent", Body: []byte(`{"contents": [`)})
	if e.Model != "gemini-2.0-flash" || e.OutputTokens != 8_192 || e.Reason != ReasonNotJSON {
		t.Errorf("unreadable Gemini body: %+v, want the path's model and its 8,192 output bound", e)
	}
	e = p.Estimate(&Input{Host: "aiplatform.googleapis.com", Path: "/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict",
		Body: []byte(`{"anthropic_version":"vertex-2023-10-16","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`)})
	if e.Model != "claude-sonnet-4-5@20250929" || !e.Stream || e.OutputTokens != 64 || e.Reason != ReasonAnthropicEstimate {
		t.Errorf("Claude on Vertex: %+v", e)
	}
}
