package filter

import (
	"context"
	"errors"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// Inspector reads and resets buckets for an operator (the admin API), beside the decisions:
// bucket.Redis and bucket.Memory implement it, and Breaker passes it through to its store.
type Inspector interface {
	// Peek reads every bucket of specs under tag without writing anything.
	Peek(ctx context.Context, tag string, specs []bucket.Spec) ([]bucket.Snapshot, error)
	// Reset makes every bucket of specs under tag full.
	Reset(ctx context.Context, tag string, specs []bucket.Spec) error
}

// ErrNoInspector is Breaker's Peek and Reset in front of a store that cannot do them.
var ErrNoInspector = errors.New("filter: the store cannot peek or reset buckets")

// Selector names the buckets of one scope: those a request of Tenant for Model of Provider
// would debit. Rule, when set, keeps that rule's alone.
type Selector struct {
	Provider, Model, Tenant string
	// Priority is the request's priority class; "" is priority.default.
	Priority string
	// Plan names the plan of limits_from: plan rules; "" is the tenant's (tenant_plans).
	Plan string
	Rule string
}

// Selected is one bucket of a Selector, with what it belongs to.
type Selected struct {
	// Rule is the rule's name.
	Rule string
	// Kind is what the bucket counts ("tokens", "requests", "input tokens", "concurrent
	// requests"); Window the index of the window among the dimension's (0 for the first).
	Kind   string
	Window uint8
	// Per lists the scopes the bucket is kept per ("provider", "model", "tenant",
	// "priority"); empty when one bucket is shared by every request of the rule.
	Per []string
	// Period describes the period ("per minute", "per day (UTC)", "in flight").
	Period string
	// Shadow: the rule is only counted (shadow: true, or global shadow mode).
	Shadow bool
	// Spec is the bucket, cost zero.
	Spec bucket.Spec
}

// Select lists the buckets that a request of sel would debit under the policy in force, from
// the file's rules that match its provider, model, tenant and priority, in the order a decision
// lists them, and the hash tag they are kept under. A rule that also matches on host or path is
// included, as for a request to those; the rules of a route's context_extensions are not
// (they are no part of the file). It reads no store and is safe for concurrent use.
func (f *Filter) Select(sel Selector) (tag string, out []Selected) {
	cfg := f.policy.Load().Config
	prov, model, tenant, priority := sel.Provider, sel.Model, sel.Tenant, sel.Priority
	if tenant == "" {
		tenant = cfg.File.Tenant.Default
	}
	if priority == "" {
		priority = cfg.File.Priority.Default
	}
	plan := cfg.PlanOf(tenant)
	if sel.Plan != "" {
		plan = cfg.PlanNamed(sel.Plan)
	}
	for _, rule := range cfg.Rules {
		if sel.Rule != "" && rule.Name != sel.Rule {
			continue
		}
		if !rule.Provider.Match(prov) || !rule.Model.Match(model) || !rule.Tenant.Match(tenant) || !rule.Priority.Match(priority) {
			continue
		}
		limits, shared := rule.Limits, rule.SharedSlots() >= 2
		if rule.FromPlan {
			if plan == nil {
				continue
			}
			limits, shared = plan.Limits, true
		}
		per := rule.Per.Names()
		shadow := rule.Shadow || cfg.File.Shadow
		// As plan does: the first windows' token buckets first, together in one key.
		for pass := range 2 {
			for i := range limits {
				l := &limits[i]
				inPair := shared && l.Window == 0 && l.Algorithm == bucket.TokenBucket
				if inPair != (pass == 0) {
					continue
				}
				kind := reservation.KindOf(l.Dim)
				var s bucket.Spec
				if inPair {
					s = l.Spec(bucketName(rule, kindPair, 0, prov, model, tenant, priority), 0, 0)
					s.Slot = slotOf(l.Dim)
				} else {
					s = l.Spec(bucketName(rule, kind, l.Window, prov, model, tenant, priority), 0, 0)
				}
				out = append(out, Selected{Rule: rule.Name, Kind: kindName(kind), Window: l.Window, Per: per,
					Period: periodName(&l.Limit), Shadow: shadow, Spec: s})
			}
		}
		if c := rule.Concurrent; c != nil {
			out = append(out, Selected{Rule: rule.Name, Kind: kindName(reservation.KindConcurrency), Per: per,
				Period: periodName(c), Shadow: shadow,
				Spec: c.Spec(bucketName(rule, reservation.KindConcurrency, 0, prov, model, tenant, priority), 0, 0)})
		}
	}
	return prov, out
}
