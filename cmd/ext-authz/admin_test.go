package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
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

// The admin API of a running process, its token from -admin-token-file: a check's debit is
// read on the admin port, a reset with the token makes the bucket full, and the log has the
// reset's line without the token or the tenant.
func TestAdminAPIProcess(t *testing.T) {
	t.Parallel()
	const token = "proc-admin-Zq9token"
	tokenFile := writeFile(t, "admin-token", token+"\n")
	cfg := writeFile(t, "limits.yaml", `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: tenants
    per: [tenant]
    requests: {limit: 10, period: hour}
`)
	p := startProc(t, "-config", cfg, "-admin-token-file", tokenFile)
	client := authv3.NewAuthorizationClient(p.dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := client.Check(ctx, chatRequest("gpt-4o", 10, map[string]string{"x-tenant-id": "tenant-Zq9secret"})); err != nil {
		t.Fatal(err)
	}
	query := "provider=openai&model=gpt-4o&tenant=tenant-Zq9secret"
	remaining := func(method, auth string) (int, int64) {
		t.Helper()
		path := "/v1/buckets?"
		if method == "POST" {
			path = "/v1/buckets/reset?"
		}
		req, err := http.NewRequestWithContext(ctx, method, "http://"+p.adminAddr+path+query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Buckets []struct {
				Remaining int64 `json:"remaining"`
			} `json:"buckets"`
		}
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Buckets) != 1 {
				t.Fatalf("%s %s: %v %+v", method, path, err, out)
			}
			return resp.StatusCode, out.Buckets[0].Remaining
		}
		return resp.StatusCode, -1
	}
	if status, got := remaining("GET", ""); status != http.StatusOK || got != 9 {
		t.Fatalf("GET /v1/buckets: %d, remaining %d, want 200 and 9", status, got)
	}
	if status, _ := remaining("POST", "wrong"); status != http.StatusUnauthorized {
		t.Fatalf("reset with a wrong token: %d, want 401", status)
	}
	if status, got := remaining("POST", token); status != http.StatusOK || got != 10 {
		t.Fatalf("reset: %d, remaining %d, want 200 and 10", status, got)
	}
	// The process's stderr reaches the buffer through a pipe: wait for the reset's line.
	logs := p.logs.String()
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs, `"admin: buckets reset"`); logs = p.logs.String() {
		if time.Now().After(deadline) {
			t.Fatalf("no reset line in the logs:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(logs, `"admin: change refused"`) {
		t.Fatalf("no refusal line in the logs:\n%s", logs)
	}
	if strings.Contains(logs, "Zq9") {
		t.Fatalf("the token or the tenant reached the logs:\n%s", logs)
	}
}
