package tokens

import (
	"math"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// A declared provider's request is priced by its dialect's room, named after it, and counted in
// its encoding or at its estimate's ratio; the same body on a built-in host is the reference.
func TestDeclaredProviders(t *testing.T) {
	t.Parallel()
	var hosts provider.Hosts
	hosts.Add("api.mistral.ai", &provider.Declared{Name: "mistral", Family: provider.OpenAI})
	hosts.Add("api.groq.com", &provider.Declared{Name: "groq", Family: provider.OpenAI, Encoding: "o200k_base"})
	hosts.Add("*.deepseek.com", &provider.Declared{Name: "deepseek", Family: provider.OpenAI, Ratio: 1.5})
	hosts.Add("api.moonshot.ai", &provider.Declared{Name: "kimi", Family: provider.Anthropic})
	p := newPricer(t, Options{Providers: &hosts})
	plain := newPricer(t, Options{})

	chat := func(model string) string {
		return mustJSON(t, map[string]any{"model": model, "max_tokens": 100, "messages": []map[string]string{
			{"role": "system", "content": "Réponds brièvement, en français: 日本語のテキストも含む。"},
			{"role": "user", "content": "Quelle est la capitale de l'Australie? Explique pourquoi ce n'est pas Sydney."}}})
	}
	on := func(pr *Pricer, host, path, body string) Estimate {
		in := post(path, body)
		in.Host = host
		return pr.Estimate(in)
	}
	o200k := on(plain, "api.openai.com", "/v1/chat/completions", chat("gpt-4o"))
	cl100k := on(plain, "api.openai.com", "/v1/chat/completions", chat("gpt-4"))
	if o200k.PromptTokens == cl100k.PromptTokens {
		t.Fatalf("the fixture counts %d in both encodings: it cannot tell them apart", o200k.PromptTokens)
	}

	// No encoding declared: the dialect's choice, the fallback for a model it does not know.
	got := on(p, "API.Mistral.ai:443", "/v1/chat/completions", chat("mistral-small-latest"))
	want := on(plain, "", "/v1/chat/completions", chat("mistral-small-latest"))
	if got.Name != "mistral" || got.Provider != provider.OpenAI || got.API != provider.ChatCompletions ||
		got.PromptTokens != want.PromptTokens || got.Reason != ReasonUnknownModel || got.OutputTokens != 100 {
		t.Errorf("mistral: %+v, want the path rule's price %d named mistral", got, want.PromptTokens)
	}
	if got.ProviderName() != "mistral" || want.ProviderName() != "openai" {
		t.Errorf("ProviderName: %q and %q", got.ProviderName(), want.ProviderName())
	}

	// encoding: o200k_base counts every model in it, exactly as far as the body goes.
	got = on(p, "api.groq.com", "/openai/v1/chat/completions", chat("llama-3.3-70b-versatile"))
	if got.Name != "groq" || got.PromptTokens != o200k.PromptTokens || !got.Exact || got.Reason != "" {
		t.Errorf("groq: %+v, want %d exact", got, o200k.PromptTokens)
	}

	// estimate: 1.5 is cl100k_base's count times 1.5, an estimate.
	got = on(p, "api.deepseek.com", "/chat/completions", chat("deepseek-chat"))
	if w := int64(math.Ceil(float64(cl100k.PromptTokens) * 1.5)); got.Name != "deepseek" || got.PromptTokens != w ||
		got.Exact || got.Reason != ReasonDeclaredEstimate {
		t.Errorf("deepseek: %+v, want %d (declared_estimate)", got, w)
	}

	// An Anthropic-compatible host: the Messages API, priced by Anthropic's room.
	msgs := mustJSON(t, map[string]any{"model": "kimi-k2", "max_tokens": 64,
		"messages": []map[string]string{{"role": "user", "content": "Hello there, how are you today?"}}})
	got = on(p, "api.moonshot.ai", "/anthropic/v1/messages", msgs)
	want = on(plain, "api.anthropic.com", "/v1/messages", msgs)
	if got.Name != "kimi" || got.Provider != provider.Anthropic || got.API != provider.Messages ||
		got.PromptTokens != want.PromptTokens || got.Reason != ReasonAnthropicEstimate {
		t.Errorf("kimi: %+v, want Anthropic's %d", got, want.PromptTokens)
	}

	// Another path of a declared host is its unpriced API: request limits only.
	got = on(p, "api.mistral.ai", "/v1/files", `{"purpose":"batch"}`)
	if got.Name != "mistral" || got.API != provider.Unpriced || got.Cost() != 0 || got.Reason != ReasonUnpricedAPI {
		t.Errorf("mistral /v1/files: %+v, want its unpriced API", got)
	}
	// The same paths on the plain pricer are OpenAI's (the path rule) and unknown.
	if e := on(plain, "api.mistral.ai", "/v1/files", `{}`); e.Name != "" || e.Provider != provider.Unknown {
		t.Errorf("without the declaration: %+v", e)
	}
}
