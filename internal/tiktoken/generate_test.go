package tiktoken

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnicodeTablesGenerated: testdata/gen_unicode.py, run with Python tiktoken, writes exactly
// the checked-in unicode_tables.go, so the classes cannot drift from tiktoken's regex engine.
// The interpreter is the project's virtualenv (make deps installs it, and make puts it first on
// PATH), else python3 on PATH; without Python tiktoken there is nothing to compare with.
func TestUnicodeTablesGenerated(t *testing.T) {
	t.Parallel()
	python := tiktokenPython(t)
	out := filepath.Join(t.TempDir(), "unicode_tables.go")
	cmd := exec.Command(python, "testdata/gen_unicode.py", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s testdata/gen_unicode.py: %v\n%s", python, err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("unicode_tables.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("unicode_tables.go is not what the generator writes: run go generate ./internal/tiktoken/\n%s",
			firstDiff(got, want))
	}
}

// tiktokenPython returns a Python interpreter that imports tiktoken: the repository's .venv,
// else python3 on PATH. Without one the test fails in CI and wherever make deps has made the
// .venv (make test always has: it runs deps first), and is skipped only by a bare go test on a
// machine without it.
func tiktokenPython(t *testing.T) string {
	t.Helper()
	var tried []string
	for _, py := range []string{filepath.Join("..", "..", ".venv", "bin", "python"), "python3"} {
		bin, err := exec.LookPath(py)
		if err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v", py, err))
			continue
		}
		if b, err := exec.Command(bin, "-c", "import tiktoken").CombinedOutput(); err != nil {
			tried = append(tried, fmt.Sprintf("%s: %v: %s", bin, err, bytes.TrimSpace(b)))
			continue
		}
		return bin
	}
	// Never skipped in CI or under make test: there a missing interpreter is a failure of the
	// setup.
	venv := filepath.Join("..", "..", ".venv")
	if _, err := os.Stat(venv); err == nil || os.Getenv("CI") != "" {
		t.Fatalf("no Python with tiktoken (run make deps): %s", strings.Join(tried, "; "))
	}
	t.Skipf("no Python with tiktoken (run make deps): %s", strings.Join(tried, "; "))
	return ""
}

// firstDiff describes the first line where got and want differ.
func firstDiff(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < max(len(g), len(w)); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: generated %q, checked in %q", i+1, gl, wl)
		}
	}
	return "they differ"
}
