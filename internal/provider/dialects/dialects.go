package dialects

import (
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// Of is the dialect of id. A provider with no room of its own (Unknown: an OpenAI-compatible
// server, or a path that is no priced API) speaks OpenAI's dialect. It allocates nothing.
func Of(id provider.ID) provider.Dialect {
	switch id {
	case provider.Anthropic:
		return anthropic.Dialect{}
	case provider.OpenAI, provider.Azure:
		return openai.Dialect{}
	}
	return openai.Dialect{}
}

// Named is the dialect of the provider named name (provider.ID.String, as in a reservation's tag).
func Named(name string) provider.Dialect { return Of(provider.Parse(name)) }
