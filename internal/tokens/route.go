package tokens

import "strings"

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
//
// A path a host does not serve (/v1/messages on OpenAI's host, /v1/embeddings on Anthropic's)
// is UnknownAPI, as is any path outside the priced APIs; an UnknownAPI request has no provider,
// whatever its host: it is not a priced LLM call.

// Recognize returns the provider and API of a request to host (the :authority, any case, with
// or without a port) and path (the query string is ignored). It allocates nothing and is safe
// for concurrent use.
func Recognize(host, path string) (Provider, API) {
	prov, api, _ := recognize(host, path)
	return prov, api
}

// recognize is Recognize, with the Azure deployment named by the path ("" when none).
func recognize(host, p string) (prov Provider, api API, deployment string) {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		p = p[:i]
	}
	p = strings.TrimRight(p, "/")
	prov = hostProvider(host)
	if prov == UnknownProvider {
		return pathRoute(p)
	}
	api = apiOfPath(p)
	switch prov {
	case OpenAI:
		if api == Messages {
			api = UnknownAPI
		}
	case AzureOpenAI:
		if api == Messages {
			api = UnknownAPI
		}
		deployment = azureDeployment(p)
	case Anthropic:
		if api != Messages && api != ChatCompletions {
			api = UnknownAPI
		}
	}
	if api == UnknownAPI {
		return UnknownProvider, UnknownAPI, ""
	}
	return prov, api, deployment
}

// pathRoute is recognition from the path alone, for hosts that are no provider's.
func pathRoute(p string) (prov Provider, api API, deployment string) {
	prov = OpenAI
	if strings.HasPrefix(p, "/openai/") {
		prov = AzureOpenAI // /openai/deployments/{name}/..., or Azure's v1 API /openai/v1/...
		deployment = azureDeployment(p)
	}
	api = apiOfPath(p)
	switch {
	case api == UnknownAPI:
		return UnknownProvider, UnknownAPI, ""
	case api == Messages && prov == OpenAI:
		prov = Anthropic
	case api == Messages:
		return UnknownProvider, UnknownAPI, ""
	}
	return prov, api, deployment
}

// apiOfPath classifies a path without its query string and trailing slashes by its suffix, so
// that OpenAI-compatible servers under a prefix are priced too.
func apiOfPath(p string) API {
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return ChatCompletions
	case strings.HasSuffix(p, "/completions"):
		return Completions
	case strings.HasSuffix(p, "/embeddings"):
		return Embeddings
	case strings.HasSuffix(p, "/responses"):
		return Responses
	case strings.HasSuffix(p, "/v1/messages"):
		return Messages
	}
	return UnknownAPI
}

// azureDeployment is the {deployment} of /openai/deployments/{deployment}/..., "" when the path
// has none.
func azureDeployment(p string) string {
	rest, ok := strings.CutPrefix(p, "/openai/deployments/")
	if !ok {
		return ""
	}
	d, _, _ := strings.Cut(rest, "/")
	return d
}

// The providers' hosts.
const (
	hostOpenAI         = "api.openai.com"
	hostAnthropic      = "api.anthropic.com"
	suffixAzureOpenAI  = ".openai.azure.com"
	suffixAzureCognito = ".cognitiveservices.azure.com"
)

// hostProvider is the provider whose API host is h: port, case and a final dot ignored, so
// that every spelling Envoy's virtual hosts route to a provider is that provider's.
func hostProvider(h string) Provider {
	h = hostName(h)
	switch {
	case len(h) == len(hostOpenAI) && strings.EqualFold(h, hostOpenAI):
		return OpenAI
	case len(h) == len(hostAnthropic) && strings.EqualFold(h, hostAnthropic):
		return Anthropic
	case hasLabelSuffixFold(h, suffixAzureOpenAI), hasLabelSuffixFold(h, suffixAzureCognito):
		return AzureOpenAI
	}
	return UnknownProvider
}

// hostName strips a port (host:port) and a final dot from an authority. An IPv6 literal
// ([::1]:443) keeps its brackets: it is no provider's host.
func hostName(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.IndexByte(h, ']') < i && allDigits(h[i+1:]) {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// hasLabelSuffixFold reports whether h ends with suffix (which starts with a dot), ignoring
// ASCII case, after at least one character of its own: "x.openai.azure.com", not
// ".openai.azure.com".
func hasLabelSuffixFold(h, suffix string) bool {
	return len(h) > len(suffix) && strings.EqualFold(h[len(h)-len(suffix):], suffix)
}
