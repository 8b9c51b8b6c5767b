package filter

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// chat13 costs 13 tokens.
const chat13 = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":5}`

// withJWT is a chat request whose metadata_context carries payload as jwt_authn verified it
// (payload_in_metadata: jwt_payload), with headers a client may have set (nil payload: no
// verified token).
func withJWT(payload map[string]any, headers map[string]string) *authv3.CheckRequest {
	req := hostileRequest("/v1/chat/completions", []byte(chat13), headers)
	if payload != nil {
		st, err := structpb.NewStruct(map[string]any{"jwt_payload": payload})
		if err != nil {
			panic(err)
		}
		req.Attributes.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{config.JWTNamespace: st}}
	}
	return req
}

// Plans of 2 and 10 requests of 13 tokens a minute; tenant and plan from the token's claims.
const claimPlans = `
tenant: {source: claim, claim: "https://example.com/org", log: clear}
priority:
  source: claim
  claim: [tier]
  header: x-llm-priority
  default: interactive
  classes: {interactive: {floor: 0}, batch: {floor: 0.5}}
plans:
  free: {tokens: {limit: 26, period: minute}}
  pro: {tokens: {limit: 130, period: minute}, requests: {limit: 100, period: minute}}
tenant_plans: {source: claim, claim: plan, default: free}
rules:
  - {name: per-tenant, per: [tenant], limits_from: plan}
`

func checkN(t *testing.T, f *Filter, n int, req func() *authv3.CheckRequest) []string {
	t.Helper()
	var out []string
	for range n {
		resp, err := f.Check(context.Background(), req())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, decision(resp))
	}
	return out
}

func count(ds []string, d string) int {
	n := 0
	for _, x := range ds {
		if x == d {
			n++
		}
	}
	return n
}

