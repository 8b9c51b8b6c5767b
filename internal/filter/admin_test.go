package filter

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
)

// Select names exactly the buckets Explain finds for a request of the same provider, model,
// tenant and priority: the fixtures' requests, each through both.
func TestSelectMatchesExplain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	files, err := filepath.Glob("testdata/requests/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	// models is an unpriced API, counted by requests alone; route_limit's rule is its route's
	// (context_extensions): neither is the file's rules for the model.
	skip := map[string]bool{"models": true, "route_limit": true}
	compared := 0
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".json")
		if skip[name] {
			continue
		}
		x, err := e.f.Explain(loadRequest(t, name))
		if err != nil || len(x.Buckets) == 0 {
			continue // refused before any rule, or no rule: nothing to select
		}
		tag, sel := e.f.Select(Selector{Provider: x.Estimate.ProviderName(), Model: x.Estimate.Model, Tenant: x.Tenant, Priority: x.Priority})
		if tag != x.Tag {
			t.Errorf("%s: tag %q, Explain's %q", name, tag, x.Tag)
		}
		var want, got []bucket.Spec
		for _, b := range x.Buckets {
			b.Cost, b.Floor = 0, 0
			want = append(want, b)
		}
		for _, s := range sel {
			got = append(got, s.Spec)
		}
		zones := cmp.Comparer(func(a, b *time.Location) bool { return a.String() == b.String() })
		if diff := cmp.Diff(want, got, zones); diff != "" {
			t.Errorf("%s: Select differs from Explain (-explain +select):\n%s", name, diff)
		}
		compared++
	}
	if compared < 3 {
		t.Fatalf("only %d fixtures compared", compared)
	}
}

// Select's rule filter, scopes and kinds, and Peek and Reset through the Breaker.
func TestSelectPeekReset(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
rules:
  - name: per-tenant
    match: {provider: openai, model: "gpt-4o*"}
    per: [tenant, model]
    tokens: {limit: 1000, period: minute}
    requests: {limit: 10, period: minute}
    max_concurrent: 3
  - name: provider-wide
    match: {provider: openai}
    tokens: {limit: 5000, period: minute}
`, Options{})
	_, all := e.f.Select(Selector{Provider: "openai", Model: "gpt-4o", Tenant: "team-a"})
	if len(all) != 4 {
		t.Fatalf("selected %d buckets, want 4: %+v", len(all), all)
	}
	_, sel := e.f.Select(Selector{Provider: "openai", Model: "gpt-4o", Tenant: "team-a", Rule: "per-tenant"})
	want := []struct{ kind, period string }{{"tokens", "per minute"}, {"requests", "per minute"}, {"concurrent requests", "in flight"}}
	if len(sel) != len(want) {
		t.Fatalf("rule per-tenant: %d buckets, want %d: %+v", len(sel), len(want), sel)
	}
	for i, w := range want {
		if sel[i].Rule != "per-tenant" || sel[i].Kind != w.kind || sel[i].Period != w.period || !cmp.Equal(sel[i].Per, []string{"model", "tenant"}) {
			t.Errorf("bucket %d: %+v, want %s %s per model, tenant", i, sel[i], w.kind, w.period)
		}
	}
	if _, none := e.f.Select(Selector{Provider: "anthropic", Model: "claude", Tenant: "team-a"}); len(none) != 0 {
		t.Fatalf("another provider selected %+v", none)
	}

	ctx := context.Background()
	br := NewBreaker(e.store, BreakerOptions{})
	specs := make([]bucket.Spec, len(sel))
	for i := range sel {
		specs[i] = sel[i].Spec
	}
	take := specs[0]
	take.Cost = 400
	if _, err := e.store.Take(ctx, &bucket.Request{Tag: "openai", Buckets: []bucket.Spec{take}}); err != nil {
		t.Fatal(err)
	}
	got, err := br.Peek(ctx, "openai", specs)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Remaining != 600 || got[1].Remaining != 10 || got[2].Remaining != 3 {
		t.Fatalf("peek through the breaker: %+v, want 600, 10, 3", got)
	}
	if err := br.Reset(ctx, "openai", specs); err != nil {
		t.Fatal(err)
	}
	if got, err = br.Peek(ctx, "openai", specs[:1]); err != nil || got[0].Remaining != 1000 {
		t.Fatalf("after a reset: %+v %v, want 1000", got, err)
	}
	if _, err := NewBreaker(limiterOnly{e.store}, BreakerOptions{}).Peek(ctx, "openai", specs); err != ErrNoInspector {
		t.Fatalf("a store without Peek: %v, want ErrNoInspector", err)
	}
}

// limiterOnly hides every method of a store but the Limiter's.
type limiterOnly struct{ Limiter }
