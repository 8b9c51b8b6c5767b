package filter

import (
	"strconv"
	"strings"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// A bucket's kind is what it counts: the letters of the reservation (reservation.KindTokens,
// KindRequests, KindConcurrency: a rule's in-flight cap), which bucket names carry too. kindPair
// names a rule's tokens and requests buckets when both are token buckets: they share one name,
// in slots 1 and 2 of one stored key (bucket.Spec.Slot).
const kindPair = 'b'

// owner says which rule and amount a bucket of a plan belongs to.
type owner struct {
	rule *config.Rule
	kind byte
}

// plan is the set of buckets one request debits, with what is needed to explain the answer.
type plan struct {
	enforced bucket.Request
	shadow   bucket.Request
	owners   []owner // parallel to enforced.Buckets
	rules    []*config.Rule
	tenant   string
	priority string
	floor    float64
	// logClearTenant: the metadata names the tenant itself, not its hash (tenant.log: clear).
	logClearTenant bool
	// shadowAll is true in global shadow mode: enforced buckets are counted, never enforced.
	shadowAll     bool
	shadowOutcome bucket.Outcome
	local         bool
	result        bucket.Result
	// debited is true once the shared store debited the enforced buckets (the reservation).
	debited bool
	// own: the request carried the operator's own credential (request.own).
	own bool
	// Room for the common plan (one rule of two buckets), so that building it allocates
	// nothing but the plan itself.
	bucketsBuf [2]bucket.Spec
	ownersBuf  [2]owner
	rulesBuf   [1]*config.Rule
}

// plan finds the rules that apply to r and the buckets they debit.
func (f *Filter) plan(p *Policy, r *request, est *tokens.Estimate) *plan {
	cfg := p.Config
	pl := &plan{tenant: r.tenant, priority: r.priority, floor: r.floor, shadowAll: cfg.File.Shadow, own: r.own,
		logClearTenant: cfg.LogClearTenant}
	pl.enforced.Buckets, pl.owners, pl.rules = pl.bucketsBuf[:0], pl.ownersBuf[:0], pl.rulesBuf[:0]
	provider := est.Provider.String()
	pl.enforced.Tag = provider
	pl.shadow.Tag = provider
	consider := func(rule *config.Rule) {
		if !rule.Provider.Match(provider) || !rule.Model.Match(est.Model) || !rule.Path.Match(r.path) ||
			!rule.Tenant.Match(r.tenant) || !rule.Priority.Match(r.priority) {
			return
		}
		pl.rules = append(pl.rules, rule)
		target := &pl.enforced
		if rule.Shadow && !pl.shadowAll {
			target = &pl.shadow
		}
		// The smallest max_wait of the matching rules applies: a rule without one never holds.
		if len(target.Buckets) == 0 || rule.MaxWait < target.MaxWait {
			target.MaxWait = rule.MaxWait
		}
		name := func(kind byte) string { return bucketName(rule, kind, provider, est.Model, r.tenant, r.priority) }
		// A rule's tokens and requests token buckets share a key, in slots 1 and 2: one key to
		// read and write for both, under one name.
		var tokensName, requestsName string
		var tokensSlot, requestsSlot uint8
		if rule.Tokens != nil && rule.Requests != nil &&
			rule.Tokens.Algorithm == bucket.TokenBucket && rule.Requests.Algorithm == bucket.TokenBucket {
			tokensName = name(kindPair)
			requestsName, tokensSlot, requestsSlot = tokensName, 1, 2
		}
		if rule.Tokens != nil {
			if tokensName == "" {
				tokensName = name(reservation.KindTokens)
			}
			// A hostile max_tokens may price above any store's range: capped, it still can never
			// fit (413), where the raw cost would be an invalid request (503, and a store failure).
			s := rule.Tokens.Spec(tokensName, min(est.Cost(), bucket.MaxAmount), r.floor)
			s.Slot = tokensSlot
			target.Buckets = append(target.Buckets, s)
			if target == &pl.enforced {
				pl.owners = append(pl.owners, owner{rule, reservation.KindTokens})
			}
		}
		if rule.Requests != nil {
			if requestsName == "" {
				requestsName = name(reservation.KindRequests)
			}
			s := rule.Requests.Spec(requestsName, 1, r.floor)
			s.Slot = requestsSlot
			target.Buckets = append(target.Buckets, s)
			if target == &pl.enforced {
				pl.owners = append(pl.owners, owner{rule, reservation.KindRequests})
			}
		}
		if rule.Concurrent != nil {
			// A shadow rule only peeks at its in-flight count: a lease would need a release.
			cost := int64(1)
			if target == &pl.shadow {
				cost = 0
			}
			target.Buckets = append(target.Buckets, rule.Concurrent.Spec(name(reservation.KindConcurrency), cost, r.floor))
			if target == &pl.enforced {
				pl.owners = append(pl.owners, owner{rule, reservation.KindConcurrency})
			}
		}
	}
	if r.route != nil && r.route.Rule != nil {
		consider(r.route.Rule)
	}
	if r.route == nil || !r.route.SkipFileRules {
		for _, rule := range cfg.Rules {
			consider(rule)
		}
	}
	if pl.shadowAll {
		pl.enforced.MaxWait = 0
	}
	pl.shadow.MaxWait = 0
	return pl
}

// bucketName is the bucket's identity: the rule, the amount (kind; kindPair for the tokens and
// requests together, told apart by their slots) and the scope values the rule is kept per.
// Values are length-prefixed so that no tenant or model can forge another bucket's name; the
// store escapes or hashes the whole name into its key.
func bucketName(rule *config.Rule, kind byte, provider, model, tenant, priority string) string {
	var b strings.Builder
	b.Grow(len(rule.Name) + 8 + len(model) + len(tenant) + len(priority) + len(provider))
	b.WriteString(rule.Name)
	b.WriteByte(':')
	b.WriteByte(kind)
	part := func(tag byte, v string) {
		b.WriteByte('|')
		b.WriteByte(tag)
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	if rule.Per&config.PerProvider != 0 {
		part('p', provider)
	}
	if rule.Per&config.PerModel != 0 {
		part('m', model)
	}
	if rule.Per&config.PerTenant != 0 {
		part('t', tenant)
	}
	if rule.Per&config.PerPriority != 0 {
		part('c', priority)
	}
	return b.String()
}

// ruleNames lists the applied rules for logs and metadata.
func (pl *plan) ruleNames() string {
	switch len(pl.rules) {
	case 0:
		return ""
	case 1:
		return pl.rules[0].Name
	}
	names := make([]string, len(pl.rules))
	for i, r := range pl.rules {
		names[i] = r.Name
	}
	return strings.Join(names, ",")
}

// blocking names the limit that decided a denial ("" when none), like "openai-per-model tokens".
func (pl *plan) blocking() string {
	i := pl.result.Blocking
	if pl.result.Outcome == bucket.Allowed || pl.result.Outcome == bucket.Delayed || i < 0 || i >= len(pl.owners) {
		return ""
	}
	o := pl.owners[i]
	return o.rule.Name + " " + kindName(o.kind)
}

func kindName(k byte) string {
	switch k {
	case reservation.KindRequests:
		return "requests"
	case reservation.KindConcurrency:
		return "concurrent requests"
	}
	return "tokens"
}

// periodName describes a limit's period for messages: "per minute", "per 90s", "per day (UTC)".
func periodName(l *config.Limit) string {
	if l.Algorithm == bucket.Concurrency {
		return "in flight"
	}
	if l.Algorithm == bucket.Quota {
		if l.Calendar == bucket.Month {
			return "per month (UTC)"
		}
		return "per day (UTC)"
	}
	switch l.Period {
	case time.Second:
		return "per second"
	case time.Minute:
		return "per minute"
	case time.Hour:
		return "per hour"
	case 24 * time.Hour:
		return "per day"
	}
	return "per " + l.Period.String()
}

// headline returns, for one kind, the state of the bucket with the least remaining: what the
// x-ratelimit headers report, as OpenAI reports its single limit.
func (pl *plan) headline(res *bucket.Result, kind byte) (bucket.State, bool) {
	var best bucket.State
	found := false
	for i, o := range pl.owners {
		if o.kind != kind || i >= len(res.Buckets) {
			continue
		}
		s := res.Buckets[i]
		if !found || s.Remaining < best.Remaining {
			best, found = s, true
		}
	}
	return best, found
}
