package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The admin token comes from -admin-token-file or ADMIN_TOKEN, trimmed; both, an empty file or a
// missing one fail start-up, and no message carries the token.
func TestAdminToken(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("token", "  s3cret-token\n")
	empty := write("empty", " \n")
	for _, tc := range []struct {
		file, env, want, err string
	}{
		{"", "", "", ""},
		{"", " from-env\n", "from-env", ""},
		{good, "", "s3cret-token", ""},
		{good, "from-env", "", "not both"},
		{empty, "", "", "is empty"},
		{filepath.Join(dir, "missing"), "", "", "no such file"},
	} {
		got, err := adminToken(tc.file, tc.env)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "from-env") {
				t.Errorf("adminToken(%q, %q): %v, want an error with %q and no token", tc.file, tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("adminToken(%q, %q) = %q, %v, want %q", tc.file, tc.env, got, err, tc.want)
		}
	}
	o, _, err := parseServe([]string{"-admin-token-file", good}, os.Stderr)
	if err != nil || o.AdminToken != "s3cret-token" {
		t.Fatalf("parseServe: the token from the file not kept: %v", err)
	}
}
