package dialects

import (
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/bedrock"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/gemini"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// Recognition: which provider and API a request calls. The host decides the provider, the path
// the API; the path alone decides only for hosts that are no provider's (an OpenAI-compatible
// server, a test client that sends no host).
//
//   - api.openai.com is OpenAI: /v1/chat/completions, /v1/completions, /v1/embeddings,
//     /v1/responses.
//   - *.openai.azure.com and *.cognitiveservices.azure.com are Azure OpenAI: the same APIs under
//     /openai/deployments/{deployment}/... or /openai/v1/....
//   - api.anthropic.com is Anthropic: /v1/messages, and /v1/chat/completions, Anthropic's
//     OpenAI SDK compatibility layer ("base_url=https://api.anthropic.com/v1/", with
//     client.chat.completions.create; "Rate limits follow Anthropic's standard limits for the
//     /v1/messages endpoint": platform.claude.com/docs/en/api/openai-sdk). That endpoint speaks
//     OpenAI's dialect (its body, its SDK, its error body) and is Anthropic for every rule.
//   - bedrock-runtime.{region}.amazonaws.com (and its FIPS variant) is the Amazon Bedrock
//     runtime: /model/{modelId}/converse, /converse-stream, /invoke,
//     /invoke-with-response-stream. The third result is then the path's modelId, as sent
//     (URL-encoded): the path, not the body, names Bedrock's model.
//   - generativelanguage.googleapis.com is the Gemini API, and aiplatform.googleapis.com and
//     {region}-aiplatform.googleapis.com are Vertex AI: models/{model}:generateContent and
//     :streamGenerateContent, their OpenAI-compatible chat endpoints, and (Vertex) Claude's
//     publishers/anthropic/models/{model}:rawPredict; the path names the model
//     (gemini.Route).
//
//   - a host the limits file declares (its providers section, a provider.Hosts that
//     RecognizeIn reads) is that declared provider's, in the family of its dialect: OpenAI's
//     or Anthropic's priced APIs by path, as on the family's own host. Built-in hosts stay
//     built-in.
//
// Any other path on a provider's host (images, audio, files, batches, realtime, models, or a
// priced API the host does not serve, such as /v1/messages on OpenAI's) is that provider's
// Unpriced API: a request of the provider, counted by request limits only. On a host that is no
// provider's, a path outside the priced APIs is UnknownAPI, with no provider (the unknown
// policy of the limits file decides it).

// Recognize returns the provider and API of a request to host (the :authority, any case, with
// or without a port) and path (the query string is ignored), and the model the path names,
// percent-encoded as it is sent ("" when none): the Azure deployment, Bedrock's modelId, or the
// Gemini or Vertex model. It allocates nothing and is safe for concurrent use.
func Recognize(host, p string) (prov provider.ID, api provider.API, deployment string) {
	prov, api, deployment, _ = RecognizeIn(nil, host, p)
	return prov, api, deployment
}

// RecognizeIn is Recognize with the providers the limits file declares (hosts; nil: none). A
// host that is no built-in provider's but one of hosts is its declared provider's, d: prov is
// then d.Family, api the family's priced API the path calls (OpenAI's: chat completions,
// completions, embeddings, responses; Anthropic's: messages and chat completions, as on its
// own host), and any other path d's Unpriced API. A built-in host stays the built-in
// provider's whatever hosts says (the limits file refuses such a declaration). It allocates
// nothing and is safe for concurrent use.
func RecognizeIn(hosts *provider.Hosts, host, p string) (prov provider.ID, api provider.API, deployment string, d *provider.Declared) {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	h := provider.HostName(host)
	switch {
	case openai.Host(h) != provider.Unknown:
		prov, api = openai.Host(h), openai.API(p)
		if prov == provider.Azure {
			deployment = openai.Deployment(p)
		}
	case anthropic.Host(h) != provider.Unknown:
		prov, api = provider.Anthropic, anthropic.API(p)
	case bedrock.Host(h) != provider.Unknown:
		prov = provider.Bedrock
		api, deployment = bedrock.API(p)
	case gemini.Host(h) != provider.Unknown:
		id := gemini.Host(h)
		if prov, api, deployment = gemini.Route(id, p); prov == provider.Unknown {
			prov = id // another path of the host: its Unpriced API
		}
	default:
		if d = hosts.Lookup(h); d == nil {
			prov, api, deployment = pathRoute(p)
			return prov, api, deployment, nil
		}
		prov = d.Family
		if prov == provider.Anthropic {
			api = anthropic.API(p)
		} else {
			api = openai.API(p)
		}
	}
	if api == provider.UnknownAPI {
		api = provider.Unpriced
	}
	return prov, api, deployment, d
}

// Builtin is the built-in provider whose host h is (a provider.HostName, any case), Unknown for
// any other: the hosts a declared provider may not take.
func Builtin(h string) provider.ID {
	for _, id := range [...]provider.ID{openai.Host(h), anthropic.Host(h), bedrock.Host(h), gemini.Host(h)} {
		if id != provider.Unknown {
			return id
		}
	}
	return provider.Unknown
}

// pathRoute is recognition from the path alone, for hosts that are no provider's: a
// models/{model}:generateContent path is Gemini's (Vertex's under publishers/), a Claude
// rawPredict path Vertex's, the Messages API Anthropic's, an /openai/ path Azure's (which serves
// no Messages API), any other OpenAI's.
func pathRoute(p string) (provider.ID, provider.API, string) {
	if prov, api, model := gemini.Route(provider.Unknown, p); api == provider.GenerateContent ||
		api == provider.StreamGenerateContent || (prov == provider.Vertex && api == provider.Messages) {
		return prov, api, model
	}
	azure := openai.AzurePath(p)
	switch {
	case anthropic.MessagesPath(p) && azure:
		return provider.Unknown, provider.UnknownAPI, ""
	case anthropic.MessagesPath(p):
		return provider.Anthropic, provider.Messages, ""
	}
	api := openai.API(p)
	switch {
	case api == provider.UnknownAPI:
		return provider.Unknown, provider.UnknownAPI, ""
	case azure:
		return provider.Azure, api, openai.Deployment(p)
	}
	return provider.OpenAI, api, ""
}
