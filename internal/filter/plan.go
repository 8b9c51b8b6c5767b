package filter

import (
	"strconv"
	"strings"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// A bucket's kind is what it counts: the letters of the reservation (reservation.KindTokens,
// KindInput, KindOutput, KindRequests, KindConcurrency: a rule's in-flight cap), which bucket
// names carry too. kindPair names the token buckets of a rule's dimensions' first windows when
// there are two or more: they share one name, each in its slot of one stored key
// (bucket.Spec.Slot, slotOf).
const kindPair = 'b'

// slotOf is the slot of dimension d's first window in a rule's shared key: tokens and requests
// keep slots 1 and 2 (the keys of rules that limit only those are unchanged), input and output
// tokens take 3 and 4.
func slotOf(d provider.Dimension) uint8 {
	switch d {
	case provider.Tokens:
		return 1
	case provider.Requests:
		return 2
	case provider.InputTokens:
		return 3
	}
	return 4
}

// owner says which rule, limit and window a bucket of a plan belongs to.
type owner struct {
	rule   *config.Rule
	lim    *config.Limit
	kind   byte
	window uint8
}

// plan is the set of buckets one request debits, with what is needed to explain the answer.
type plan struct {
	enforced bucket.Request
	shadow   bucket.Request
	owners   []owner // parallel to enforced.Buckets
	// shadowOwners is parallel to shadow.Buckets.
	shadowOwners []owner
	rules        []*config.Rule
	// tenantPlan is the tenant's plan when a rule with limits_from: plan applied, else nil.
	tenantPlan *config.Plan
	tenant     string
	priority   string
	floor      float64
	// logClearTenant: the metadata names the tenant itself, not its hash (tenant.log: clear).
	logClearTenant bool
	// shadowAll is true in global shadow mode: enforced buckets are counted, never enforced.
	shadowAll bool
	// shadowOutcome and shadowBlocking are the shadow buckets' take (shadowBlocking indexes
	// shadowOwners); shadowFailed: the store did not answer it (in global shadow mode, the
	// enforced take).
	shadowOutcome  bucket.Outcome
	shadowBlocking int
	shadowFailed   bool
	local          bool
	result         bucket.Result
	// decided is when the shared store answered the enforced buckets' take (zero before).
	decided time.Time
	// debited is true once the shared store debited the enforced buckets (the reservation).
	debited bool
	// own: the request carried the operator's own credential (request.own); bare: the answers
	// carry no rate-limit headers and no denial body (Options.Bare).
	own, bare bool
	// path is the request's, without the query string; rid the reservation's id for the
	// decision log ("" when it is off or nothing was reserved).
	path, rid string
	// prof is how the request's provider counts it; cost what it counts in each dimension.
	prof provider.Profile
	cost costs
	// learnedCost is cost with the learned output reserved instead of the request's maximum,
	// for the rules with reserve_output: learned, once learned (nil before: allocated only for
	// such requests); learnOutput: some rule reserves it, so the response path records the
	// completion's tokens.
	learnedCost *costs
	learnOutput bool
	// clock is the filter's (Options.Now), for the answers' reset instants.
	clock func() time.Time
	// price is the model's price when a cost limit applies (nil otherwise: the configuration's
	// entry, immutable); unpriced is the first enforced rule with a cost limit that found no
	// price for the model: the request is refused (unpricedResponse), never counted as free.
	price    *price.Price
	unpriced *config.Rule
	// Room for the common plans (one rule of up to four buckets), so that building them
	// allocates nothing but the plan itself.
	bucketsBuf [4]bucket.Spec
	ownersBuf  [4]owner
	shadowBuf  [4]owner
	rulesBuf   [1]*config.Rule
}

// plan finds the rules that apply to r and the buckets they debit.
func (f *Filter) plan(p *Policy, r *request, est *tokens.Estimate) *plan {
	cfg := p.Config
	pl := &plan{tenant: r.tenant, priority: r.priority, floor: r.floor, shadowAll: cfg.File.Shadow, own: r.own, path: r.path,
		logClearTenant: cfg.LogClearTenant, clock: f.opts.Now, bare: f.opts.Bare}
	pl.enforced.Buckets, pl.owners, pl.rules = pl.bucketsBuf[:0], pl.ownersBuf[:0], pl.rulesBuf[:0]
	pl.shadowOwners = pl.shadowBuf[:0]
	pl.prof = dialects.Of(est.Provider).Profile(est.Provider, est.Model)
	prov := est.ProviderName()
	cfg.Apply(&pl.prof, prov, est.Model)
	pl.cost = charge(&pl.prof, est)
	// An unpriced API of a provider, and a request of no provider under unknown: requests_only,
	// take no token budget: request limits alone count them.
	requestsOnly := est.API == provider.Unpriced ||
		(est.Provider == provider.Unknown && cfg.Unknown == config.UnknownRequestsOnly)
	if requestsOnly {
		pl.cost = costs{provider.Requests: 1} // and its metadata says it took no token
	}
	pl.enforced.Tag = prov
	pl.shadow.Tag = prov
	name := func(rule *config.Rule, kind byte, window uint8) string {
		return bucketName(rule, kind, window, prov, est.Model, r.tenant, r.priority)
	}
	host := ""
	consider := func(rule *config.Rule) {
		if !rule.Host.Any() {
			if host == "" {
				host = requestHost(r.in.Host)
			}
			if !rule.Host.Match(host) {
				return
			}
		}
		if !rule.Provider.Match(prov) || !rule.Model.Match(est.Model) || !rule.Path.Match(r.path) ||
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
		// A rule with limits_from: plan applies the tenant's plan's limits; its first-window token
		// buckets always share one key, a slot per dimension, whichever of them the plan has, so
		// that a tenant moving to another plan keeps each bucket (the store takes the capacity
		// and the rate with every call: the new plan's apply to what the tenant has spent).
		limits := rule.Limits
		shared := rule.SharedSlots() >= 2
		if rule.FromPlan {
			if r.plan == nil {
				return
			}
			limits, shared = r.plan.Limits, true
			pl.tenantPlan = r.plan
		}
		add := func(s bucket.Spec, o owner) {
			target.Buckets = append(target.Buckets, s)
			if target == &pl.enforced {
				pl.owners = append(pl.owners, o)
			} else {
				pl.shadowOwners = append(pl.shadowOwners, o)
			}
		}
		// The first window of each dimension, when a token bucket, shares one key with the
		// rule's others (slots 1 to 4): one key to read and write for all, under one name. They
		// go first, next to each other, as the store wants them.
		learned := rule.LearnedOutput && !requestsOnly && f.learnOutput(pl, est, rule)
		var pairName string
		for pass := range 2 {
			for i := range limits {
				l := &limits[i]
				if requestsOnly && l.Dim != provider.Requests {
					continue
				}
				inPair := shared && l.Window == 0 && l.Algorithm == bucket.TokenBucket
				if inPair != (pass == 0) {
					continue
				}
				if l.Dim == provider.Cost && !pl.spend(cfg, prov, est) {
					if target == &pl.enforced && pl.unpriced == nil {
						pl.unpriced = rule
					}
					continue
				}
				kind := reservation.KindOf(l.Dim)
				cost := pl.cost[l.Dim]
				if learned {
					cost = (*pl.learnedCost)[l.Dim]
				}
				var s bucket.Spec
				if inPair {
					if pairName == "" {
						pairName = name(rule, kindPair, 0)
					}
					s = l.Spec(pairName, cost, r.floor)
					s.Slot = slotOf(l.Dim)
				} else {
					s = l.Spec(name(rule, kind, l.Window), cost, r.floor)
				}
				add(s, owner{rule: rule, lim: &l.Limit, kind: kind, window: l.Window})
			}
		}
		if rule.Concurrent != nil {
			// A shadow rule only peeks at its in-flight count: a lease would need a release.
			cost := int64(1)
			if target == &pl.shadow {
				cost = 0
			}
			add(rule.Concurrent.Spec(name(rule, reservation.KindConcurrency, 0), cost, r.floor),
				owner{rule: rule, lim: rule.Concurrent, kind: reservation.KindConcurrency})
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

// spend prices the request in money once, for the first cost limit that applies: the most it
// can cost (maxSpend) becomes its cost in the Cost dimension. It reports whether the model has
// a price.
func (pl *plan) spend(cfg *config.Config, prov string, est *tokens.Estimate) bool {
	if pl.price == nil && pl.unpriced == nil {
		p, ok := cfg.PriceOf(prov, est.Model)
		if !ok {
			return false
		}
		pl.price = p
		pl.cost[provider.Cost] = maxSpend(p, est)
	}
	return pl.price != nil
}

// requestHost is the host name rules match (match.host): the authority without its port and
// final dot, lower case. It allocates only for a name with upper-case letters.
func requestHost(authority string) string {
	return strings.ToLower(provider.HostName(authority))
}

// bucketName is the bucket's identity: the rule, the amount (kind; kindPair for the first
// windows together, told apart by their slots; a later window's index after the kind) and the
// scope values the rule is kept per. Values are length-prefixed so that no tenant or model can
// forge another bucket's name; the store escapes or hashes the whole name into its key.
func bucketName(rule *config.Rule, kind byte, window uint8, provider, model, tenant, priority string) string {
	var b strings.Builder
	b.Grow(len(rule.Name) + 10 + len(model) + len(tenant) + len(priority) + len(provider))
	b.WriteString(rule.Name)
	b.WriteByte(':')
	b.WriteByte(kind)
	if window > 0 {
		b.WriteString(strconv.Itoa(int(window)))
	}
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

// kindName names what a bucket of kind k counts, in a message or a metric label ("output
// tokens").
func kindName(k byte) string {
	if d, ok := reservation.Dimension(k); ok {
		return d.Words()
	}
	return "concurrent requests"
}

// periodName describes a limit's period for messages: "per minute", "per 90s", "per 7 days",
// "per day (UTC)", "per day (America/Los_Angeles)".
func periodName(l *config.Limit) string {
	if l.Algorithm == bucket.Concurrency {
		return "in flight"
	}
	if l.Algorithm == bucket.Quota {
		zone := "UTC"
		if l.Zone != nil {
			zone = l.Zone.String()
		}
		if l.Calendar == bucket.Month {
			return "per month (" + zone + ")"
		}
		return "per day (" + zone + ")"
	}
	return "per " + windowName(l.Period)
}

// windowName names a period of time: "minute", "90s", "7 days".
func windowName(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == time.Second:
		return "second"
	case d == time.Minute:
		return "minute"
	case d == time.Hour:
		return "hour"
	case d == day:
		return "day"
	case d > day && d%day == 0:
		return strconv.FormatInt(int64(d/day), 10) + " days"
	}
	return d.String()
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
