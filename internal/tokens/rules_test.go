package tokens

// The published overheads the rooms price by (internal/provider/openai and
// internal/provider/anthropic), restated as the expectations of this package's tests.
const (
	toolsOverhead        = 20        // OpenAI: once when tools, functions or a JSON schema are present
	perToolCall          = 5         // OpenAI: per assistant tool call
	anthropicBase        = 10        // Anthropic: the conversation wrapper
	anthropicPerMessage  = 5         // Anthropic: role markers
	anthropicPerBlock    = 3         // Anthropic: content block framing
	anthropicToolsSystem = 530       // Anthropic: the largest published tool-use system prompt
	openAIMaxContext     = 1_047_576 // OpenAI: the largest context window (gpt-4.1)
	openAIMaxOutput      = 128_000   // OpenAI: the largest maximum output (gpt-5)
)
