package bedrock

import (
	"path"
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Claude is the Claude model name that a Bedrock model id names, without its vendor and
// Region prefixes: "claude-sonnet-4-20250514-v1:0" for anthropic.claude-sonnet-4-20250514-v1:0,
// for the cross-Region inference profile us.anthropic.claude-sonnet-4-20250514-v1:0 and for the
// ARNs of foundation models and system inference profiles that end in either. "" when the id
// names no Claude model (another vendor's model, or an ARN that names none: an application
// inference profile, a provisioned or imported model). It allocates nothing.
func Claude(model string) string {
	const vendor = "anthropic.claude-"
	i := strings.LastIndex(model, vendor)
	if i < 0 {
		return ""
	}
	if i > 0 {
		// Only a Region prefix (us., eu., apac., global., us-gov.) or an ARN's resource path
		// may precede the vendor.
		if c := model[i-1]; c != '.' && c != '/' {
			return ""
		}
	}
	return model[i+len("anthropic."):]
}

// namesModel reports whether a model id says which model it calls: an ARN of an application
// inference profile, a provisioned model, an imported or a custom model does not.
func namesModel(model string) bool {
	if !strings.HasPrefix(model, "arn:") {
		return model != ""
	}
	i := strings.LastIndexByte(model, '/')
	return i >= 0 && (strings.Contains(model, ":foundation-model/") || strings.Contains(model, ":inference-profile/")) &&
		strings.IndexByte(model[i+1:], '.') > 0
}

// claude4Era reports whether name (a Claude model name) is of the Claude 4 generation or later,
// whose output Bedrock burns down at 5x: the models named claude-{family}-{major}... with major
// 4 or more (claude-sonnet-4-20250514, claude-opus-4-1, claude-haiku-4-5). The earlier names put
// the version first (claude-3-7-sonnet, claude-3-haiku, claude-v2, claude-instant-v1).
func claude4Era(name string) bool {
	rest, ok := strings.CutPrefix(name, "claude-")
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '-')
	if i <= 0 || i+1 >= len(rest) {
		return false
	}
	for j := 0; j < i; j++ {
		if c := rest[j]; c < 'a' || c > 'z' {
			return false // claude-3-..., a version first
		}
	}
	major := 0
	j := i + 1
	for ; j < len(rest) && rest[j] >= '0' && rest[j] <= '9' && major < 1000; j++ {
		major = major*10 + int(rest[j]-'0')
	}
	return j > i+1 && major >= 4
}

// limits is the family's per-model table: Claude's context windows and output maxima on Bedrock
// are Anthropic's (the anthropic room's table and its sources; the Bedrock model cards,
// docs.aws.amazon.com/bedrock/latest/userguide/model-cards.html, list the same figures), under
// the globs that match a Bedrock id of the model: a bare or Region-prefixed id
// ("*anthropic.claude-sonnet-4-5*"), and an ARN ending in one ("*/*anthropic.claude-...").
var limits = func() []pricing.ModelLimits {
	var out []pricing.ModelLimits
	for _, l := range anthropic.Limits() {
		for _, g := range [...]string{"*anthropic.", "*/*anthropic."} {
			out = append(out, pricing.ModelLimits{Model: g + l.Model, Context: l.Context, Output: l.Output})
		}
	}
	return out
}()

// The family's maxima, for the models the table does not know (another vendor's, an ARN that
// names none): Claude's, the largest context and output Bedrock serves.
const (
	MaxContext = anthropic.MaxContext
	MaxOutput  = anthropic.MaxOutput
)

// Limits returns a copy of the family's per-model table.
func Limits() []pricing.ModelLimits { return append([]pricing.ModelLimits(nil), limits...) }

// maxOutput is the largest output of model, from the table; ok is false when it does not know
// the model.
func maxOutput(model string) (n int64, ok bool) {
	for _, l := range limits {
		if m, _ := path.Match(l.Model, model); m {
			return l.Output, true
		}
	}
	return 0, false
}
