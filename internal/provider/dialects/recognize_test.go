package dialects

import (
	"strings"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

func TestRecognize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host, path string
		prov       provider.ID
		api        provider.API
		deployment string
	}{
		// The host decides the provider.
		{"api.openai.com", "/v1/chat/completions", provider.OpenAI, provider.ChatCompletions, ""},
		{"API.OpenAI.com:443", "/v1/responses?x=1", provider.OpenAI, provider.Responses, ""},
		{"api.openai.com.", "/v1/embeddings", provider.OpenAI, provider.Embeddings, ""},
		// Any other path of a provider's host is its unpriced API.
		{"api.openai.com", "/v1/messages", provider.OpenAI, provider.Unpriced, ""},
		{"api.openai.com", "/v1/images/generations", provider.OpenAI, provider.Unpriced, ""},
		{"api.openai.com", "/v1/batches", provider.OpenAI, provider.Unpriced, ""},
		{"api.openai.com", "/v1/audio/transcriptions", provider.OpenAI, provider.Unpriced, ""},
		{"api.anthropic.com", "/v1/messages", provider.Anthropic, provider.Messages, ""},
		{"api.anthropic.com", "/v1/chat/completions", provider.Anthropic, provider.ChatCompletions, ""},
		{"Api.Anthropic.Com:80", "/v1/chat/completions/", provider.Anthropic, provider.ChatCompletions, ""},
		{"api.anthropic.com", "/v1/embeddings", provider.Anthropic, provider.Unpriced, ""},
		{"api.anthropic.com", "/v1/completions", provider.Anthropic, provider.Unpriced, ""},
		{"api.anthropic.com", "/v1/models", provider.Anthropic, provider.Unpriced, ""},
		{"res.openai.azure.com", "/openai/deployments/prod-4o/chat/completions?api-version=2024-10-21", provider.Azure, provider.ChatCompletions, "prod-4o"},
		{"res.cognitiveservices.azure.com", "/openai/v1/chat/completions", provider.Azure, provider.ChatCompletions, ""},
		{"RES.OPENAI.AZURE.COM:443", "/openai/deployments/e/embeddings", provider.Azure, provider.Embeddings, "e"},
		{"res.openai.azure.com", "/v1/messages", provider.Azure, provider.Unpriced, ""},
		{"res.openai.azure.com", "/openai/deployments/img/images/generations", provider.Azure, provider.Unpriced, "img"},
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse", provider.Gemini, provider.StreamGenerateContent, "gemini-2.0-flash"},
		{"generativelanguage.googleapis.com:443", "/v1beta/models/gemini-2.5-pro:generateContent", provider.Gemini, provider.GenerateContent, "gemini-2.5-pro"},
		{"generativelanguage.googleapis.com", "/v1beta/openai/chat/completions", provider.Gemini, provider.ChatCompletions, ""},
		{"generativelanguage.googleapis.com", "/v1/chat/completions", provider.Gemini, provider.Unpriced, ""},
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini-2.0-flash:countTokens", provider.Gemini, provider.Unpriced, ""},
		{"us-central1-aiplatform.googleapis.com", "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0-flash:generateContent", provider.Vertex, provider.GenerateContent, "gemini-2.0-flash"},
		{"aiplatform.googleapis.com", "/v1/projects/p/locations/global/publishers/anthropic/models/claude-sonnet-4-5@20250929:rawPredict", provider.Vertex, provider.Messages, "claude-sonnet-4-5@20250929"},
		// Unknown hosts keep the path rule.
		{"", "/v1beta/models/gemini-2.0-flash:generateContent", provider.Gemini, provider.GenerateContent, "gemini-2.0-flash"},
		{"mock:8080", "/v1/projects/p/locations/l/publishers/google/models/g:streamGenerateContent", provider.Vertex, provider.StreamGenerateContent, "g"},
		{"", "/v1/chat/completions", provider.OpenAI, provider.ChatCompletions, ""},
		{"", "/v1/messages", provider.Anthropic, provider.Messages, ""},
		{"llm.internal", "/v1/messages", provider.Anthropic, provider.Messages, ""},
		{"", "/openai/deployments/d/chat/completions", provider.Azure, provider.ChatCompletions, "d"},
		{"vllm:8000", "/prefix/v1/chat/completions", provider.OpenAI, provider.ChatCompletions, ""},
		{".openai.azure.com", "/v1/messages", provider.Anthropic, provider.Messages, ""},
		{"api.openai.com.evil.example", "/v1/messages", provider.Anthropic, provider.Messages, ""},
		{"[::1]:443", "/v1/completions", provider.OpenAI, provider.Completions, ""},
		{"", "/v1/models", provider.Unknown, provider.UnknownAPI, ""},
		// Bedrock: the host, then the operation and the model id the path names, as sent.
		{"bedrock-runtime.us-east-1.amazonaws.com", "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/converse", provider.Bedrock, provider.Converse, "us.anthropic.claude-sonnet-4-20250514-v1%3A0"},
		{"Bedrock-Runtime.EU-West-1.amazonaws.com:443", "/model/m/converse-stream", provider.Bedrock, provider.ConverseStream, "m"},
		{"bedrock-runtime-fips.us-gov-west-1.amazonaws.com", "/model/anthropic.claude-3-haiku-20240307-v1:0/invoke", provider.Bedrock, provider.InvokeModel, "anthropic.claude-3-haiku-20240307-v1:0"},
		{"bedrock-runtime.cn-north-1.amazonaws.com.cn", "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/invoke-with-response-stream", provider.Bedrock, provider.InvokeModelStream, "arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x"},
		{"bedrock-runtime.us-east-1.amazonaws.com", "/model/m/count-tokens", provider.Bedrock, provider.Unpriced, ""},
		{"bedrock-runtime.us-east-1.amazonaws.com", "/model//converse", provider.Bedrock, provider.Unpriced, ""},
		{"bedrock-runtime.us-east-1.amazonaws.com", "/v1/messages", provider.Bedrock, provider.Unpriced, ""},
		{"bedrock-runtime..amazonaws.com", "/model/m/converse", provider.Unknown, provider.UnknownAPI, ""},
		{"bedrock.us-east-1.amazonaws.com", "/model/m/converse", provider.Unknown, provider.UnknownAPI, ""},
		{"bedrock-runtime.us-east-1.amazonaws.com.evil.example", "/model/m/converse", provider.Unknown, provider.UnknownAPI, ""},
	} {
		prov, api, dep := Recognize(c.host, c.path)
		if prov != c.prov || api != c.api || dep != c.deployment {
			t.Errorf("Recognize(%q, %q) = %v %v %q, want %v %v %q", c.host, c.path, prov, api, dep, c.prov, c.api, c.deployment)
		}
	}
}

