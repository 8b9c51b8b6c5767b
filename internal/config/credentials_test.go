package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func sum(s string) string { b := sha256.Sum256([]byte(s)); return hex.EncodeToString(b[:]) }

// The operator's credentials are known by salted hash (configured, or from key files hashed at
// load); anything else, a near miss included, is not theirs.
func TestOwnCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte("sk-ant-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := "sk-" + strings.Repeat("x", 2000) // past the hash's stack buffer
	c, err := Parse([]byte(`credentials:
  salt: pepper
  sha256: ["`+sum("peppersk-own")+`", "`+sum("pepper"+long)+`"]
  files: [`+keyFile+`]
rules:
  - name: mirror
    tokens: {limit: 1000, period: minute}
    provider_feedback: true
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Feedback || !c.Own.Configured() || c.Own.Injected() {
		t.Fatalf("feedback %v, own %+v", c.Feedback, c.Own)
	}
	for _, tc := range []struct {
		cred string
		own  bool
	}{
		{"sk-own", true},
		{long, true},
		{"sk-ant-from-file", true},
		{"sk-own ", false},
		{"sk-ow", false},
		{"peppersk-own", false},
		{"sk-own,sk-own", false}, // a repeated header, joined by Envoy
		{"", false},
		{"sk-foreign", false},
	} {
		if got := c.Own.Own(tc.cred); got != tc.own {
			t.Errorf("Own(%.20q) = %v, want %v", tc.cred, got, tc.own)
		}
	}
	if got := BearerToken("Bearer sk-own"); got != "sk-own" {
		t.Errorf("BearerToken = %q", got)
	}
	if got := BearerToken("bearer  sk-own"); got != "sk-own" {
		t.Errorf("BearerToken lower case = %q", got)
	}
	if got := BearerToken("sk-own"); got != "sk-own" {
		t.Errorf("BearerToken without prefix = %q", got)
	}
	// The configuration keeps the paths and the hashes, never a key file's content.
	if strings.Contains(strings.Join(c.File.Credentials.Files, ""), "from-file") || strings.Contains(string(c.Own.salt), "from-file") {
		t.Error("a key file's content was kept")
	}
}

func TestCredentialsProblems(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`credentials:
  sha256: ["abc"]
  files: [/nonexistent/key]
rules:
  - name: mirror
    tokens: {limit: 1000, period: minute}
    provider_feedback: true
`), "t")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want a config error, got %v", err)
	}
	want := []string{
		"credentials.salt: required with credentials.sha256: the hashes are of the salt followed by the credential",
		"credentials.sha256[0]: is not the 64 hex digits of a SHA-256",
		"credentials.files[0]: open /nonexistent/key: no such file or directory",
		"rules[0].provider_feedback: needs credentials (sha256, files or injected): only answers to the operator's own credential may correct a bucket",
	}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func BenchmarkOwn(b *testing.B) {
	c, err := Parse([]byte(`credentials: {salt: pepper, sha256: ["`+sum("peppersk-own")+`"]}`), "b")
	if err != nil {
		b.Fatal(err)
	}
	key := "sk-proj-" + strings.Repeat("a", 156)
	b.ReportAllocs()
	for b.Loop() {
		c.Own.Own(key)
	}
}
