package dialects

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestImports holds the provider tree to its package docs: the contract imports nothing of this
// module, each room only the contract, the toolkit and (Anthropic's) OpenAI's room, and this
// package only those; so nothing below internal/tokens imports upward, and a room's settings
// reach it through Price, never through an import of the layers that hold them.
func TestImports(t *testing.T) {
	t.Parallel()
	const module = "github.com/llm-ratelimit/llm-ratelimit/internal/"
	for dir, allowed := range map[string][]string{
		"..":           {},
		"../pricing":   {"provider", "tiktoken"},
		"../openai":    {"provider", "provider/pricing"},
		"../anthropic": {"provider", "provider/pricing", "provider/openai"},
		"../bedrock":   {"provider", "provider/pricing", "provider/anthropic"},
		"../gemini":    {"provider", "provider/pricing", "provider/openai", "provider/anthropic"},
		".":            {"provider", "provider/pricing", "provider/openai", "provider/anthropic", "provider/bedrock", "provider/gemini"},
	} {
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pkg.Imports {
			if rest, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(allowed, rest) {
				t.Errorf("%s imports %s: of this module it may import only %v", dir, imp, allowed)
			}
		}
	}
}
