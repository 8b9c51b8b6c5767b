package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// adminLimits is the limits file of the admin API's tests: a per-tenant rule whose tokens and
// requests share a key, with an in-flight cap, and a provider-wide budget. The buckets refill
// slowly (tokens 0.04 a second, a request every 6 minutes): a test sees its debits exactly, the
// tokens to within one. The credentials'
// salt is a secret /v1/config must not show.
const adminLimits = `tenant: {source: header, header: x-tenant-id, default: anonymous}
credentials: {salt: pepper-not-for-eyes, sha256: [0000000000000000000000000000000000000000000000000000000000000000]}
rules:
  - name: per-tenant
    match: {provider: openai, model: "gpt-4o*"}
    per: [tenant, model]
    tokens: {limit: 100000, period: 744h}
    requests: {limit: 10, period: hour}
    max_concurrent: 3
  - name: provider-wide
    match: {provider: openai}
    tokens: {limit: 100000, period: 744h}
`

const adminToken = "correct-horse-battery-staple"

// adminServer is a service on the admin limits file (its path returned), with token as its admin
// token ("" for none), on redisURL ("" for memory), logging into logs when set.
func adminServer(t *testing.T, dir, token, redisURL string) (*Server, *httptest.Server, *observer.ObservedLogs) {
	t.Helper()
	limits := filepath.Join(dir, "limits.yaml")
	if _, err := os.Stat(limits); err != nil {
		if err := os.WriteFile(limits, []byte(adminLimits), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	core, logs := observer.New(zapcore.InfoLevel)
	log := zap.New(core)
	s, err := New(Options{GRPCAddr: "127.0.0.1:0", ConfigPath: limits, MaxRecvBytes: 1 << 20, DrainTimeout: time.Second,
		AdminToken: token, RedisURL: redisURL, RedisPrefix: "admin:", RedisTimeout: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	h := httptest.NewServer(s.adminHandler())
	t.Cleanup(h.Close)
	return s, h, logs
}

// near reports whether a token count got is want, or one more (a refill since).
func near(got, want int64) bool { return got == want || got == want+1 }

// chat is a chat completion of tenant for gpt-4o, as Envoy sends it.
func chat(tenant string) *authv3.CheckRequest {
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Host: "api.openai.com", Path: "/v1/chat/completions",
			Headers: map[string]string{"x-tenant-id": tenant, "content-type": "application/json"},
			Body:    `{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":100}`}}}}
}

func allow(t *testing.T, s *Server, tenant string) {
	t.Helper()
	resp, err := s.Filter().Check(context.Background(), chat(tenant))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetOkResponse() == nil {
		t.Fatalf("check of %s denied: %v", tenant, resp)
	}
}

// call sends method to path with token (none when ""), returning the status and body.
func call(t *testing.T, h *httptest.Server, method, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, h.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := h.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// getBucketsOf reads /v1/buckets of query, failing t unless it answers 200.
func getBucketsOf(t *testing.T, h *httptest.Server, query string) bucketsJSON {
	t.Helper()
	status, body := call(t, h, "GET", "/v1/buckets?"+query, "")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/buckets?%s: %d %s", query, status, body)
	}
	var out bucketsJSON
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return out
}

const teamA = "provider=openai&model=gpt-4o&tenant=team-a"

