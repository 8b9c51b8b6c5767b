package anthropic

import (
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// hostAnthropic is the Claude API's host.
const hostAnthropic = "api.anthropic.com"

// Host is provider.Anthropic when h (a provider.HostName) is api.anthropic.com, else
// provider.Unknown.
func Host(h string) provider.ID {
	if provider.IsHost(h, hostAnthropic) {
		return provider.Anthropic
	}
	return provider.Unknown
}

// API is the API that path p (without its query string and trailing slashes) calls on
// Anthropic's host: /v1/messages, and /v1/chat/completions, the OpenAI SDK compatibility layer
// ("base_url=https://api.anthropic.com/v1/", with client.chat.completions.create; "Rate limits
// follow Anthropic's standard limits for the /v1/messages endpoint":
// platform.claude.com/docs/en/api/openai-sdk). Any other path is provider.UnknownAPI.
func API(p string) provider.API {
	if MessagesPath(p) {
		return provider.Messages
	}
	if openai.API(p) == provider.ChatCompletions {
		return provider.ChatCompletions
	}
	return provider.UnknownAPI
}

// MessagesPath reports whether p calls the Messages API: it ends in /v1/messages, so that a
// server under a prefix is recognised too.
func MessagesPath(p string) bool { return strings.HasSuffix(p, "/v1/messages") }
