package tokens

import "path"

// ModelLimits are the most a model takes in and gives out in one request, as its provider
// documents them: the upper bounds a request the pricer cannot read in full is priced at.
type ModelLimits struct {
	// Model is a path.Match glob over the model name.
	Model string
	// Context is the context window in tokens: no request the provider accepts has more input
	// (prompt, stored conversation, files and tool results together).
	Context int64
	// Output is the largest max_tokens (max_completion_tokens, max_output_tokens) the provider
	// accepts for the model, beta headers that raise it included.
	Output int64
}

// modelLimits is the per-model table, first match wins, so that a longer name precedes the
// prefix it extends. Sources:
//   - OpenAI: each model's page under platform.openai.com/docs/models ("Context window",
//     "Max output tokens"): gpt-4o and gpt-4o-mini 128,000 and 16,384; gpt-4.1, -mini, -nano
//     1,047,576 and 32,768; gpt-4.5-preview 128,000 and 16,384; gpt-4-turbo 128,000 and 4,096;
//     gpt-4 8,192 and 8,192; gpt-3.5-turbo 16,385 and 4,096; gpt-5, -mini, -nano 400,000 and
//     128,000; o1 and o3, o3-mini, o4-mini 200,000 and 100,000; o1-mini 128,000 and 65,536;
//     text-embedding-3 and ada-002 8,192 input.
//   - Anthropic: platform.claude.com/docs/en/about-claude/models/overview ("Context window",
//     "Max output"), with the 1M-token context of Sonnet 4, 4.5, 4.6 and Opus 4.6, 4.7
//     (build-with-claude/context-windows) and the 128k output of Claude 3.7 Sonnet with the
//     output-128k beta header: a client may send those beta headers itself.
var modelLimits = []ModelLimits{
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

// Provider-wide maxima, for models the table does not know: the largest context and output of
// the provider's models above.
const (
	openAIMaxContext    = 1_047_576
	openAIMaxOutput     = 128_000
	anthropicMaxContext = 1_000_000
	anthropicMaxOutput  = 128_000
)

// DefaultModelLimits returns a copy of the built-in table (Options.ModelLimits when nil).
func DefaultModelLimits() []ModelLimits { return append([]ModelLimits(nil), modelLimits...) }

// limits returns the model's limits, or the provider's maxima (known false) when no entry
// matches. For an unknown provider both are the largest of the two.
func (s *call) limits() (l ModelLimits, known bool) {
	for _, r := range s.p.opts.ModelLimits {
		if ok, _ := path.Match(r.Model, s.Est.Model); ok && s.Est.Model != "" {
			return r, true
		}
	}
	if s.Est.Provider == Anthropic {
		return ModelLimits{Context: anthropicMaxContext, Output: anthropicMaxOutput}, false
	}
	return ModelLimits{Context: openAIMaxContext, Output: openAIMaxOutput}, false
}