// The buckets of a scope, read twice after a decision: the same, what the decision left; the
// next decision is counted from there.
func TestAdminBuckets(t *testing.T) {
	t.Parallel()
	s, h, _ := adminServer(t, t.TempDir(), "", "")
	if got := getBucketsOf(t, h, teamA); len(got.Buckets) != 4 || got.Buckets[0].Remaining != 100000 {
		t.Fatalf("before any request: %+v, want 4 full buckets", got)
	}
	allow(t, s, "team-a")
	first := getBucketsOf(t, h, teamA)
	second := getBucketsOf(t, h, teamA)
	for i := range first.Buckets {
		x, y := first.Buckets[i], second.Buckets[i]
		if !near(y.Remaining, x.Remaining) || y.Leases != x.Leases || y.Limit != x.Limit {
			t.Fatalf("a read changed bucket %d:\n%+v\n%+v", i, x, y)
		}
	}
	b := first.Buckets
	if first.Tag != "openai" || len(b) != 4 {
		t.Fatalf("buckets: %+v", first)
	}
	want := []struct {
		rule, kind, algorithm string
		shared                bool
	}{
		{"per-tenant", "tokens", "token_bucket", false},
		{"per-tenant", "requests", "token_bucket", false},
		{"per-tenant", "concurrent requests", "concurrency", false},
		{"provider-wide", "tokens", "token_bucket", true},
	}
	for i, w := range want {
		if b[i].Rule != w.rule || b[i].Kind != w.kind || b[i].Algorithm != w.algorithm || b[i].Shared != w.shared {
			t.Errorf("bucket %d: %+v, want %+v", i, b[i], w)
		}
	}
	spent := 100000 - b[0].Remaining
	if spent <= 100 || b[0].ResetMS <= 0 || b[1].Remaining != 9 || b[1].Capacity != 10 || b[2].Leases != 1 || b[2].Remaining != 2 ||
		b[3].Remaining != 100000-spent {
		t.Fatalf("after one request: %+v", b)
	}
	// The next decision starts from what was read: one more request, one more lease.
	allow(t, s, "team-a")
	third := getBucketsOf(t, h, teamA)
	if third.Buckets[1].Remaining != 8 || third.Buckets[2].Leases != 2 || !near(third.Buckets[0].Remaining, 100000-2*spent) {
		t.Fatalf("after a second request: %+v", third.Buckets)
	}
	// Another tenant's buckets are its own; the provider-wide one is shared.
	other := getBucketsOf(t, h, "provider=openai&model=gpt-4o&tenant=team-b")
	if other.Buckets[0].Remaining != 100000 || !near(other.Buckets[3].Remaining, third.Buckets[3].Remaining) {
		t.Fatalf("team-b: %+v", other.Buckets)
	}
	if one := getBucketsOf(t, h, teamA+"&rule=provider-wide"); len(one.Buckets) != 1 || one.Buckets[0].Rule != "provider-wide" {
		t.Fatalf("rule=provider-wide: %+v", one)
	}
	if none := getBucketsOf(t, h, "provider=anthropic&model=claude&tenant=team-a"); len(none.Buckets) != 0 {
		t.Fatalf("no rule applies: %+v", none)
	}
	for _, tc := range []struct {
		query  string
		status int
	}{
		{"provider=openai&tenant=team-a", http.StatusBadRequest},
		{teamA + "&colour=blue", http.StatusBadRequest},
		{teamA + "&tenant=team-b", http.StatusBadRequest},
		{teamA + "&rule=nonesuch", http.StatusNotFound},
	} {
		if status, body := call(t, h, "GET", "/v1/buckets?"+tc.query, ""); status != tc.status || !strings.Contains(body, `"error"`) {
			t.Errorf("GET ?%s: %d %s, want %d and an error", tc.query, status, body, tc.status)
		}
	}
	if status, _ := call(t, h, "POST", "/v1/buckets?"+teamA, ""); status != http.StatusMethodNotAllowed {
		t.Errorf("POST /v1/buckets: %d, want 405", status)
	}
}

// Without a configured token every change is refused with 403, saying how to configure one.
func TestAdminResetNeedsConfiguredToken(t *testing.T) {
	t.Parallel()
	s, h, logs := adminServer(t, t.TempDir(), "", "")
	allow(t, s, "team-a")
	status, body := call(t, h, "POST", "/v1/buckets/reset?"+teamA, "anything")
	if status != http.StatusForbidden || !strings.Contains(body, "ADMIN_TOKEN") || !strings.Contains(body, "-admin-token-file") {
		t.Fatalf("reset without a configured token: %d %s, want 403 saying how", status, body)
	}
	if got := getBucketsOf(t, h, teamA); got.Buckets[1].Remaining != 9 {
		t.Fatalf("a refused reset changed the buckets: %+v", got.Buckets)
	}
	if n := logs.FilterMessage("admin: change refused").FilterField(zap.String("reason", "no_token_configured")).Len(); n != 1 {
		t.Fatalf("%d refusal lines, want 1: %v", n, logs.All())
	}
}

