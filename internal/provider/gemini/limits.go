package gemini

import "github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"

// limits is the family's per-model table, first match wins, so that a longer name precedes the
// prefix it extends. Source: ai.google.dev/gemini-api/docs/models ("Input token limit", "Output
// token limit" of each model).
var limits = []pricing.ModelLimits{
	{Model: "gemini-3*", Context: 1_048_576, Output: 65_536},
	{Model: "gemini-2.5-*", Context: 1_048_576, Output: 65_536},
	{Model: "gemini-2.0-flash-lite*", Context: 1_048_576, Output: 8_192},
	{Model: "gemini-2.0-*", Context: 1_048_576, Output: 8_192},
	{Model: "gemini-1.5-pro*", Context: 2_097_152, Output: 8_192},
	{Model: "gemini-1.5-*", Context: 1_048_576, Output: 8_192},
}

// The family's maxima, for models the table does not know: the largest context and output of
// its models above, and of Claude's on Vertex (internal/provider/anthropic).
const (
	MaxContext = 2_097_152
	MaxOutput  = 128_000
)

// Limits returns a copy of the family's per-model table.
func Limits() []pricing.ModelLimits { return append([]pricing.ModelLimits(nil), limits...) }
