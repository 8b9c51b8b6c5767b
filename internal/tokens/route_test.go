package tokens

import (
	"strings"
	"testing"
)

func TestRecognize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host, path string
		prov       Provider
		api        API
		deployment string
	}{
		// The host decides the provider.
		{"api.openai.com", "/v1/chat/completions", OpenAI, ChatCompletions, ""},
		{"API.OpenAI.com:443", "/v1/responses?x=1", OpenAI, Responses, ""},
		{"api.openai.com.", "/v1/embeddings", OpenAI, Embeddings, ""},
		{"api.openai.com", "/v1/messages", UnknownProvider, UnknownAPI, ""},
		{"api.anthropic.com", "/v1/messages", Anthropic, Messages, ""},
		{"api.anthropic.com", "/v1/chat/completions", Anthropic, ChatCompletions, ""},
		{"Api.Anthropic.Com:80", "/v1/chat/completions/", Anthropic, ChatCompletions, ""},
		{"api.anthropic.com", "/v1/embeddings", UnknownProvider, UnknownAPI, ""},
		{"api.anthropic.com", "/v1/completions", UnknownProvider, UnknownAPI, ""},
		{"api.anthropic.com", "/v1/models", UnknownProvider, UnknownAPI, ""},
		{"res.openai.azure.com", "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21", AzureOpenAI, ChatCompletions, "prod-4o"},
		{"res.cognitiveservices.azure.com", "/openai/v1/chat/completions", AzureOpenAI, ChatCompletions, ""},
		{"RES.OPENAI.AZURE.COM:443", "/openai/deployments/e/embeddings", AzureOpenAI, Embeddings, "e"},
		{"res.openai.azure.com", "/v1/messages", UnknownProvider, UnknownAPI, ""},
		// Unknown hosts keep the path rule.
		{"", "/v1/chat/completions", OpenAI, ChatCompletions, ""},
		{"", "/v1/messages", Anthropic, Messages, ""},
		{"llm.internal", "/v1/messages", Anthropic, Messages, ""},
		{"", "/openai/deployments/d/chat/completions", AzureOpenAI, ChatCompletions, "d"},
		{"vllm:8000", "/prefix/v1/chat/completions", OpenAI, ChatCompletions, ""},
		{".openai.azure.com", "/v1/messages", Anthropic, Messages, ""},
		{"api.openai.com.evil.example", "/v1/messages", Anthropic, Messages, ""},
		{"[::1]:443", "/v1/completions", OpenAI, Completions, ""},
		{"", "/v1/models", UnknownProvider, UnknownAPI, ""},
	} {
		prov, api, dep := recognize(c.host, c.path)
		if prov != c.prov || api != c.api || dep != c.deployment {
			t.Errorf("recognize(%q, %q) = %v %v %q, want %v %v %q", c.host, c.path, prov, api, dep, c.prov, c.api, c.deployment)
		}
	}
}

// TestEstimateByHost prices the same bodies on each host: the host, not the path or the body,
// decides the provider, the estimate and (on Azure) the model.
func TestEstimateByHost(t *testing.T) {
	t.Parallel()
	p, err := New(Options{AzureDeployments: map[string]string{"prod-4o": "gpt-4o"}})
	if err != nil {
		t.Fatal(err)
	}
	chat := []byte(`{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"Hello there, how are you?"}]}`)
	openai := p.Estimate(&Input{Host: "api.openai.com", Path: "/v1/chat/completions", Body: chat})
	compat := p.Estimate(&Input{Host: "api.anthropic.com", Path: "/v1/chat/completions", Body: chat})
	if openai.Provider != OpenAI || compat.Provider != Anthropic || compat.API != ChatCompletions {
		t.Fatalf("providers %v, %v", openai.Provider, compat.Provider)
	}
	if compat.Reason != ReasonAnthropicEstimate || compat.OutputTokens != 50 {
		t.Errorf("compat estimate %+v: want anthropic_estimate, 50 output", compat)
	}
	// Anthropic's estimate of the same text is above the chat rule's count (factor 2 on an
	// unknown Claude model, plus the Messages overheads).
	if compat.PromptTokens < 2*openai.PromptTokens {
		t.Errorf("compat prompt %d, OpenAI's %d: want Anthropic's estimate, at least twice", compat.PromptTokens, openai.PromptTokens)
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

func FuzzRecognize(f *testing.F) {
	for _, s := range [][2]string{{"api.anthropic.com", "/v1/chat/completions"}, {"x.openai.azure.com:443", "/openai/deployments/d/responses"},
		{"[::1]:", "/v1/messages?"}, {"API.OPENAI.COM.", "//"}, {":", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, host, path string) {
		prov, api, dep := recognize(host, path)
		if (prov == UnknownProvider) != (api == UnknownAPI) {
			t.Fatalf("recognize(%q, %q) = %v %v: a provider without an API or the reverse", host, path, prov, api)
		}
		if dep != "" && (prov != AzureOpenAI || strings.Contains(dep, "/")) {
			t.Fatalf("recognize(%q, %q): deployment %q for %v", host, path, dep, prov)
		}
		if prov == Anthropic && api != Messages && api != ChatCompletions {
			t.Fatalf("recognize(%q, %q) = anthropic %v", host, path, api)
		}
	})
}

func BenchmarkRecognize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		recognize("api.anthropic.com:443", "/v1/chat/completions")
	}
}