// A claim names the tenant and its plan: each tenant admits what its plan allows, in buckets of
// its own; a client-set tenant or priority header changes nothing; a request without a verified
// token is refused with a 401, charged to no one.
func TestClaimTenantAndPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, claimPlans, Options{})
	acme := map[string]any{"https://example.com/org": "acme", "plan": "pro"}
	globex := map[string]any{"https://example.com/org": "globex", "plan": "free"}
	spoof := map[string]string{"x-tenant-id": "globex", "x-llm-priority": "interactive"}

	got := checkN(t, e.f, 12, func() *authv3.CheckRequest { return withJWT(acme, spoof) })
	if count(got[:10], decisionAllowed) != 10 || count(got[10:], decisionDenied) != 2 {
		t.Errorf("acme on pro: %v, want 10 allowed then denied", got)
	}
	got = checkN(t, e.f, 3, func() *authv3.CheckRequest { return withJWT(globex, nil) })
	if want := []string{decisionAllowed, decisionAllowed, decisionDenied}; !equal(got, want) {
		t.Errorf("globex on free: %v, want %v (acme's spending and its spoofed header are not globex's)", got, want)
	}
	// An unknown plan is the default plan; a tenant is never another's because of its plan.
	initech := map[string]any{"https://example.com/org": "initech", "plan": "platinum"}
	got = checkN(t, e.f, 3, func() *authv3.CheckRequest { return withJWT(initech, nil) })
	if want := []string{decisionAllowed, decisionAllowed, decisionDenied}; !equal(got, want) {
		t.Errorf("initech on an unknown plan: %v, want the default plan's %v", got, want)
	}

	x, err := e.f.Explain(withJWT(acme, spoof))
	if err != nil {
		t.Fatal(err)
	}
	if x.Tenant != "acme" || x.TenantSource != "claim" || x.Plan != "pro" || x.PlanSource != `claim ["plan"]` || x.Priority != "interactive" {
		t.Errorf("explain: tenant %q (%s) plan %q (%s) priority %s", x.Tenant, x.TenantSource, x.Plan, x.PlanSource, x.Priority)
	}
	if len(x.Buckets) != 2 || x.Buckets[0].Limit != 130 || x.Buckets[1].Limit != 100 || x.Buckets[0].Name != x.Buckets[1].Name {
		t.Errorf("acme's buckets: %+v, want pro's tokens and requests in one key", x.Buckets)
	}

	// The class comes from the claim only: the header says interactive, the token batch.
	x, err = e.f.Explain(withJWT(map[string]any{"https://example.com/org": "acme", "tier": "batch"}, spoof))
	if err != nil {
		t.Fatal(err)
	}
	if x.Priority != "batch" || x.Buckets[0].Floor != 0.5 {
		t.Errorf("priority %s floor %v, want the claim's batch", x.Priority, x.Buckets[0].Floor)
	}
	x, err = e.f.Explain(withJWT(map[string]any{"https://example.com/org": "acme"}, map[string]string{"x-llm-priority": "batch"}))
	if err != nil {
		t.Fatal(err)
	}
	if x.Priority != "interactive" {
		t.Errorf("a client's priority header was trusted: %s", x.Priority)
	}

	for name, req := range map[string]*authv3.CheckRequest{
		"no token":                withJWT(nil, map[string]string{"x-tenant-id": "acme"}),
		"a token without claim":   withJWT(map[string]any{"sub": "someone", "plan": "pro"}, nil),
		"a claim of another type": withJWT(map[string]any{"https://example.com/org": map[string]any{"id": "acme"}}, nil),
	} {
		resp, err := e.f.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		d := resp.GetDeniedResponse()
		if decision(resp) != decisionUnidentified || d.GetStatus().GetCode() != 401 || !strings.Contains(d.GetBody(), `"code":"unidentified"`) ||
			!strings.Contains(d.GetBody(), "https://example.com/org") {
			t.Errorf("%s: %s %d %s, want a 401 naming the claim", name, decision(resp), d.GetStatus().GetCode(), d.GetBody())
		}
		if _, ok := resp.GetDynamicMetadata().GetFields()["tenant"]; ok {
			t.Errorf("%s: a refused request names a tenant", name)
		}
	}
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// tenant.missing: default charges an unidentified request to tenant.default, on its plan.
func TestClaimMissingDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, strings.Replace(claimPlans, "log: clear}", "log: clear, missing: default, default: anonymous}", 1), Options{})
	got := checkN(t, e.f, 3, func() *authv3.CheckRequest { return withJWT(nil, map[string]string{"x-tenant-id": "acme"}) })
	if want := []string{decisionAllowed, decisionAllowed, decisionDenied}; !equal(got, want) {
		t.Errorf("unidentified: %v, want the default tenant on the default plan: %v", got, want)
	}
	x, err := e.f.Explain(withJWT(nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if x.Tenant != "anonymous" || x.TenantSource != "default" || x.Plan != "free" || x.PlanSource != "tenant_plans.default" {
		t.Errorf("explain: %q %s %s %s", x.Tenant, x.TenantSource, x.Plan, x.PlanSource)
	}
}

// tablePlans assigns plans from tenant_plans.table by the tenant's header.
const tablePlans = `
tenant: {source: header, header: x-tenant-id, log: clear}
plans:
  free: {tokens: {limit: 26, period: minute}}
  pro: {tokens: {limit: 130, period: minute}}
tenant_plans: {default: free, table: {acme: pro}}
rules:
  - {name: per-tenant, per: [tenant], limits_from: plan}
`

// A tenant moved to another plan keeps its bucket: its next request is decided on the new plan's
// limits against what it already spent, never on a fresh budget.
func TestPlanChangeKeepsSpending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, tablePlans, Options{})
	as := func(tenant string) func() *authv3.CheckRequest {
		return func() *authv3.CheckRequest { return withJWT(nil, map[string]string{"x-tenant-id": tenant}) }
	}
	if got := checkN(t, e.f, 3, as("initech")); !equal(got, []string{decisionAllowed, decisionAllowed, decisionDenied}) {
		t.Fatalf("initech on free: %v", got)
	}
	if got := checkN(t, e.f, 4, as("acme")); count(got, decisionAllowed) != 4 {
		t.Fatalf("acme on pro: %v", got)
	}
	// Swap them: initech to pro, acme to free.
	c, err := config.Parse([]byte(strings.Replace(tablePlans, "{acme: pro}", "{initech: pro}", 1)), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	e.f.SetPolicy(&Policy{Config: c, Estimator: e.f.Policy().Estimator})
	md := func(tenant string) string {
		resp, err := e.f.Check(context.Background(), as(tenant)())
		if err != nil {
			t.Fatal(err)
		}
		return decision(resp) + " " + resp.GetDynamicMetadata().GetFields()["plan"].GetStringValue()
	}
	// initech spent its 26 and has nothing left: pro's capacity is not a new budget.
	if got := md("initech"); got != decisionDenied+" pro" {
		t.Errorf("initech moved to pro after spending free's budget: %s, want denied on pro", got)
	}
	// acme spent 52 of 130 and has 78 left, at most free's capacity of 26: two requests.
	if got := checkN(t, e.f, 3, as("acme")); !equal(got, []string{decisionAllowed, decisionAllowed, decisionDenied}) {
		t.Errorf("acme moved to free: %v, want free's capacity of what it had left", got)
	}
	// A minute later initech has refilled at pro's rate.
	e.clock.Add(time.Minute)
	if got := checkN(t, e.f, 11, as("initech")); count(got[:10], decisionAllowed) != 10 || got[10] != decisionDenied {
		t.Errorf("initech a minute later on pro: %v", got)
	}
}

