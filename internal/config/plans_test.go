package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

const plansFile = `
tenant: {source: claim, claim: org_id}
priority:
  source: claim
  claim: [tier, class]
  default: interactive
  classes: {interactive: {floor: 0}, batch: {floor: 0.3}}
plans:
  free: {tokens: {limit: 1000, period: minute}, requests: {limit: 10, period: minute}}
  pro:
    tokens: {limit: 100000, period: minute, burst: 150000}
    requests: [{limit: 600, period: minute}, {limit: 20, period: second}]
tenant_plans:
  default: free
  table: {acme: pro, "https://example.com/globex": pro}
rules:
  - name: per-tenant
    per: [tenant]
    limits_from: plan
`

// A claim tenant, a claim class and plans compile into lookups on precomputed values.
func TestPlansCompile(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(plansFile), "plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.TenantSource != TenantFromClaim || !cmp.Equal(c.TenantClaim, ClaimPath{"org_id"}) {
		t.Errorf("tenant: %v %v", c.TenantSource, c.TenantClaim)
	}
	if !c.DenyUnidentified {
		t.Error("tenant.source: claim must deny a request without the claim by default")
	}
	if c.PrioritySource != PriorityFromClaim || !cmp.Equal(c.PriorityClaim, ClaimPath{"tier", "class"}) || c.File.Priority.Header != "" {
		t.Errorf("priority: %v %v header %q", c.PrioritySource, c.PriorityClaim, c.File.Priority.Header)
	}
	if c.JWTPayload != "jwt_payload" {
		t.Errorf("jwt.payload_in_metadata default %q", c.JWTPayload)
	}
	if !c.UsesPlans || !c.Rules[0].FromPlan || len(c.Rules[0].Limits) != 0 {
		t.Errorf("rule: %+v", c.Rules[0])
	}
	for tenant, want := range map[string]string{"acme": "pro", "https://example.com/globex": "pro", "initech": "free", "": "free"} {
		if got := c.PlanOf(tenant); got == nil || got.Name != want {
			t.Errorf("PlanOf(%q) = %v, want %s", tenant, got, want)
		}
	}
	pro := c.Plans["pro"]
	if len(pro.Limits) != 3 || pro.Limits[0].Dim != provider.Tokens || pro.Limits[0].Burst != 150000 ||
		pro.Limits[2].Dim != provider.Requests || pro.Limits[2].Window != 1 || pro.Limits[2].Period != time.Second {
		t.Errorf("plans.pro = %+v", pro.Limits)
	}
	if got := c.PlanNamed("nope"); got != c.DefaultPlan {
		t.Errorf("an unknown plan name is %v, want the default", got)
	}
}

// Every mistake of the identity and plan keys is reported at once, each with its key path.
func TestPlansInvalid(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`
tenant: {source: claim, missing: maybe, key_salt_env: X}
priority: {source: cookie, claim: x, principals: [{principal: "*", class: vip}]}
plans:
  free: {tokens: {limit: 1000, period: minute}}
  pro: {tokens: {limit: 1000, period: day, algorithm: quota}}
  win: {requests: {limit: 10, period: minute, algorithm: sliding_window}}
  win2: {requests: {limit: 10, period: hour, algorithm: sliding_window}}
  "bad name": {tokens: {limit: 5, period: minute}}
  empty: {}
tenant_plans:
  default: gold
  table: {acme: pro, initech: platinum, "": free}
rules:
  - {name: a, per: [tenant], limits_from: plan, tokens: {limit: 5, period: minute}}
  - {name: b, limits_from: plan}
  - {name: c, per: [tenant], limits_from: plans}
`), "bad.yaml")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := []string{
		`tenant.claim: required: the claim's path, a key or a list of keys (e.g. org_id, or [org, id])`,
		`tenant.key_salt_file: applies with tenant.source: api_key only`,
		`tenant.missing: "maybe" is not default or deny`,
		`priority.source: "cookie" is not one of header, claim, principal, context_extension, tenant`,
		`priority.claim: applies with priority.source: claim only`,
		`priority.principals: applies with priority.source: principal only`,
		`priority.principals[0].class: "vip" is not a class under priority.classes`,
		`plans.bad name: the plan's name must be 1 to 64 of [A-Za-z0-9._-]`,
		`plans.empty: a plan needs tokens, input_tokens, output_tokens or requests`,
		`tenant_plans.default: "gold" is not a plan under plans`,
		`plans.pro.tokens: a daily quota differs from plans.bad name's token_bucket: plans may differ in amounts, not in algorithms (a tenant moving between them would start a new bucket)`,
		`plans.win2.requests: a sliding window of 1h0m0s, plans.win's is of 1m0s: a tenant moving between them would mix sub-windows of two lengths`,
		`tenant_plans.table[initech]: "platinum" is not a plan under plans`,
		`tenant_plans.table[]: the tenant must not be empty`,
		`rules[0].limits_from: plan takes the limits from the tenant's plan: remove tokens, input_tokens, output_tokens and requests`,
		`rules[1].limits_from: plan needs per: [tenant] (each tenant its own buckets, with its plan's limits)`,
		`rules[2].limits_from: "plans" is not plan`,
		`rules[2].tokens: a rule needs tokens, input_tokens, output_tokens, requests, cost or max_concurrent`,
	}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// tenant.source: api_key: the tenant is an HMAC of the key under the secret salt, never the key;