// A reset needs the right bearer token (401 otherwise), makes the scope's buckets full for
// every replica on the same Redis, and is logged with the tenant's hash, never the tenant or the
// token.
func TestAdminResetTwoReplicas(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	dir := t.TempDir()
	a, ha, logs := adminServer(t, dir, adminToken, srv.URL())
	_, hb, logsB := adminServer(t, dir, adminToken, srv.URL())
	allow(t, a, "team-a")
	allow(t, a, "team-b")
	if got := getBucketsOf(t, hb, teamA); got.Buckets[1].Remaining != 9 {
		t.Fatalf("replica b does not see replica a's debit: %+v", got.Buckets)
	}
	for _, token := range []string{"", "wrong", adminToken + "x", strings.ToUpper(adminToken)} {
		status, body := call(t, hb, "POST", "/v1/buckets/reset?"+teamA, token)
		if status != http.StatusUnauthorized || !strings.Contains(body, `"error"`) {
			t.Fatalf("reset with token %q: %d %s, want 401", token, status, body)
		}
	}
	if got := getBucketsOf(t, ha, teamA); got.Buckets[1].Remaining != 9 {
		t.Fatalf("a refused reset changed the buckets: %+v", got.Buckets)
	}

	status, body := call(t, hb, "POST", "/v1/buckets/reset?"+teamA+"&rule=per-tenant", adminToken)
	if status != http.StatusOK {
		t.Fatalf("reset: %d %s", status, body)
	}
	var out bucketsJSON
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	if out.Reset != 3 || out.Buckets[0].Remaining != 100000 || out.Buckets[1].Remaining != 10 || out.Buckets[2].Leases != 0 {
		t.Fatalf("reset answer: %+v", out)
	}
	// Replica a sees it: team-a's rule is full, the provider-wide bucket (another rule) and
	// team-b are as they were.
	got := getBucketsOf(t, ha, teamA)
	if got.Buckets[0].Remaining != 100000 || got.Buckets[1].Remaining != 10 || got.Buckets[2].Leases != 0 || got.Buckets[3].Remaining == 100000 {
		t.Fatalf("replica a after b's reset: %+v", got.Buckets)
	}
	if b := getBucketsOf(t, ha, "provider=openai&model=gpt-4o&tenant=team-b"); b.Buckets[1].Remaining != 9 {
		t.Fatalf("team-b was reset too: %+v", b.Buckets)
	}
	// Replica a's next decision starts from the full bucket.
	allow(t, a, "team-a")
	if got := getBucketsOf(t, ha, teamA); got.Buckets[1].Remaining != 9 {
		t.Fatalf("the decision after a reset: %+v", got.Buckets)
	}

	// The replica that reset logged it, once; the four refusals too.
	if n := logs.FilterMessage("admin: buckets reset").Len(); n != 0 {
		t.Fatalf("replica a logged %d resets, want 0", n)
	}
	if n := logsB.FilterMessage("admin: change refused").Len(); n != 4 {
		t.Fatalf("%d refusal lines, want 4: %v", n, logsB.All())
	}
	lines := logsB.FilterMessage("admin: buckets reset").All()
	if len(lines) != 1 {
		t.Fatalf("%d reset lines, want 1: %v", len(lines), logsB.All())
	}
	fields := lines[0].ContextMap()
	for k, want := range map[string]any{"endpoint": "POST /v1/buckets/reset", "model": "gpt-4o", "rule": "per-tenant",
		"tenant_hash": filter.TenantHash("team-a"), "buckets": int64(3)} {
		if fields[k] != want {
			t.Errorf("log field %s = %v, want %v", k, fields[k], want)
		}
	}
	if r, _ := fields["remote"].(string); !strings.HasPrefix(r, "127.0.0.1:") {
		t.Errorf("log field remote = %v", fields["remote"])
	}
	for _, e := range append(logs.All(), logsB.All()...) {
		line, err := json.Marshal(e.ContextMap())
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(line), adminToken) || strings.Contains(string(line), "team-a") {
			t.Fatalf("a log line carries the token or the tenant: %s %s", e.Message, line)
		}
	}
}

