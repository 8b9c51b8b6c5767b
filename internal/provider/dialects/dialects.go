package dialects

import (
	"errors"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/bedrock"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/gemini"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Of is the dialect of id. A provider with no room of its own (Unknown: an OpenAI-compatible
// server, or a path that is no priced API) speaks OpenAI's dialect. It allocates nothing.
func Of(id provider.ID) provider.Dialect {
	switch id {
	case provider.Anthropic:
		return anthropic.Dialect{}
	case provider.OpenAI, provider.Azure:
		return openai.Dialect{}
	case provider.Bedrock:
		return bedrock.Dialect{}
	case provider.Gemini, provider.Vertex:
		return gemini.Dialect{}
	}
	return openai.Dialect{}
}

// Named is the dialect of the provider named name (provider.ID.String, as in a reservation's tag).
func Named(name string) provider.Dialect { return Of(provider.Parse(name)) }

// Settings are the rooms' own pricing settings, one field per room. The zero value is every
// room's defaults. After Validate it is read only, and so safe for concurrent use.
type Settings struct {
	OpenAI    openai.Settings
	Anthropic anthropic.Settings
}

// Validate validates every room's settings (filling their defaults), reporting every invalid
// setting at once. Call it once, before the Settings price a request.
func (s *Settings) Validate() error {
	return errors.Join(s.OpenAI.Validate(), s.Anthropic.Validate())
}

// Price prices the parsed body of a request in the room of its provider (r.Est.Provider and
// r.Est.API, as Recognize returns them), from the object root, with that room's settings of set
// (validated). A provider with no room of its own is priced by OpenAI's rules and settings.
// Anthropic's room gets OpenAI's settings too, for the chat rule that reads the bodies of its
// OpenAI-compatible endpoint. It allocates nothing.
func Price(r *pricing.Request, root int, set *Settings) {
	switch r.Est.Provider {
	case provider.Anthropic:
		anthropic.Price(r, root, &set.Anthropic, &set.OpenAI)
	case provider.Bedrock:
		bedrock.Price(r, root, &set.Anthropic)
	case provider.Gemini, provider.Vertex:
		gemini.Price(r, root, &set.Anthropic, &set.OpenAI)
	default:
		openai.Price(r, root, &set.OpenAI)
	}
}

// ModelLimits returns a copy of the rooms' per-model tables, each family's in its order (their
// globs name no model of another family).
func ModelLimits() []pricing.ModelLimits {
	return append(append(append(openai.Limits(), anthropic.Limits()...), bedrock.Limits()...), gemini.Limits()...)
}

// Maxima is the largest context and output of the family of id, for models its table does not
// know. A provider with no room of its own gets OpenAI's family's. It allocates nothing.
func Maxima(id provider.ID) pricing.ModelLimits {
	switch id {
	case provider.Anthropic:
		return pricing.ModelLimits{Context: anthropic.MaxContext, Output: anthropic.MaxOutput}
	case provider.Gemini, provider.Vertex:
		return pricing.ModelLimits{Context: gemini.MaxContext, Output: gemini.MaxOutput}
	case provider.Bedrock:
		return pricing.ModelLimits{Context: bedrock.MaxContext, Output: bedrock.MaxOutput}
	}
	return pricing.ModelLimits{Context: openai.MaxContext, Output: openai.MaxOutput}
}
