//go:build !race

package tiktoken

import (
	"bytes"
	"os"
	"testing"
)

// TestUniformTableGenerated: measuring the rules again (what -update does) writes exactly the
// checked-in uniform_table.go, so the table cannot drift from the vocabularies and the merge.
// Measuring merges a million runs; under the race detector that takes minutes, so the test is
// built only without it (make unit runs it so).
func TestUniformTableGenerated(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("uniform_table.go")
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string][256]runRule{}
	for _, name := range []string{CL100K, O200K} {
		tables[name] = measureUniform(mustEncoding(t, name).vocab)
	}
	if got := renderUniform(tables); !bytes.Equal(got, want) {
		t.Errorf("uniform_table.go is not what the generator writes: run go generate ./internal/tiktoken/\n%s",
			firstDiff(got, want))
	}
}