func TestRecognizeIn(t *testing.T) {
	t.Parallel()
	mistral := &provider.Declared{Name: "mistral", Family: provider.OpenAI}
	kimi := &provider.Declared{Name: "kimi", Family: provider.Anthropic}
	var hosts provider.Hosts
	hosts.Add("api.mistral.ai", mistral)
	hosts.Add("*.vllm.internal", mistral)
	hosts.Add("api.moonshot.ai", kimi)
	// A table that (wrongly) holds a built-in host: the built-in provider keeps it.
	hosts.Add("api.openai.com", kimi)
	for _, c := range []struct {
		host, path string
		prov       provider.ID
		api        provider.API
		d          *provider.Declared
	}{
		// A declared host: the family's priced APIs by path, any other path its Unpriced API.
		{"api.mistral.ai", "/v1/chat/completions", provider.OpenAI, provider.ChatCompletions, mistral},
		{"API.MISTRAL.AI:443", "/v1/embeddings?x=1", provider.OpenAI, provider.Embeddings, mistral},
		{"api.mistral.ai.", "/v1/completions/", provider.OpenAI, provider.Completions, mistral},
		{"api.mistral.ai", "/v1/responses", provider.OpenAI, provider.Responses, mistral},
		{"api.mistral.ai", "/v1/messages", provider.OpenAI, provider.Unpriced, mistral},
		{"api.mistral.ai", "/v1/models", provider.OpenAI, provider.Unpriced, mistral},
		{"api.mistral.ai", "/v1/fim/completions", provider.OpenAI, provider.Completions, mistral},
		{"gpu1.vllm.internal:8000", "/v1/chat/completions", provider.OpenAI, provider.ChatCompletions, mistral},
		{"api.moonshot.ai", "/anthropic/v1/messages", provider.Anthropic, provider.Messages, kimi},
		{"api.moonshot.ai", "/v1/chat/completions", provider.Anthropic, provider.ChatCompletions, kimi},
		{"api.moonshot.ai", "/v1/embeddings", provider.Anthropic, provider.Unpriced, kimi},
		// Built-in hosts stay built-in; other hosts keep the path rule.
		{"api.openai.com", "/v1/chat/completions", provider.OpenAI, provider.ChatCompletions, nil},
		{"api.anthropic.com", "/v1/messages", provider.Anthropic, provider.Messages, nil},
		{"vllm.internal", "/v1/chat/completions", provider.OpenAI, provider.ChatCompletions, nil},
		{"api.mistral.ai.evil.example", "/v1/models", provider.Unknown, provider.UnknownAPI, nil},
	} {
		prov, api, _, d := RecognizeIn(&hosts, c.host, c.path)
		if prov != c.prov || api != c.api || d != c.d {
			t.Errorf("RecognizeIn(%q, %q) = %v %v %v, want %v %v %v", c.host, c.path, prov, api, d, c.prov, c.api, c.d)
		}
	}
	// Without a table, a declared host is any host: the path decides.
	if prov, api, _, d := RecognizeIn(nil, "api.mistral.ai", "/v1/models"); prov != provider.Unknown || api != provider.UnknownAPI || d != nil {
		t.Errorf("RecognizeIn(nil) = %v %v %v", prov, api, d)
	}
}

