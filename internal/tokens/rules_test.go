package tokens

// The published overheads the rooms price by (internal/provider/openai and
// internal/provider/anthropic), restated as the expectations of this package's tests.
const (
	anthropicBase        = 10        // Anthropic: the conversation wrapper
	anthropicPerMessage  = 5         // Anthropic: role markers
	anthropicToolsSystem = 530       // Anthropic: the largest published tool-use system prompt
	openAIMaxContext     = 1_047_576 // OpenAI: the largest context window (gpt-4.1)
	openAIMaxOutput      = 128_000   // OpenAI: the largest maximum output (gpt-5)
)