// recorder keeps the names and tags of every bucket a decision debits.
type recorder struct {
	Limiter
	names []string
}

func (r *recorder) Take(ctx context.Context, req *bucket.Request) (bucket.Result, error) {
	for _, b := range req.Buckets {
		r.names = append(r.names, req.Tag+" "+b.Name)
	}
	return r.Limiter.Take(ctx, req)
}

// tenant.source: api_key: two keys are two tenants, and the key itself is nowhere: not in the
// logs (debug, every decision), the metrics, the answers and their metadata, the bucket names
// nor the store's keys, on a real Redis.
func TestAPIKeyTenants(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	salt := filepath.Join(dir, "salt")
	if err := os.WriteFile(salt, []byte("a-secret-salt-of-32-bytes-000000"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := "tenant: {source: api_key, key_salt_file: " + salt + ", log: clear}\n" +
		"rules: [{name: per-key, per: [tenant], tokens: {limit: 100000, period: minute}, requests: {limit: 2, period: minute}, max_concurrent: 5}]\n"
	c, err := config.Parse([]byte(cfg), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.StartServer(t)
	rec := &recorder{Limiter: bucket.NewRedis(srv.Client(), bucket.RedisOptions{Prefix: "keys-test:"})}
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	f, err := New(policyFor(t, c), Options{Limiter: rec, Logger: zap.New(core), Metrics: NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	const keyA, keyB = "sk-proj-AAAAsecretalpha", "sk-ant-api03-BBBBsecretbeta"
	var answers [][]byte
	send := func(h map[string]string, path string) string {
		req := hostileRequest(path, []byte(chat13), h)
		resp, err := f.Check(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := proto.Marshal(resp)
		answers = append(answers, b, []byte(resp.String()))
		return decision(resp)
	}
	var got []string
	for range 3 {
		got = append(got, send(map[string]string{"authorization": "Bearer " + keyA}, "/v1/chat/completions"))
	}
	got = append(got, send(map[string]string{":authority": "api.anthropic.com", "x-api-key": keyB}, "/v1/messages"))
	if want := []string{decisionAllowed, decisionAllowed, decisionDenied, decisionAllowed}; !equal(got, want) {
		t.Errorf("decisions %v, want %v: each key its own budget", got, want)
	}
	if d := send(nil, "/v1/chat/completions"); d != decisionUnidentified {
		t.Errorf("no key: %s, want %s", d, decisionUnidentified)
	}
	if d := send(map[string]string{"authorization": "Bearer " + keyA, "x-api-key": keyB}, "/v1/chat/completions"); d != decisionBadIdentity {
		t.Errorf("two keys: %s, want %s", d, decisionBadIdentity)
	}
	x, err := f.Explain(hostileRequest("/v1/chat/completions", []byte(chat13), map[string]string{"authorization": "Bearer " + keyA}))
	if err != nil {
		t.Fatal(err)
	}
	if x.Tenant != c.KeyTenant(keyA) || x.TenantSource != "api_key" {
		t.Errorf("tenant %q from %s", x.Tenant, x.TenantSource)
	}

	var haystack bytes.Buffer
	for _, e := range logs.All() {
		haystack.WriteString(e.Message)
		for k, v := range e.ContextMap() {
			haystack.WriteString(k)
			haystack.WriteString(" ")
			haystack.WriteString(toString(v))
			haystack.WriteString("\n")
		}
	}
	if logs.Len() < 6 {
		t.Errorf("%d log lines: the test must see every decision's", logs.Len())
	}
	metrics := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(metrics, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(metrics.Body.String(), "llm_ratelimit_decisions_total") {
		t.Fatalf("metrics: %s", metrics.Body.String())
	}
	haystack.Write(metrics.Body.Bytes())
	for _, a := range answers {
		haystack.Write(a)
	}
	for _, n := range rec.names {
		haystack.WriteString(n + "\n")
	}
	keys, err := srv.Client().Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 2 || len(rec.names) < 6 {
		t.Fatalf("%d keys in Redis, %d buckets debited: the test must see them", len(keys), len(rec.names))
	}
	haystack.WriteString(strings.Join(keys, "\n"))
	for _, secret := range []string{keyA, keyB, "secretalpha", "secretbeta", "a-secret-salt"} {
		if i := bytes.Index(haystack.Bytes(), []byte(secret)); i >= 0 {
			t.Errorf("%q found in the logs, metrics, answers or keys: ...%s...", secret, haystack.Bytes()[max(0, i-80):min(haystack.Len(), i+40)])
		}
	}
	if !bytes.Contains(haystack.Bytes(), []byte(c.KeyTenant(keyA))) {
		t.Error("the hashed tenant is nowhere: the haystack misses what it should hold")
	}
}

func toString(v any) string { return fmt.Sprint(v) }