// /v1/config shows the file in force by path and SHA-256, and its rules, without the secrets.
func TestAdminConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, h, _ := adminServer(t, dir, adminToken, "")
	status, body := call(t, h, "GET", "/v1/config", "")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/config: %d %s", status, body)
	}
	var c configJSON
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(adminLimits))
	if c.Source != filepath.Join(dir, "limits.yaml") || c.SHA256 != hex.EncodeToString(sum[:]) || c.TenantSource != "header" {
		t.Fatalf("config: %+v, want the file's path and SHA-256", c)
	}
	if len(c.Rules) != 2 || c.Rules[0].Name != "per-tenant" || c.Rules[0].Match["model"] != "gpt-4o*" ||
		c.Rules[0].MaxConcurrent != 3 || len(c.Rules[0].Limits) != 2 || c.Rules[0].Limits[0].Limit != 100000 ||
		c.Rules[0].Limits[1].Dimension != "requests" || c.Rules[1].Match["model"] != "" {
		t.Fatalf("rules: %+v", c.Rules)
	}
	for _, secret := range []string{"pepper-not-for-eyes", "0000000000000000", adminToken} {
		if strings.Contains(body, secret) {
			t.Fatalf("/v1/config shows a secret %q: %s", secret, body)
		}
	}
}

// postJSON sends a change to path with token, failing t unless it answers want; the answer's
// buckets on 200.
func postJSON(t *testing.T, h *httptest.Server, path, token string, want int) bucketsJSON {
	t.Helper()
	status, body := call(t, h, "POST", path, token)
	if status != want {
		t.Fatalf("POST %s: %d %s, want %d", path, status, body, want)
	}
	var out bucketsJSON
	if status == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("%v: %s", err, body)
		}
	} else if !strings.Contains(body, `"error"`) {
		t.Fatalf("POST %s: %d without an error: %s", path, status, body)
	}
	return out
}

