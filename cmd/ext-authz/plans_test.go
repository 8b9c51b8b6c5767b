package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const plansLimits = `tenant: {source: claim, claim: org_id}
plans:
  free: {tokens: {limit: 10000, period: minute}}
  pro: {tokens: {limit: 100000, period: minute}, requests: {limit: 600, period: minute}}
tenant_plans: {source: claim, claim: plan, default: free}
rules: [{name: per-tenant, per: [tenant], limits_from: plan}]
`

// estimate shows where the tenant and its plan came from, and the plan's limits.
func TestEstimateShowsPlan(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "limits.yaml", plansLimits)
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":100}`
	var out, errb strings.Builder
	args := []string{"estimate", "-config", cfg, "-jwt", `{"org_id": "acme", "plan": "pro"}`, "-H", "x-tenant-id: spoofed"}
	if err := run(context.Background(), args, strings.NewReader(body), &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	for _, want := range []string{`tenant         "acme" (from claim)`, `plan           pro (from claim ["plan"])`,
		"per-tenant:b|t4:acme\"  1     token_bucket  100000", "per-tenant:b|t4:acme\"  2     token_bucket  600"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := run(context.Background(), []string{"estimate", "-config", cfg}, strings.NewReader(body), &out, &errb); err == nil ||
		!strings.Contains(err.Error(), "no identity") {
		t.Errorf("without a token: %v\n%s", err, out.String())
	}
}

// check-config reports plans' problems with their key paths, and the assignments file's with its
// lines.
func TestCheckConfigPlans(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tenants.yaml"), []byte("acme: pro\nglobex: gold\nacme: free\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "limits.yaml")
	src := strings.Replace(plansLimits, "{source: claim, claim: plan, default: free}", "{default: basic, file: tenants.yaml}", 1)
	if err := os.WriteFile(bad, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	err := run(context.Background(), []string{"check-config", bad}, nil, &out, &errb)
	if ec, ok := err.(exitCode); !ok || ec != 1 {
		t.Fatalf("invalid file: err = %v", err)
	}
	for _, want := range []string{`tenant_plans.default: "basic" is not a plan under plans`,
		`tenants.yaml:2: tenant "globex": "gold" is not a plan under plans`,
		`tenants.yaml:3: tenant "acme": listed twice (first on line 1)`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errb.String())
		}
	}
	good := writeFile(t, "good.yaml", plansLimits)
	out.Reset()
	if err := run(context.Background(), []string{"check-config", good}, nil, &out, &errb); err != nil || !strings.Contains(out.String(), "ok (1 rules, 2 plans, 0 tenants assigned, default plan free)") {
		t.Errorf("valid file: %v %q", err, out.String())
	}
}
