package filter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
)

// plansOf is a tenant_plans.file of n tenants, every tenth (shifted by shift) on pro.
func plansOf(n, shift int) []byte {
	var b strings.Builder
	b.Grow(n * 24)
	for i := range n {
		plan := "free"
		if (i+shift)%10 == 0 {
			plan = "pro"
		}
		fmt.Fprintf(&b, "tenant-%06d: %s\n", i, plan)
	}
	return []byte(b.String())
}

// Reassigning 50,000 tenants while decisions run: every check is answered, the new plans apply
// from the next decision, and the checks during the reloads stay fast (their p99 is logged next
// to the one without reloads; go test -v -run TestPlansReloadUnderLoad).
func TestPlansReloadUnderLoad(t *testing.T) {
	dir := t.TempDir()
	const n = 50_000
	if err := os.WriteFile(filepath.Join(dir, "tenants.yaml"), plansOf(n, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	limits := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(limits, []byte(`
tenant: {source: header, header: x-tenant-id}
plans:
  free: {tokens: {limit: 1000000, period: minute}}
  pro: {tokens: {limit: 100000000, period: minute}}
tenant_plans: {default: free, file: tenants.yaml}
rules:
  - {name: per-tenant, per: [tenant], limits_from: plan}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c, err := config.Load(limits)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded the limits file with %d tenants in %v", c.Assigned(), time.Since(start))
	e := newEnv(t, "rules: [{name: x, tokens: {limit: 1, period: second}}]", Options{})
	e.f.SetPolicy(&Policy{Config: c, Estimator: e.f.Policy().Estimator})

	var reloading atomic.Bool
	var mu sync.Mutex
	var quiet, during []time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			var q, d []time.Duration
			for i := w; ; i += 7 {
				select {
				case <-stop:
					mu.Lock()
					quiet, during = append(quiet, q...), append(during, d...)
					mu.Unlock()
					return
				default:
				}
				req := withIdentity("", fmt.Sprintf("tenant-%06d", i%n))
				r := reloading.Load()
				t0 := time.Now()
				resp, err := e.f.Check(context.Background(), req)
				took := time.Since(t0)
				if err != nil || decision(resp) != decisionAllowed {
					failed.Add(1)
				}
				if r && reloading.Load() {
					d = append(d, took)
				} else if !r {
					q = append(q, took)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	reloading.Store(true)
	var reloads []time.Duration
	for i := 1; i <= 6; i++ {
		data := plansOf(n, i)
		t0 := time.Now()
		err := e.f.UpdatePolicy(func(p *Policy) (*Policy, error) {
			c, err := p.Config.WithAssignments(data)
			if err != nil {
				return nil, err
			}
			return &Policy{Config: c, Estimator: p.Estimator}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		reloads = append(reloads, time.Since(t0))
		// The next decision is on the new plan.
		x, err := e.f.Explain(withIdentity("", fmt.Sprintf("tenant-%06d", 10-i)))
		if err != nil || x.Plan != "pro" {
			t.Fatalf("reload %d: tenant-%06d on %q, %v", i, 10-i, x.Plan, err)
		}
	}
	reloading.Store(false)
	close(stop)
	wg.Wait()
	if failed.Load() > 0 {
		t.Errorf("%d checks failed", failed.Load())
	}
	if len(quiet) < 100 || len(during) < 100 {
		t.Fatalf("%d checks without reloads, %d during: too few to measure", len(quiet), len(during))
	}
	p := func(d []time.Duration, q float64) time.Duration {
		slices.Sort(d)
		return d[int(float64(len(d)-1)*q)]
	}
	t.Logf("reloads of %d tenants: %v", n, reloads)
	t.Logf("checks without reloads: %d, p50 %v, p99 %v", len(quiet), p(quiet, 0.5), p(quiet, 0.99))
	t.Logf("checks during reloads:  %d, p50 %v, p99 %v, max %v", len(during), p(during, 0.5), p(during, 0.99), p(during, 1))
	// The durations are logged, not gated: on a shared machine under the race detector an
	// absolute bound measures the machine (go test -v -run TestPlansReloadUnderLoad prints them).
}