// Set brings one bucket to a level, down or up, leaving the other buckets of its key as they
// were; lift refills a paused scope's token buckets and keeps its leases. Both need the token,
// are seen by the other replica on the same Redis, and are logged without the tenant. On the
// in-memory store too.
func TestAdminSetAndLift(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			url := ""
			if store == "redis" {
				url = srv.URL()
			}
			dir := t.TempDir()
			a, ha, logs := adminServer(t, dir, adminToken, url)
			hb := ha
			if store == "redis" {
				_, hb, _ = adminServer(t, dir, adminToken, url)
			}
			allow(t, a, "team-a")
			allow(t, a, "team-a")
			before := getBucketsOf(t, ha, teamA).Buckets
			set := "/v1/buckets/set?" + teamA + "&rule=per-tenant&kind=requests&remaining="

			postJSON(t, ha, set+"3", "", http.StatusUnauthorized)
			out := postJSON(t, ha, set+"3", adminToken, http.StatusOK)
			if out.Set != 1 || out.Buckets[1].Remaining != 3 || !near(out.Buckets[0].Remaining, before[0].Remaining) {
				t.Fatalf("set requests to 3: %+v (before %+v)", out.Buckets, before)
			}
			if got := getBucketsOf(t, hb, teamA).Buckets; got[1].Remaining != 3 || got[2].Leases != 2 {
				t.Fatalf("the other replica after set: %+v", got)
			}
			allow(t, a, "team-a")
			if got := getBucketsOf(t, hb, teamA).Buckets; got[1].Remaining != 2 {
				t.Fatalf("the decision after set: %+v", got)
			}
			out = postJSON(t, ha, set+"10", adminToken, http.StatusOK)
			if out.Buckets[1].Remaining != 10 {
				t.Fatalf("set requests up to 10: %+v", out.Buckets)
			}
			out = postJSON(t, ha, "/v1/buckets/set?"+teamA+"&rule=per-tenant&kind=tokens&window=0&remaining=0", adminToken, http.StatusOK)
			if out.Buckets[0].Remaining != 0 || out.Buckets[1].Remaining != 10 {
				t.Fatalf("set tokens to 0: %+v", out.Buckets)
			}
			for path, want := range map[string]int{
				set + "11": http.StatusBadRequest, set + "-1": http.StatusBadRequest, set + "x": http.StatusBadRequest,
				"/v1/buckets/set?" + teamA + "&kind=requests&remaining=1":                             http.StatusBadRequest,
				"/v1/buckets/set?" + teamA + "&rule=per-tenant&kind=concurrent_requests&remaining=1":  http.StatusBadRequest,
				"/v1/buckets/set?" + teamA + "&rule=per-tenant&kind=requests&window=1&remaining=1":    http.StatusNotFound,
				"/v1/buckets/set?" + teamA + "&rule=per-tenant&kind=output_tokens&remaining=1":        http.StatusNotFound,
				"/v1/buckets/set?" + teamA + "&rule=per-tenant&kind=requests&remaining=1&remaining=2": http.StatusBadRequest,
				"/v1/buckets/lift?" + teamA + "&remaining=1":                                          http.StatusBadRequest,
				"/v1/buckets/set?" + teamA + "&rule=per-tenant&kind=requests&remaining=1&window=256":  http.StatusBadRequest,
			} {
				postJSON(t, ha, path, adminToken, want)
			}

			// A provider 429's pause: every token bucket of the scope lowered below nothing, as
			// reconcile does. Lift refills them all; the leases in flight stay.
			specs := []bucket.Level{}
			tag, found := a.Filter().Select(filter.Selector{Provider: "openai", Model: "gpt-4o", Tenant: "team-a"})
			for _, f := range found {
				if f.Spec.Algorithm == bucket.TokenBucket {
					specs = append(specs, bucket.Level{Spec: f.Spec, Remaining: -5000})
				}
			}
			if err := a.store.Lower(t.Context(), tag, specs); err != nil {
				t.Fatal(err)
			}
			paused := getBucketsOf(t, hb, teamA).Buckets
			if paused[0].Remaining != -5000 || paused[1].Remaining != -5000 || paused[3].Remaining != -5000 {
				t.Fatalf("paused: %+v", paused)
			}
			postJSON(t, hb, "/v1/buckets/lift?"+teamA, "wrong", http.StatusUnauthorized)
			out = postJSON(t, hb, "/v1/buckets/lift?"+teamA, adminToken, http.StatusOK)
			if out.Lifted != 3 || out.Buckets[0].Remaining != 100000 || out.Buckets[1].Remaining != 10 ||
				out.Buckets[2].Leases != 3 || out.Buckets[3].Remaining != 100000 {
				t.Fatalf("lift: %+v", out)
			}
			// The three leases still hold the in-flight cap: the next request waits for them,
			// not for tokens.
			resp, err := a.Filter().Check(t.Context(), chat("team-a"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(resp.GetDeniedResponse().GetBody(), "concurrent requests") {
				t.Fatalf("after lift, with 3 leases held: %v", resp)
			}

			if n := logs.FilterMessage("admin: bucket set").Len(); n != 3 {
				t.Errorf("%d set lines, want 3", n)
			}
			for _, e := range logs.All() {
				line, err := json.Marshal(e.ContextMap())
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(line), adminToken) || strings.Contains(string(line), "team-a") {
					t.Fatalf("a log line carries the token or the tenant: %s %s", e.Message, line)
				}
			}
		})
	}
}
