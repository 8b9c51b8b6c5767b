package dialects

import (
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/bedrock"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/gemini"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

func TestOf(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]provider.Dialect{
		"openai":    openai.Dialect{},
		"azure":     openai.Dialect{},
		"anthropic": anthropic.Dialect{},
		"bedrock":   bedrock.Dialect{},
		"gemini":    gemini.Dialect{},
		"vertex":    gemini.Dialect{},
		"unknown":   openai.Dialect{},
		"vllm":      openai.Dialect{},
	} {
		if got := Named(name); got != want {
			t.Errorf("Named(%q) = %T, want %T", name, got, want)
		}
	}
	for id := provider.Unknown; id <= provider.Vertex; id++ {
		if provider.Parse(id.String()) != id {
			t.Errorf("Parse(%q) is not %v", id.String(), id)
		}
	}
}

// Looking a dialect up allocates nothing: it is on every denial's path.
func TestOfAllocatesNothing(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = Of(provider.Anthropic); _ = Named("azure") }); n != 0 {
		t.Errorf("%v allocations, want 0", n)
	}
}
