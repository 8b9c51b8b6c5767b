package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
)

// Config is a validated configuration with its derived values precomputed. It is immutable and
// safe for concurrent use.
type Config struct {
	// File is the configuration as decoded, defaults applied.
	File File
	// Rules are the compiled rules, in file order.
	Rules []*Rule
	// Classes maps a priority class to its floor, the default class included.
	Classes map[string]float64
	// DefaultFloor is the floor of the default priority class.
	DefaultFloor float64
	// Own recognises the operator's own provider credentials (credentials).
	Own *OwnCredentials
	// Feedback is true when some rule has provider_feedback.
	Feedback bool
	// TenantClasses are priority.tenants compiled, in file order.
	TenantClasses []TenantClassRule
	// LogClearTenant: the answer's metadata names the tenant itself, not its hash (tenant.log).
	LogClearTenant bool
	// TenantSource is tenant.source; TenantHeader is tenant.header, lower case, when it is
	// TenantFromHeader, else "".
	TenantSource TenantSource
	TenantHeader string
	// FailureMode is failure.mode.
	FailureMode FailureMode
	// Learn is pricing.learn as internal/learn's policy; LearnEnabled is pricing.learn.enabled.
	Learn        learn.Policy
	LearnEnabled bool
	// RefuseUnreadable: pricing.unreadable.policy is refuse (else bound).
	RefuseUnreadable bool
	// Accounting are the accounting overrides, in file order (Apply).
	Accounting []Accounting
	// Unknown is the policy for requests that are no known provider's API (unknown).
	Unknown UnknownPolicy
	// JWTPayload is jwt.payload_in_metadata: the field of the jwt_authn namespace holding a
	// verified token's payload.
	JWTPayload string
	// TenantClaim is tenant.claim with TenantFromClaim.
	TenantClaim ClaimPath
	// DenyUnidentified: a request without its identity is refused (tenant.missing: deny).
	DenyUnidentified bool
	// PrioritySource is priority.source; PriorityClaim its claim with PriorityFromClaim;
	// PrincipalClasses are priority.principals compiled, in file order.
	PrioritySource   PrioritySource
	PriorityClaim    ClaimPath
	PrincipalClasses []PrincipalClassRule
	// Plans are the compiled plans by name; DefaultPlan is tenant_plans.default's (nil without
	// plans).
	Plans       map[string]*Plan
	DefaultPlan *Plan
	// PlanSource is tenant_plans.source; PlanClaim its claim with PlanFromClaim.
	PlanSource PlanSource
	PlanClaim  ClaimPath
	// PlansFile is tenant_plans.file's path ("" when none), relative to the working directory.
	PlansFile string
	// UsesPlans: some rule has limits_from: plan.
	UsesPlans bool
	// Source is the name the limits file was parsed under (its path, or "embedded example"),
	// and SHA256 the hex SHA-256 of its bytes: the version in force. A reload of
	// tenant_plans.file keeps both.
	Source, SHA256 string
	// Prices is the price table: the file's prices, then the default table's (PriceOf).
	Prices []PriceEntry
	// Hosts finds the provider the file declares (providers) for a request's host; never nil
	// once compiled (it may hold no host).
	Hosts *provider.Hosts

	// assigned maps a tenant to its plan: tenant_plans.table and tenant_plans.file.
	assigned map[string]*Plan
	// keySalt is the secret of KeyTenant (tenant.source: api_key).
	keySalt []byte
	// declared are the providers the file declares, by name; declaredNames their names in file
	// order, for messages.
	declared      map[string]*provider.Declared
	declaredNames []string
}

// UnknownPolicy is what a request that is no known provider's API gets (unknown).
type UnknownPolicy uint8

const (
	UnknownAllow        UnknownPolicy = iota // the rules that match decide; priced as raw text
	UnknownRequestsOnly                      // only request limits count it
	UnknownDeny                              // refused with a 403
)

var unknownPolicies = map[string]UnknownPolicy{"allow": UnknownAllow, "requests_only": UnknownRequestsOnly, "deny": UnknownDeny}

// String is the policy as the file spells it.
func (u UnknownPolicy) String() string {
	switch u {
	case UnknownRequestsOnly:
		return "requests_only"
	case UnknownDeny:
		return "deny"
	}
	return "allow"
}

