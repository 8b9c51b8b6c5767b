package openai

import "github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"

// limits is the family's per-model table, first match wins, so that a longer name precedes the
// prefix it extends. Source: each model's page under platform.openai.com/docs/models ("Context
// window", "Max output tokens"): gpt-4o and gpt-4o-mini 128,000 and 16,384; gpt-4.1, -mini,
// -nano 1,047,576 and 32,768; gpt-4.5-preview 128,000 and 16,384; gpt-4-turbo 128,000 and
// 4,096; gpt-4 8,192 and 8,192; gpt-3.5-turbo 16,385 and 4,096; gpt-5, -mini, -nano 400,000 and
// 128,000; o1 and o3, o3-mini, o4-mini 200,000 and 100,000; o1-mini 128,000 and 65,536;
// text-embedding-3 and ada-002 8,192 input.
var limits = []pricing.ModelLimits{
	{Model: "gpt-4o-mini*", Context: 128_000, Output: 16_384},
	{Model: "gpt-4o*", Context: 128_000, Output: 16_384},
	{Model: "chatgpt-4o*", Context: 128_000, Output: 16_384},
	{Model: "gpt-4.1*", Context: 1_047_576, Output: 32_768},
	{Model: "gpt-4.5*", Context: 128_000, Output: 16_384},
	{Model: "gpt-4-turbo*", Context: 128_000, Output: 4_096},
	{Model: "gpt-4-1106*", Context: 128_000, Output: 4_096},
	{Model: "gpt-4-0125*", Context: 128_000, Output: 4_096},
	{Model: "gpt-4-32k*", Context: 32_768, Output: 32_768},
	{Model: "gpt-4*", Context: 8_192, Output: 8_192},
	{Model: "gpt-3.5-turbo*", Context: 16_385, Output: 4_096},
	{Model: "gpt-5*", Context: 400_000, Output: 128_000},
	{Model: "o1-mini*", Context: 128_000, Output: 65_536},
	{Model: "o1*", Context: 200_000, Output: 100_000},
	{Model: "o3*", Context: 200_000, Output: 100_000},
	{Model: "o4-mini*", Context: 200_000, Output: 100_000},
	{Model: "text-embedding-*", Context: 8_192, Output: 0},
}

// The family's maxima, for models the table does not know: the largest context and output of
// its models above.
const (
	MaxContext = 1_047_576
	MaxOutput  = 128_000
)

// Limits returns a copy of the family's per-model table.
func Limits() []pricing.ModelLimits { return append([]pricing.ModelLimits(nil), limits...) }
