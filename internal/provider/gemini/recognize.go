package gemini

import (
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// The family's hosts: the Gemini API's, and Vertex AI's global and regional endpoints
// ("https://{LOCATION}-aiplatform.googleapis.com", cloud.google.com/vertex-ai/generative-ai/
// docs/reference/rest).
const (
	hostGemini       = "generativelanguage.googleapis.com"
	hostVertex       = "aiplatform.googleapis.com"
	suffixVertexHost = "-aiplatform.googleapis.com"
)

// Host is provider.Gemini or provider.Vertex when h (a provider.HostName) is one of their
// hosts, else provider.Unknown.
func Host(h string) provider.ID {
	switch {
	case provider.IsHost(h, hostGemini):
		return provider.Gemini
	case provider.IsHost(h, hostVertex):
		return provider.Vertex
	case len(h) > len(suffixVertexHost) && strings.EqualFold(h[len(h)-len(suffixVertexHost):], suffixVertexHost) &&
		strings.IndexByte(h[:len(h)-len(suffixVertexHost)], '.') < 0:
		return provider.Vertex // {region}-aiplatform.googleapis.com: one label before the suffix
	}
	return provider.Unknown
}

// Route is the API and model that path p (without its query string and trailing slashes)
// calls on a host of provider id (Gemini or Vertex), or on a host that is no provider's
// (provider.Unknown: id then says which of the two the path is). The model is as the path
// spells it (percent-encoded, as the caller must decode it), "" when the body names it.
//
//   - The Gemini API: /{version}/models/{model}:generateContent and :streamGenerateContent
//     (ai.google.dev/api/generate-content), and /{version}/openai/chat/completions, the
//     OpenAI-compatible endpoint ("base_url=https://generativelanguage.googleapis.com/v1beta/
//     openai/", ai.google.dev/gemini-api/docs/openai).
//   - Vertex AI: /{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:
//     generateContent and :streamGenerateContent (cloud.google.com/vertex-ai/generative-ai/
//     docs/model-reference/inference); publishers/anthropic/models/{model}:rawPredict and
//     :streamRawPredict, Claude with a Messages body (cloud.google.com/vertex-ai/generative-ai/
//     docs/partner-models/claude); and /{version}/projects/{p}/locations/{l}/endpoints/openapi/
//     chat/completions, Vertex's OpenAI-compatible endpoint.
//
// Any other path is provider.UnknownAPI. It allocates nothing.
func Route(id provider.ID, p string) (prov provider.ID, api provider.API, model string) {
	publisher, model, method, ok := call(p)
	if !ok {
		if strings.HasSuffix(p, "/openai/chat/completions") && id != provider.Vertex && openai.API(p) == provider.ChatCompletions {
			return provider.Gemini, provider.ChatCompletions, ""
		}
		if strings.HasSuffix(p, "/endpoints/openapi/chat/completions") && id != provider.Gemini {
			return provider.Vertex, provider.ChatCompletions, ""
		}
		return provider.Unknown, provider.UnknownAPI, ""
	}
	prov = id
	if prov == provider.Unknown {
		prov = provider.Gemini
		if publisher != "" {
			prov = provider.Vertex
		}
	}
	switch {
	case publisher == "anthropic" && (method == "rawPredict" || method == "streamRawPredict") && prov == provider.Vertex:
		return prov, provider.Messages, model
	case publisher != "" && publisher != "google", publisher == "" && prov == provider.Vertex:
		return provider.Unknown, provider.UnknownAPI, ""
	case method == "generateContent":
		return prov, provider.GenerateContent, model
	case method == "streamGenerateContent":
		return prov, provider.StreamGenerateContent, model
	}
	return provider.Unknown, provider.UnknownAPI, ""
}

// call splits a path ending in /models/{model}:{method} (with /publishers/{publisher} before
// /models/ on Vertex). ok is false for any other path, or an empty model.
func call(p string) (publisher, model, method string, ok bool) {
	const models = "/models/"
	i := strings.LastIndex(p, models)
	if i < 0 {
		return "", "", "", false
	}
	rest := p[i+len(models):]
	j := strings.LastIndexByte(rest, ':')
	if j <= 0 || strings.IndexByte(rest, '/') >= 0 {
		return "", "", "", false
	}
	model, method = rest[:j], rest[j+1:]
	const pubs = "/publishers/"
	if k := strings.LastIndex(p[:i], pubs); k >= 0 && strings.IndexByte(p[k+len(pubs):i], '/') < 0 {
		publisher = p[k+len(pubs) : i]
		if publisher == "" {
			return "", "", "", false
		}
	}
	return publisher, model, method, true
}