// TenantSource is where a request's tenant comes from (tenant.source).
type TenantSource uint8

const (
	TenantNone                 TenantSource = iota // every request is tenant.default
	TenantFromHeader                               // the header tenant.header
	TenantFromPrincipal                            // the peer's principal (mTLS identity)
	TenantFromContextExtension                     // the route's context_extensions
	TenantFromClaim                                // a claim of the JWT that jwt_authn verified
	TenantFromAPIKey                               // a salted hash of the provider API key
)

var tenantSources = map[string]TenantSource{
	"none": TenantNone, "header": TenantFromHeader, "principal": TenantFromPrincipal, "context_extension": TenantFromContextExtension,
	"claim": TenantFromClaim, "api_key": TenantFromAPIKey,
}

// String is the source as the file spells it.
func (s TenantSource) String() string {
	for name, v := range tenantSources {
		if v == s {
			return name
		}
	}
	return "none"
}

// FailureMode is what a decision does while the shared store cannot decide (failure.mode).
type FailureMode uint8

const (
	FailDeny  FailureMode = iota // deny with 503
	FailAllow                    // allow, unlimited
	FailLocal                    // decide on the replica's share of each limit, in memory
)

var failureModes = map[string]FailureMode{"deny": FailDeny, "allow": FailAllow, "local": FailLocal}

// String is the mode as the file spells it.
func (m FailureMode) String() string {
	switch m {
	case FailAllow:
		return "allow"
	case FailLocal:
		return "local"
	}
	return "deny"
}

// TenantClassRule gives the tenants matching Tenant the class Class, whose floor is Floor.
type TenantClassRule struct {
	Tenant Glob
	Class  string
	Floor  float64
}

// Scope is a set of request attributes a rule's buckets are kept per.
type Scope uint8

const (
	PerProvider Scope = 1 << iota
	PerModel
	PerTenant
	PerPriority
)

var scopeNames = map[string]Scope{"provider": PerProvider, "model": PerModel, "tenant": PerTenant, "priority": PerPriority}

