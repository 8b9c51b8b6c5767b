package bedrock

import (
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Recognition. The Bedrock runtime's endpoints are bedrock-runtime.{region}.amazonaws.com and
// its FIPS variant bedrock-runtime-fips.{region}.amazonaws.com (in the China regions under
// amazonaws.com.cn): "Amazon Bedrock endpoints and quotas", docs.aws.amazon.com/general/latest/
// gr/bedrock.html. The inference operations are (Bedrock API reference,
// docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html and its siblings):
//
//	POST /model/{modelId}/converse                      Converse
//	POST /model/{modelId}/converse-stream               ConverseStream
//	POST /model/{modelId}/invoke                        InvokeModel
//	POST /model/{modelId}/invoke-with-response-stream   InvokeModelWithResponseStream
//
// modelId is one URI label, URL-encoded by the SDKs: a model id
// (anthropic.claude-sonnet-4-20250514-v1:0, its ':' sent as %3A), a cross-Region inference
// profile id (us.anthropic.claude-sonnet-4-20250514-v1:0), or the ARN of an inference profile,
// a provisioned model or an imported model, whose '/' is sent as %2F and so stays inside the
// label. The other paths of the host (count-tokens, async invocations, guardrails) are not
// priced.

const (
	hostPrefix     = "bedrock-runtime."
	hostPrefixFIPS = "bedrock-runtime-fips."
)

// Host is provider.Bedrock when h (a provider.HostName) is a Bedrock runtime endpoint of any
// region, FIPS included, in any case; else provider.Unknown. It allocates nothing.
func Host(h string) provider.ID {
	var rest string
	switch {
	case hasPrefixFold(h, hostPrefix):
		rest = h[len(hostPrefix):]
	case hasPrefixFold(h, hostPrefixFIPS):
		rest = h[len(hostPrefixFIPS):]
	default:
		return provider.Unknown
	}
	var region string
	switch {
	case hasSuffixFold(rest, ".amazonaws.com"):
		region = rest[:len(rest)-len(".amazonaws.com")]
	case hasSuffixFold(rest, ".amazonaws.com.cn"):
		region = rest[:len(rest)-len(".amazonaws.com.cn")]
	default:
		return provider.Unknown
	}
	if !isRegion(region) {
		return provider.Unknown
	}
	return provider.Bedrock
}

// isRegion reports whether r looks like an AWS region name (us-east-1, us-gov-west-1,
// cn-north-1): letters, digits and inner dashes, no dots.
func isRegion(r string) bool {
	if r == "" || r[0] == '-' || r[len(r)-1] == '-' {
		return false
	}
	for i := 0; i < len(r); i++ {
		c := r[i] | 0x20
		if !(c >= 'a' && c <= 'z' || r[i] >= '0' && r[i] <= '9' || r[i] == '-') {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, p string) bool { return len(s) >= len(p) && strings.EqualFold(s[:len(p)], p) }
func hasSuffixFold(s, p string) bool {
	return len(s) >= len(p) && strings.EqualFold(s[len(s)-len(p):], p)
}

// API is the operation that path p (without its query string and trailing slashes) calls on a
// Bedrock runtime host, and the model it names: the modelId label as sent, still URL-encoded
// (Model decodes it). Any other path is provider.UnknownAPI. It allocates nothing.
func API(p string) (api provider.API, modelID string) {
	rest, ok := strings.CutPrefix(p, "/model/")
	if !ok {
		return provider.UnknownAPI, ""
	}
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return provider.UnknownAPI, ""
	}
	switch rest[i+1:] {
	case "converse":
		api = provider.Converse
	case "converse-stream":
		api = provider.ConverseStream
	case "invoke":
		api = provider.InvokeModel
	case "invoke-with-response-stream":
		api = provider.InvokeModelStream
	default:
		return provider.UnknownAPI, ""
	}
	return api, rest[:i]
}
