package openai

import (
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// The family's hosts: api.openai.com, and Azure OpenAI's resource endpoints
// (https://learn.microsoft.com/azure/ai-foundry/openai/reference).
const (
	hostOpenAI         = "api.openai.com"
	suffixAzureOpenAI  = ".openai.azure.com"
	suffixAzureCognito = ".cognitiveservices.azure.com"
)

// Host is the provider whose API host h is (a provider.HostName): OpenAI for api.openai.com,
// Azure for *.openai.azure.com and *.cognitiveservices.azure.com, else provider.Unknown.
func Host(h string) provider.ID {
	switch {
	case provider.IsHost(h, hostOpenAI):
		return provider.OpenAI
	case hasLabelSuffixFold(h, suffixAzureOpenAI), hasLabelSuffixFold(h, suffixAzureCognito):
		return provider.Azure
	}
	return provider.Unknown
}

// API is the API of the family that path p (without its query string and trailing slashes)
// calls: /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses, told by the
// suffix so that OpenAI-compatible servers under a prefix, and Azure's
// /openai/deployments/{deployment}/... and /openai/v1/..., are recognised too.
func API(p string) provider.API {
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return provider.ChatCompletions
	case strings.HasSuffix(p, "/completions"):
		return provider.Completions
	case strings.HasSuffix(p, "/embeddings"):
		return provider.Embeddings
	case strings.HasSuffix(p, "/responses"):
		return provider.Responses
	}
	return provider.UnknownAPI
}

// AzurePath reports whether p is an Azure OpenAI path: /openai/deployments/{name}/..., or
// Azure's v1 API /openai/v1/....
func AzurePath(p string) bool { return strings.HasPrefix(p, "/openai/") }

// Deployment is the {deployment} of /openai/deployments/{deployment}/..., "" when the path has
// none.
func Deployment(p string) string {
	rest, ok := strings.CutPrefix(p, "/openai/deployments/")
	if !ok {
		return ""
	}
	d, _, _ := strings.Cut(rest, "/")
	return d
}

// hasLabelSuffixFold reports whether h ends with suffix (which starts with a dot), ignoring
// ASCII case, after at least one character of its own: "x.openai.azure.com", not
// ".openai.azure.com".
func hasLabelSuffixFold(h, suffix string) bool {
	return len(h) > len(suffix) && strings.EqualFold(h[len(h)-len(suffix):], suffix)
}
