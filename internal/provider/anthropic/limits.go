package anthropic

import "github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"

// limits is the family's per-model table, first match wins, so that a longer name precedes the
// prefix it extends. Source: platform.claude.com/docs/en/about-claude/models/overview ("Context
// window", "Max output"), with the 1M-token context of Sonnet 4, 4.5, 4.6 and Opus 4.6, 4.7
// (build-with-claude/context-windows) and the 128k output of Claude 3.7 Sonnet with the
// output-128k beta header: a client may send those beta headers itself.
var limits = []pricing.ModelLimits{
	{Model: "claude-opus-4-7*", Context: 1_000_000, Output: 128_000},
	{Model: "claude-opus-4-6*", Context: 1_000_000, Output: 128_000},
	{Model: "claude-sonnet-4-6*", Context: 1_000_000, Output: 64_000},
	{Model: "claude-opus-4-5*", Context: 200_000, Output: 64_000},
	{Model: "claude-sonnet-4-5*", Context: 1_000_000, Output: 64_000},
	{Model: "claude-haiku-4-5*", Context: 200_000, Output: 64_000},
	{Model: "claude-opus-4-1*", Context: 200_000, Output: 32_000},
	{Model: "claude-opus-4-0*", Context: 200_000, Output: 32_000},
	{Model: "claude-opus-4-2*", Context: 200_000, Output: 32_000}, // claude-opus-4-20250514
	{Model: "claude-sonnet-4-0*", Context: 1_000_000, Output: 64_000},
	{Model: "claude-sonnet-4-2*", Context: 1_000_000, Output: 64_000}, // claude-sonnet-4-20250514
	{Model: "claude-3-7-sonnet*", Context: 200_000, Output: 128_000},
	{Model: "claude-3-5-*", Context: 200_000, Output: 8_192},
	{Model: "claude-3-*", Context: 200_000, Output: 4_096},
}

// The family's maxima, for models the table does not know: the largest context and output of
// its models above.
const (
	MaxContext = 1_000_000
	MaxOutput  = 128_000
)

// Limits returns a copy of the family's per-model table.
func Limits() []pricing.ModelLimits { return append([]pricing.ModelLimits(nil), limits...) }