// Names are the scopes of s as the file spells them, in the order bucket names carry them
// (never nil: an empty list for none).
func (s Scope) Names() []string {
	out := []string{}
	for _, n := range [...]struct {
		scope Scope
		name  string
	}{{PerProvider, "provider"}, {PerModel, "model"}, {PerTenant, "tenant"}, {PerPriority, "priority"}} {
		if s&n.scope != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// Rule is a compiled rule.
type Rule struct {
	Name     string
	Provider Glob
	// Host matches the request's host name, lower case, without port and final dot.
	Host     Glob
	Model    Glob
	Path     Glob
	Tenant   Glob
	Priority Glob
	Per      Scope
	// Limits are the rule's budgets, one per window of each dimension: tokens, input_tokens,
	// output_tokens, then requests, each dimension's windows in file order.
	Limits  []DimLimit
	MaxWait time.Duration
	Shadow  bool
	// Concurrent is the in-flight cap (a Concurrency limit whose Period is the lease TTL); nil
	// when the rule has none.
	Concurrent *Limit
	// Feedback: the provider's reports lower the rule's token bucket.
	Feedback bool
	// Refund: the unused part of the rule's token reservation is given back from the usage the
	// response reports.
	Refund bool
	// FromPlan: the rule's limits are each tenant's plan's (limits_from: plan); Limits is empty.
	FromPlan bool
	// AlertAt is the part of the rule's money budget (its cost limit) whose crossing is counted
	// and logged; 0 without a cost limit.
	AlertAt float64
	// LearnedOutput: the rule's token buckets reserve the learned output (reserve_output:
	// learned) instead of max_tokens.
	LearnedOutput bool
}

// DimLimit is one window of one dimension of a rule.
type DimLimit struct {
	Dim provider.Dimension
	// Window is the window's index among the dimension's (0 for the first).
	Window uint8
	Limit
}

// Limit returns the first window of dimension d, nil when the rule does not limit d.
func (r *Rule) Limit(d provider.Dimension) *Limit {
	for i := range r.Limits {
		if r.Limits[i].Dim == d {
			return &r.Limits[i].Limit
		}
	}
	return nil
}

// SharedSlots counts the dimensions whose first window is a token bucket: when two or more,
// they share one stored key, a slot each.
func (r *Rule) SharedSlots() int {
	n := 0
	for i := range r.Limits {
		if r.Limits[i].Window == 0 && r.Limits[i].Algorithm == bucket.TokenBucket {
			n++
		}
	}
	return n
}

// Has reports whether the rule limits dimension d.
func (r *Rule) Has(d provider.Dimension) bool { return r.Limit(d) != nil }

// MaxWindows bounds the windows of one dimension of a rule.
const MaxWindows = 4

// DefaultLeaseTTL is a lease's time to live when a rule names none: envoy.yaml's route timeout.
const DefaultLeaseTTL = 10 * time.Minute

// Limit is a compiled amount: the parameters of one bucket.
type Limit struct {
	Algorithm bucket.Algorithm
	Limit     int64
	Period    time.Duration
	Calendar  bucket.Calendar
	// Zone is a quota's time zone (Amount.Timezone); nil: UTC.
	Zone  *time.Location
	Burst int64
}

// Capacity is the most the bucket can hold.
func (l *Limit) Capacity() int64 {
	if l.Algorithm == bucket.TokenBucket && l.Burst > 0 {
		return l.Burst
	}
	return l.Limit
}

// Spec returns the bucket spec for this limit with the given name and cost.
func (l *Limit) Spec(name string, cost int64, floor float64) bucket.Spec {
	return bucket.Spec{Name: name, Algorithm: l.Algorithm, Limit: l.Limit, Period: l.Period,
		Calendar: l.Calendar, Zone: l.Zone, Burst: l.Burst, Cost: cost, Floor: floor}
}

// Limits of the accepted values, wide enough for any provider tier.
const (
	maxLimit  = 1_000_000_000_000
	minPeriod = time.Second
	maxPeriod = 31 * 24 * time.Hour
)

func (f *File) compile(dir string) (*Config, error) {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}

	source, ok := tenantSources[f.Tenant.Source]
	switch {
	case !ok:
		bad("tenant.source", "%q is not one of none, header, principal, context_extension, claim, api_key", f.Tenant.Source)
	case source == TenantFromHeader && f.Tenant.Header == "":
		bad("tenant.header", "required with tenant.source: header")
	}
	f.Tenant.Header = strings.ToLower(f.Tenant.Header)
	if f.Tenant.Default == "" {
		bad("tenant.default", "must not be empty")
	}
	switch f.Tenant.Log {
	case "hash", "clear":
	default:
		bad("tenant.log", "%q is not hash or clear", f.Tenant.Log)
	}

	c := &Config{Classes: map[string]float64{}, LogClearTenant: f.Tenant.Log == "clear", TenantSource: source}
	if source == TenantFromHeader {
		c.TenantHeader = f.Tenant.Header
	}
	for name, cl := range f.Priority.Classes {
		if cl.Floor < 0 || cl.Floor >= 1 {
			bad("priority.classes."+name+".floor", "%v is not in [0, 1)", cl.Floor)
		}
		c.Classes[name] = cl.Floor
	}
	if _, ok := c.Classes[f.Priority.Default]; !ok {
		bad("priority.default", "%q is not a class under priority.classes", f.Priority.Default)
	}
	c.DefaultFloor = c.Classes[f.Priority.Default]
	for i, tc := range f.Priority.Tenants {
		key := fmt.Sprintf("priority.tenants[%d]", i)
		if tc.Tenant == "" {
			bad(key+".tenant", "must not be empty")
		}
		fl, ok := c.Classes[tc.Class]
		if !ok {
			bad(key+".class", "%q is not a class under priority.classes", tc.Class)
		}
		c.TenantClasses = append(c.TenantClasses, TenantClassRule{Tenant: NewGlob(tc.Tenant), Class: tc.Class, Floor: fl})
	}
	f.Priority.Header = strings.ToLower(f.Priority.Header)
	f.compileIdentity(c, bad)
	errs = append(errs, f.compilePlans(c, dir, bad)...)

	if f.Pricing.DefaultOutputTokens < 0 || f.Pricing.DefaultOutputTokens > maxLimit {
		bad("pricing.default_output_tokens", "%d is out of range", f.Pricing.DefaultOutputTokens)
	}
	for i, m := range f.Pricing.OutputTokens {
		if m.Model == "" {
			bad(fmt.Sprintf("pricing.output_tokens[%d].model", i), "must not be empty")
		}
		if m.Tokens < 0 || m.Tokens > maxLimit {
			bad(fmt.Sprintf("pricing.output_tokens[%d].tokens", i), "%d is out of range", m.Tokens)
		}
	}
	if f.Pricing.MaxRequestBytes <= 0 || f.Pricing.MaxRequestBytes > 1<<30 {
		bad("pricing.max_request_bytes", "%d is not in (0, 1 GiB]", f.Pricing.MaxRequestBytes)
	}
	switch f.Pricing.Unreadable.Policy {
	case "bound":
	case "refuse":
		c.RefuseUnreadable = true
	default:
		bad("pricing.unreadable.policy", "%q is not bound or refuse", f.Pricing.Unreadable.Policy)
	}
	if f.Pricing.Unreadable.OutputTokens < 0 || f.Pricing.Unreadable.OutputTokens > maxLimit {
		bad("pricing.unreadable.output_tokens", "%d is out of range", f.Pricing.Unreadable.OutputTokens)
	}
	if f.Pricing.UnseenContextTokens < 0 || f.Pricing.UnseenContextTokens > maxLimit {
		bad("pricing.unseen_context_tokens", "%d is out of range", f.Pricing.UnseenContextTokens)
	}
	l := &f.Pricing.Learn
	c.LearnEnabled = l.Enabled
	c.Learn = learn.Policy{Quantile: l.Quantile, MinSamples: l.MinSamples, Min: l.MinFactor, Max: l.MaxFactor,
		HalfLife: time.Duration(l.HalfLife)}
	if err := c.Learn.Validate(); err != nil {
		for _, e := range strings.Split(err.Error(), "\n") { // errors.Join's: one problem a line
			bad("pricing.learn", "%s", e)
		}
	}
	switch f.Pricing.FallbackEncoding {
	case "o200k_base", "cl100k_base":
	default:
		bad("pricing.fallback_encoding", "%q is not o200k_base or cl100k_base", f.Pricing.FallbackEncoding)
	}

	if c.Unknown, ok = unknownPolicies[f.Unknown]; !ok {
		bad("unknown", "%q is not one of allow, requests_only, deny", f.Unknown)
	}
	if c.FailureMode, ok = failureModes[f.Failure.Mode]; !ok {
		bad("failure.mode", "%q is not one of deny, allow, local", f.Failure.Mode)
	}
	if f.Failure.Replicas < 1 {
		bad("failure.replicas", "%d must be at least 1", f.Failure.Replicas)
	}
	if f.Response.RetryJitter < 0 || f.Response.RetryJitter > 1 {
		bad("response.retry_jitter", "%v is not in [0, 1]", f.Response.RetryJitter)
	}
	st := &f.Settlement
	if !(st.KeepOnClientError >= 0 && st.KeepOnClientError <= 1) {
		bad("settlement.keep_on_client_error", "%v is not in [0, 1]", st.KeepOnClientError)
	}
	if !(st.UsageFactor == 0 || (st.UsageFactor >= 1 && st.UsageFactor <= 1e6)) {
		bad("settlement.usage_factor", "%v is not 0 (no bound) or in [1, 1000000]", st.UsageFactor)
	}
	if st.MaxUsageTokens < 1 || st.MaxUsageTokens > maxLimit {
		bad("settlement.max_usage_tokens", "%d is not in [1, %d]", st.MaxUsageTokens, int64(maxLimit))
	}
	codings := map[string]bool{}
	for i, e := range st.Decode {
		switch {
		case e != "gzip" && e != "deflate" && e != "br" && e != "zstd":
			bad(fmt.Sprintf("settlement.decode[%d]", i), "%q is not one of gzip, deflate, br, zstd", e)
		case codings[e]:
			bad(fmt.Sprintf("settlement.decode[%d]", i), "%q is listed twice", e)
		}
		codings[e] = true
	}
	if f.MaxHeld < 0 {
		bad("max_held", "%d must not be negative", f.MaxHeld)
	}

	own := compileCredentials(&f.Credentials, bad)
	c.Own = own
	f.compileProviders(c, bad)
	f.compilePrices(c, bad)
	for i := range f.Accounting {
		a, aerrs := compileAccounting(&f.Accounting[i], fmt.Sprintf("accounting[%d]", i), c)
		errs = append(errs, aerrs...)
		c.Accounting = append(c.Accounting, a)
	}
	seen := map[string]int{}
	for i := range f.Rules {
		key := fmt.Sprintf("rules[%d]", i)
		r, err := compileRule(&f.Rules[i], key, c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if r.FromPlan {
			c.UsesPlans = true
			if len(c.Plans) == 0 {
				bad(key+".limits_from", "plan needs plans (and tenant_plans.default)")
			}
			for _, pl := range c.Plans {
				if r.Refund && !planTokenish(pl) {
					bad(key+".refund", "plans.%s has no tokens, input_tokens or output_tokens: refunds give tokens back", pl.Name)
				}
			}
		}
		if j, dup := seen[r.Name]; dup {
			bad(key+".name", "%q is already the name of rules[%d]", r.Name, j)
		}
		seen[r.Name] = i
		c.Rules = append(c.Rules, r)
		if r.Feedback {
			c.Feedback = true
			if !own.Configured() {
				bad(key+".provider_feedback", "needs credentials (sha256, files or injected): only answers to the operator's own credential may correct a bucket")
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.File = *f
	return c, nil
}

// compileRule validates one rule; key is its path for messages. c holds the priority classes
// and the providers compiled before the rules.
func compileRule(r *RuleSpec, key string, c *Config) (*Rule, error) {
	classes := c.Classes
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", key, k, fmt.Sprintf(format, args...)))
	}
	if r.Name == "" {
		bad("name", "must not be empty")
	} else if !validName(r.Name) {
		bad("name", "%q must be 1 to 64 of [A-Za-z0-9._-]", r.Name)
	}
	out := &Rule{
		Name:     r.Name,
		Provider: NewGlob(r.Match.Provider),
		Host:     NewGlob(strings.ToLower(r.Match.Host)),
		Model:    NewGlob(r.Match.Model),
		Path:     NewGlob(r.Match.Path),
		Tenant:   NewGlob(r.Match.Tenant),
		Priority: NewGlob(r.Match.Priority),
		MaxWait:  time.Duration(r.MaxWait),
		Shadow:   r.Shadow,
		Feedback: r.ProviderFeedback,
		Refund:   r.Refund,
	}
	switch r.Match.Provider {
	case "", "*":
	default:
		if !c.IsProvider(r.Match.Provider) && !strings.ContainsAny(r.Match.Provider, "*?") {
			bad("match.provider", "%q is not one of %s", r.Match.Provider, c.providerNames())
		}
	}
	if strings.Contains(r.Match.Host, ":") {
		bad("match.host", "%q has a port: hosts are matched without theirs", r.Match.Host)
	}
	if p := r.Match.Priority; p != "" && classes != nil && !strings.ContainsAny(p, "*?") {
		if _, ok := classes[p]; !ok {
			bad("match.priority", "%q is not a class under priority.classes", p)
		}
	}
	for i, s := range r.Per {
		bit, ok := scopeNames[s]
		if !ok {
			bad(fmt.Sprintf("per[%d]", i), "%q is not one of provider, model, tenant, priority", s)
		}
		out.Per |= bit
	}
	tokenish := len(r.Tokens)+len(r.InputTokens)+len(r.OutputTokens) > 0
	switch r.LimitsFrom {
	case "":
	case "plan":
		out.FromPlan = true
		if tokenish || len(r.Requests) > 0 {
			bad("limits_from", "plan takes the limits from the tenant's plan: remove tokens, input_tokens, output_tokens and requests")
		}
		if out.Per&PerTenant == 0 {
			bad("limits_from", "plan needs per: [tenant] (each tenant its own buckets, with its plan's limits)")
		}
		if r.ProviderFeedback {
			bad("provider_feedback", "does not apply with limits_from: plan (the provider's limits are not per tenant)")
		}
		tokenish = true // the plans are checked with the file's
	default:
		bad("limits_from", "%q is not plan", r.LimitsFrom)
	}
	if !tokenish && len(r.Requests) == 0 && r.MaxConcurrent == 0 && r.Cost == nil {
		bad("tokens", "a rule needs tokens, input_tokens, output_tokens, requests, cost or max_concurrent")
	}
	if r.Cost != nil && out.FromPlan {
		bad("cost", "a rule with limits_from: plan takes its limits from the plan: put the cost limit in a rule of its own")
	}
	ttl := time.Duration(r.LeaseTTL)
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	switch {
	case r.MaxConcurrent < 0 || r.MaxConcurrent > maxLimit:
		bad("max_concurrent", "%d is not in [0, %d]", r.MaxConcurrent, int64(maxLimit))
	case r.MaxConcurrent > 0:
		out.Concurrent = &Limit{Algorithm: bucket.Concurrency, Limit: r.MaxConcurrent, Period: ttl}
	}
	if ttl < minPeriod || ttl > maxPeriod {
		bad("lease_ttl", "%v is not from 1s to 744h", ttl)
	}
	if r.LeaseTTL != 0 && r.MaxConcurrent == 0 {
		bad("lease_ttl", "applies with max_concurrent only")
	}
	if r.ProviderFeedback && !tokenish && len(r.Requests) == 0 {
		bad("provider_feedback", "needs a limit: the provider's reports lower the rule's buckets")
	}
	if r.Refund && !tokenish {
		bad("refund", "needs tokens, input_tokens or output_tokens: refunds give tokens back")
	}
	switch r.ReserveOutput {
	case "", "max_tokens":
	case "learned":
		out.LearnedOutput = true
		if len(r.Tokens)+len(r.OutputTokens) == 0 && !out.FromPlan {
			bad("reserve_output", "learned needs tokens or output_tokens: the output is reserved there")
		}
		if r.ProviderFeedback {
			if id := provider.Parse(r.Match.Provider); id == provider.Unknown ||
				!dialects.Of(id).Profile(id, r.Match.Model).OutputAsGenerated {
				bad("reserve_output", "learned on a provider_feedback rule of %q: the provider counts the request's max_tokens against its own limits at admission, so a smaller reservation would admit what it refuses (learned is for the operator's own budgets, and for providers that count output as generated: gemini)", r.Match.Provider)
			}
		}
	default:
		bad("reserve_output", "%q is not max_tokens or learned", r.ReserveOutput)
	}
	lims, lerrs := compileLimits(dimsOf(&r.Tokens, &r.InputTokens, &r.OutputTokens, &r.Requests), key)
	errs = append(errs, lerrs...)
	out.Limits = lims
	if r.Cost != nil {
		l, alertAt, cerrs := compileCost(r.Cost, key, &r.Match, c)
		errs = append(errs, cerrs...)
		if l != nil {
			out.Limits = append(out.Limits, DimLimit{Dim: provider.Cost, Limit: *l})
			out.AlertAt = alertAt
		}
	}
	if out.MaxWait > time.Minute {
		bad("max_wait", "%v is above 1m (a held request must finish within Envoy's ext_authz timeout)", out.MaxWait)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// dimAmounts are the windows of one dimension as written.
type dimAmounts struct {
	d provider.Dimension
	a Amounts
}

// dimsOf lists the dimensions of a rule or a plan in the order of Rule.Limits.
func dimsOf(tokens, input, output, requests *Amounts) [4]dimAmounts {
	return [...]dimAmounts{
		{provider.Tokens, *tokens}, {provider.InputTokens, *input},
		{provider.OutputTokens, *output}, {provider.Requests, *requests},
	}
}

// compileLimits compiles the windows of each dimension; key is the rule's or plan's path.
func compileLimits(dims [4]dimAmounts, key string) ([]DimLimit, []error) {
	var errs []error
	var out []DimLimit
	for _, x := range dims {
		if len(x.a) > MaxWindows {
			errs = append(errs, fmt.Errorf("%s.%s: %d windows: at most %d", key, x.d, len(x.a), MaxWindows))
			continue
		}
		for w := range x.a {
			k := key + "." + x.d.String()
			if len(x.a) > 1 {
				k = fmt.Sprintf("%s[%d]", k, w)
			}
			l, err := compileAmount(&x.a[w], k)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, DimLimit{Dim: x.d, Window: uint8(w), Limit: *l})
		}
	}
	return out, errs
}

// validName reports whether s is a name of a rule or a plan: 1 to 64 of [A-Za-z0-9._-].
func validName(s string) bool {
	return s != "" && len(s) <= 64 && !strings.ContainsFunc(s, func(c rune) bool {
		return !(c == '-' || c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z')
	})
}

func planTokenish(p *Plan) bool {
	for _, l := range p.Limits {
		if l.Dim != provider.Requests {
			return true
		}
	}
	return false
}

func compileAmount(a *Amount, key string) (*Limit, error) {
	var errs []error
	bad := func(k, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", key, k, fmt.Sprintf(format, args...)))
	}
	l := &Limit{Limit: a.Limit, Burst: a.Burst}
	if a.Limit <= 0 || a.Limit > maxLimit {
		bad("limit", "%d is not in [1, %d]", a.Limit, int64(maxLimit))
	}
	if a.Burst < 0 || a.Burst > maxLimit {
		bad("burst", "%d is not in [0, %d]", a.Burst, int64(maxLimit))
	}
	switch a.Algorithm {
	case "", "token_bucket":
		l.Algorithm = bucket.TokenBucket
	case "sliding_window":
		l.Algorithm = bucket.SlidingWindow
	case "quota":
		l.Algorithm = bucket.Quota
	default:
		bad("algorithm", "%q is not one of token_bucket, sliding_window, quota", a.Algorithm)
	}
	if a.Burst > 0 && l.Algorithm != bucket.TokenBucket {
		bad("burst", "applies to token_bucket only")
	}
	if l.Algorithm == bucket.Quota {
		l.Calendar, l.Zone = calendar(a.Period, a.Timezone, "a quota resets per calendar day or month", bad)
	} else {
		if a.Timezone != "" {
			bad("timezone", "applies to algorithm: quota only (calendar periods)")
		}
		l.Period = window(a.Period, bad)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return l, nil
}

// window reads the period of a token bucket or a sliding window: second, minute, hour, day, a
// Go duration (90s, 36h) or a number of days (30d), from 1 s to 31 days; otherwise bad reports
// it and the result is 0.
func window(period string, bad func(k, format string, args ...any)) time.Duration {
	switch period {
	case "second":
		return time.Second
	case "minute":
		return time.Minute
	case "hour":
		return time.Hour
	case "day":
		return 24 * time.Hour
	case "month":
		bad("period", "month is a calendar period: use algorithm: quota")
		return 0
	case "":
		bad("period", "required (second, minute, hour, day, or a duration like 90s or 30d)")
		return 0
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(period, "d"); ok {
		var n int64
		if n, err = strconv.ParseInt(days, 10, 64); err == nil {
			d = time.Duration(min(max(n, 0), 1000)) * 24 * time.Hour
		}
	} else {
		d, err = time.ParseDuration(period)
	}
	if err != nil || d < minPeriod || d > maxPeriod {
		bad("period", "%q is not second, minute, hour, day, or a duration from 1s to 744h (31d)", period)
		return 0
	}
	return d
}

// calendar reads a calendar period (day or month; otherwise bad reports the period with why)
// and its time zone: an IANA name, read from the system's zoneinfo or Go's embedded copy
// (cmd/ext-authz imports time/tzdata), with its daylight-saving rules, from which the store
// computes each period's boundaries; nil (UTC) when zone is empty or invalid.
func calendar(period, zone, why string, bad func(k, format string, args ...any)) (bucket.Calendar, *time.Location) {
	var c bucket.Calendar
	switch period {
	case "day":
		c = bucket.Day
	case "month":
		c = bucket.Month
	default:
		bad("period", "%q: %s", period, why)
	}
	if zone == "" {
		return c, nil
	}
	z, err := time.LoadLocation(zone)
	switch {
	case err != nil:
		bad("timezone", "%q is not an IANA time zone (like America/Los_Angeles): %v", zone, err)
	case zone == "Local":
		bad("timezone", "Local depends on the host: name the zone (like America/Los_Angeles)")
	default:
		return c, z
	}
	return c, nil
}
