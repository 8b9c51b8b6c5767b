package pricing

import (
	"go/build"
	"strings"
	"testing"
)

// TestImports holds the package to its doc: of this module it imports internal/provider and
// internal/tiktoken only, so that the rooms, dialects and tokens can all import it.
func TestImports(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	const module = "github.com/llm-ratelimit/llm-ratelimit/"
	for _, imp := range pkg.Imports {
		switch {
		case imp == module+"internal/provider", imp == module+"internal/tiktoken":
		case strings.HasPrefix(imp, module):
			t.Errorf("imports %s: only internal/provider and internal/tiktoken of this module", imp)
		case imp == "net" || strings.HasPrefix(imp, "net/"):
			t.Errorf("imports %s: pricing touches no network", imp)
		}
	}
}