// two keys are two tenants, the same key under another salt another tenant.
// Not parallel: it sets an environment variable.
func TestKeyTenant(t *testing.T) {
	dir := t.TempDir()
	salt := filepath.Join(dir, "salt")
	if err := os.WriteFile(salt, []byte("0123456789abcdef-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte("tenant: {source: api_key, key_salt_file: "+salt+"}\n"), "key.yaml")
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.KeyTenant("sk-alpha"), c.KeyTenant("sk-beta")
	if a == b || !strings.HasPrefix(a, KeyTenantPrefix) || len(a) != len(KeyTenantPrefix)+32 || strings.Contains(a, "alpha") {
		t.Errorf("tenants %q and %q", a, b)
	}
	if c.KeyTenant("sk-alpha") != a {
		t.Error("the same key must be the same tenant")
	}
	// printf %s sk-alpha | openssl dgst -sha256 -hmac 0123456789abcdef-secret | cut -c1-32
	if want := "key:" + hmacHex("0123456789abcdef-secret", "sk-alpha")[:32]; a != want {
		t.Errorf("tenant %q, want %q", a, want)
	}
	if !c.DenyUnidentified {
		t.Error("tenant.source: api_key must deny a request without a key by default")
	}
	t.Setenv("LLMRL_TEST_SALT", "another-salt-of-16-bytes")
	d, err := Parse([]byte("tenant: {source: api_key, key_salt_env: LLMRL_TEST_SALT, missing: default}\n"), "key.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if d.KeyTenant("sk-alpha") == a || d.DenyUnidentified {
		t.Error("another salt must give another tenant; missing: default must not deny")
	}
	_, err = Parse([]byte("tenant: {source: api_key, key_salt_env: LLMRL_TEST_UNSET_SALT}\n"), "key.yaml")
	if err == nil || !strings.Contains(err.Error(), "tenant.key_salt_env: the environment variable LLMRL_TEST_UNSET_SALT is unset or empty") {
		t.Errorf("unset salt: %v", err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("tiny"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Parse([]byte("tenant: {source: api_key, key_salt_file: "+short+"}\n"), "key.yaml")
	if err == nil || !strings.Contains(err.Error(), "the salt has 4 bytes") || strings.Contains(err.Error(), "tiny") {
		t.Errorf("short salt: %v", err)
	}
}

// writePlans writes a tenant_plans.file of n tenants, every tenth on pro.
func writePlans(t testing.TB, path string, n int, shift int) {
	t.Helper()
	var b strings.Builder
	b.Grow(n * 24)
	for i := range n {
		plan := "free"
		if (i+shift)%10 == 0 {
			plan = "pro"
		}
		fmt.Fprintf(&b, "tenant-%06d: %s\n", i, plan)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A plans file of 50,000 tenants loads and reloads (the times are logged, not gated: an absolute
// bound measures the machine); its problems name the file and the line.
func TestPlansFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	limits := filepath.Join(dir, "limits.yaml")
	cfg := strings.Replace(plansFile, "  table:", "  file: tenants.yaml\n  table:", 1)
	if err := os.WriteFile(limits, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	tenants := filepath.Join(dir, "tenants.yaml")
	const n = 50_000
	writePlans(t, tenants, n, 0)
	start := time.Now()
	c, err := Load(limits)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("limits file with %d assigned tenants loaded in %v", n, took)
	if c.Assigned() != n+2 || c.PlanOf("tenant-000010").Name != "pro" || c.PlanOf("tenant-000011").Name != "free" || c.PlanOf("acme").Name != "pro" {
		t.Fatalf("assigned %d; tenant-000010 %s", c.Assigned(), c.PlanOf("tenant-000010").Name)
	}
	writePlans(t, tenants, n, 1)
	data, err := os.ReadFile(tenants)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	d, err := c.WithAssignments(data)
	took2 := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reassigned %d tenants in %v", n, took2)
	if d.PlanOf("tenant-000009").Name != "pro" || d.PlanOf("tenant-000010").Name != "free" || c.PlanOf("tenant-000010").Name != "pro" {
		t.Error("WithAssignments must change the copy only")
	}

	_, err = c.WithAssignments([]byte("tenant-a: pro\ntenant-b: gold\ntenant-a: free\nacme: free\n"))
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := []string{
		tenants + `:2: tenant "tenant-b": "gold" is not a plan under plans`,
		tenants + `:3: tenant "tenant-a": listed twice (first on line 1)`,
		tenants + `:4: tenant "acme": already assigned by tenant_plans.table`,
	}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if _, err := c.WithAssignments([]byte("[a, b]\n")); err == nil || !strings.Contains(err.Error(), "want a mapping of tenant to plan name") {
		t.Errorf("a list: %v", err)
	}
	if e, err := c.WithAssignments(nil); err != nil || e.Assigned() != 2 {
		t.Errorf("an empty file: %v, %d assigned", err, e.Assigned())
	}
}

// Routes may name the class and the plan; unknown names are bad routes.
func TestRoutePlanAndPriority(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(plansFile), "plans.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := c.ParseRoute(map[string]string{"plan": "pro", "priority": "batch"})
	if err != nil || rt.Plan != c.Plans["pro"] || rt.Priority != "batch" || rt.Floor != 0.3 {
		t.Fatalf("route %+v, %v", rt, err)
	}
	_, err = c.ParseRoute(map[string]string{"plan": "gold", "priority": "vip"})
	if err == nil || !strings.Contains(err.Error(), `context_extensions[plan]: "gold" is not a plan under plans`) ||
		!strings.Contains(err.Error(), `context_extensions[priority]: "vip" is not a class under priority.classes`) {
		t.Errorf("bad route: %v", err)
	}
}

func hmacHex(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// The plain-line reader of tenant_plans.file reads what the YAML decoder reads, or declines.
func TestPlainAssignments(t *testing.T) {
	t.Parallel()
	for _, src := range []string{
		"a: free\n# comment\n\nteam-b.x/y@z+1=2: pro\r\n123: free\ntrue: pro\nlast: free",
		"\"quoted: key\": pro\nplain: free\n",
		"  indented: pro\n",
		"a: pro # trailing comment\n",
		"a: {x: 1}\n",
		"https://example.com/org: pro\n",
	} {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(src), &n); err != nil {
			t.Fatal(err)
		}
		want, _ := readAssignments(&n)
		got, ok := plainAssignments([]byte(src))
		if !ok {
			continue
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%q (-yaml +plain):\n%s", src, diff)
		}
	}
	if _, ok := plainAssignments([]byte("a: free\nb: pro\n")); !ok {
		t.Error("the plain reader declined plain lines")
	}
}