// Recognising a declared host is on every request's path: it allocates nothing.
func TestRecognizeInAllocatesNothing(t *testing.T) {
	var hosts provider.Hosts
	hosts.Add("api.mistral.ai", &provider.Declared{Name: "mistral", Family: provider.OpenAI})
	hosts.Add("*.vllm.internal", &provider.Declared{Name: "vllm", Family: provider.OpenAI})
	n := testing.AllocsPerRun(100, func() {
		RecognizeIn(&hosts, "Api.Mistral.ai:443", "/v1/chat/completions")
		RecognizeIn(&hosts, "gpu1.vllm.internal", "/v1/models")
	})
	if n != 0 {
		t.Errorf("RecognizeIn: %v allocations, want 0", n)
	}
}

func TestBuiltin(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]provider.ID{
		"api.openai.com": provider.OpenAI, "r.openai.azure.com": provider.Azure, "API.anthropic.com": provider.Anthropic,
		"bedrock-runtime.eu-west-1.amazonaws.com": provider.Bedrock, "generativelanguage.googleapis.com": provider.Gemini,
		"europe-west4-aiplatform.googleapis.com": provider.Vertex, "api.mistral.ai": provider.Unknown,
	} {
		if got := Builtin(h); got != want {
			t.Errorf("Builtin(%q) = %v, want %v", h, got, want)
		}
	}
}

func BenchmarkRecognizeDeclared(b *testing.B) {
	var hosts provider.Hosts
	hosts.Add("api.mistral.ai", &provider.Declared{Name: "mistral", Family: provider.OpenAI})
	b.ReportAllocs()
	for b.Loop() {
		RecognizeIn(&hosts, "api.mistral.ai:443", "/v1/chat/completions")
	}
}

func FuzzRecognize(f *testing.F) {
	for _, s := range [][2]string{{"api.anthropic.com", "/v1/chat/completions"}, {"x.openai.azure.com:443", "/openai/deployments/d/responses"},
		{"[::1]:", "/v1/messages?"}, {"bedrock-runtime.us-east-1.amazonaws.com", "/model/a%3A0/invoke"},
		{"generativelanguage.googleapis.com", "/v1beta/models/m:generateContent"},
		{"x-aiplatform.googleapis.com", "/v1/projects/p/locations/l/publishers/anthropic/models/c:rawPredict"}, {"API.OPENAI.COM.", "//"}, {":", ""},
		{"Api.Mistral.AI:443", "/v1/files"}, {"gpu.internal.", "/v1/messages"}} {
		f.Add(s[0], s[1])
	}
	var hosts provider.Hosts
	hosts.Add("api.mistral.ai", &provider.Declared{Name: "mistral", Family: provider.OpenAI})
	hosts.Add("*.internal", &provider.Declared{Name: "kimi", Family: provider.Anthropic})
	f.Fuzz(func(t *testing.T, host, path string) {
		// A declared host is its provider's, in its family, with an API; any other answers as
		// Recognize does.
		if p, a, d, decl := RecognizeIn(&hosts, host, path); decl != nil {
			if p != decl.Family || a == provider.UnknownAPI || d != "" {
				t.Fatalf("RecognizeIn(%q, %q) = %v %v %q for %s", host, path, p, a, d, decl.Name)
			}
		} else if p2, a2, d2 := Recognize(host, path); p != p2 || a != a2 || d != d2 {
			t.Fatalf("RecognizeIn(%q, %q) = %v %v %q, Recognize %v %v %q", host, path, p, a, d, p2, a2, d2)
		}
		prov, api, dep := Recognize(host, path)
		if (prov == provider.Unknown) != (api == provider.UnknownAPI) {
			t.Fatalf("Recognize(%q, %q) = %v %v: a provider without an API or the reverse", host, path, prov, api)
		}
		if dep != "" && (prov != provider.Azure && prov != provider.Bedrock && prov != provider.Gemini && prov != provider.Vertex || strings.Contains(dep, "/")) {
			t.Fatalf("Recognize(%q, %q): deployment %q for %v", host, path, dep, prov)
		}
		if prov == provider.Bedrock && api != provider.Unpriced && (dep == "" || api < provider.Converse || api > provider.InvokeModelStream) {
			t.Fatalf("Recognize(%q, %q) = bedrock %v model %q", host, path, api, dep)
		}
		if (prov == provider.Gemini || prov == provider.Vertex) && dep == "" && api != provider.ChatCompletions && api != provider.Unpriced {
			t.Fatalf("Recognize(%q, %q) = %v %v without the path's model", host, path, prov, api)
		}
		if prov == provider.Anthropic && api != provider.Messages && api != provider.ChatCompletions && api != provider.Unpriced {
			t.Fatalf("Recognize(%q, %q) = anthropic %v", host, path, api)
		}
	})
}

func BenchmarkRecognize(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Recognize("api.anthropic.com:443", "/v1/chat/completions")
	}
}

func BenchmarkRecognizeOtherHost(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Recognize("api.mistral.ai:443", "/v1/chat/completions")
	}
}
