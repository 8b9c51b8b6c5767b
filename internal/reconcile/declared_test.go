package reconcile

import (
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// A declared provider's response is read in its family's dialect: the reservation's tag names
// the provider, the settlement knows its family.
func TestDeclaredDialect(t *testing.T) {
	t.Parallel()
	set := DefaultSettlement()
	set.Declared = map[string]provider.ID{"mistral": provider.OpenAI, "kimi": provider.Anthropic}
	for tag, want := range map[string]provider.Dialect{
		"kimi": anthropic.Dialect{}, "mistral": openai.Dialect{}, "anthropic": anthropic.Dialect{},
		"gone": openai.Dialect{}, // declared before a reload that dropped it: no room of its own
	} {
		if got := set.dialectOf(&reservation.Reservation{Tag: tag}); got != want {
			t.Errorf("dialectOf(%q) = %T, want %T", tag, got, want)
		}
	}
	// Anthropic's usage is read from a declared Anthropic-compatible provider's reply.
	u, ok := set.dialectOf(&reservation.Reservation{Tag: "kimi"}).Usage([]byte(`{"type":"message","usage":{"input_tokens":12,"output_tokens":5}}`))
	if !ok || u.Input != 12 || u.Output != 5 {
		t.Errorf("kimi usage = %+v %v", u, ok)
	}
	if set.family("kimi") != provider.Anthropic || set.family("vertex") != provider.Vertex || set.family("x") != provider.Unknown {
		t.Error("family")
	}
}
