package tiktoken

import (
	"go/build"
	"slices"
	"strings"
	"testing"
)

// TestImports holds the package to its doc: it sees text, never requests. Outside its tests it
// imports the standard library (but no JSON and no network), the embedded vocabularies and
// x/sys/cpu, and nothing of this module.
func TestImports(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	allowed := []string{"github.com/pkoukk/tiktoken-go-loader/assets", "golang.org/x/sys/cpu"}
	for _, imp := range pkg.Imports {
		std := !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".")
		switch {
		case std && (strings.HasPrefix(imp, "encoding/json") || imp == "net" || strings.HasPrefix(imp, "net/")):
			t.Errorf("imports %s: the counter knows nothing of JSON or the network", imp)
		case !std && !slices.Contains(allowed, imp):
			t.Errorf("imports %s: only the standard library, %s", imp, strings.Join(allowed, " and "))
		}
	}
}
