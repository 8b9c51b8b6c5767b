package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
)

// The service follows tenant_plans.file: a tenant's new plan applies without a restart or a
// change to the limits file, and a rejected file leaves the previous assignments.
func TestPlansFileReloaded(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tenants := filepath.Join(dir, "tenants.yaml")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(tenants, "acme: free\n")
	limits := filepath.Join(dir, "limits.yaml")
	write(limits, `tenant: {source: header, header: x-tenant-id}
plans:
  free: {tokens: {limit: 100, period: minute}}
  pro: {tokens: {limit: 1000, period: minute}}
tenant_plans: {default: free, file: tenants.yaml}
rules: [{name: per-tenant, per: [tenant], limits_from: plan}]
`)
	s, err := New(Options{GRPCAddr: "127.0.0.1:0", ConfigPath: limits, MaxRecvBytes: 1 << 20, DrainTimeout: time.Second}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	planOf := func(tenant string) string { return s.Filter().Policy().Config.PlanOf(tenant).Name }
	// until rewrites the file (with a counter, so that each write is a change) until cond holds:
	// the watcher may start after the first write, and reads the file it finds then as current.
	until := func(content string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for n := 0; !cond(); n++ {
			if time.Now().After(deadline) {
				t.Fatalf("the service never followed %q", content)
			}
			write(tenants, fmt.Sprintf("%s# write %d\n", content, n))
			time.Sleep(150 * time.Millisecond)
		}
	}
	until("acme: pro\nglobex: pro\n", func() bool { return planOf("acme") == "pro" && planOf("globex") == "pro" })
	rejected := func() float64 {
		var m dto.Metric
		if err := s.reloads.WithLabelValues("rejected").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := rejected()
	until("acme: gold\n", func() bool { return rejected() > before })
	if planOf("acme") != "pro" || planOf("globex") != "pro" {
		t.Errorf("a rejected file changed the plans: acme %s, globex %s", planOf("acme"), planOf("globex"))
	}
}
