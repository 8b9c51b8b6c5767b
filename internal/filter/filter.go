package filter

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/llm-ratelimit/llm-ratelimit/internal/authzwire"
	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
	"github.com/llm-ratelimit/llm-ratelimit/internal/promptcache"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// Limiter debits budgets atomically. bucket.Redis and bucket.Memory implement it, and Breaker
// in front of another.
type Limiter interface {
	// Take debits every bucket of req, or none.
	Take(ctx context.Context, req *bucket.Request) (bucket.Result, error)
	// Adjust gives tokens back (positive delta) or charges extra (negative delta).
	Adjust(ctx context.Context, tag string, adj []bucket.Adjustment) error
}

// Estimator prices a request. *tokens.Pricer implements it.
type Estimator interface {
	Estimate(in *tokens.Input) tokens.Estimate
}

// Recorder receives every decision (internal/decisionlog.Log implements it). Decision must not
// block, nor keep d, which the filter reuses.
type Recorder interface {
	Decision(d *decisionlog.Decision)
}

// Policy is one configuration with the estimator built from it. The filter swaps whole Policies
// atomically when the configuration is reloaded.
type Policy struct {
	Config    *config.Config
	Estimator Estimator
}

// Options configures a Filter.
type Options struct {
	// Limiter is the shared store, as the decisions call it (the service puts a Breaker in
	// front of it). Required.
	Limiter Limiter
	// Fallback is the in-memory store used while Limiter fails and failure.mode is local.
	// Without it, local mode denies like deny mode.
	Fallback Limiter
	// Logger receives one line per decision at debug level, and failures at warn. Default: none.
	Logger *zap.Logger
	// Metrics receives the decision metrics. Default: not recorded.
	Metrics *Metrics
	// Now is the clock for holding and timing. Default time.Now.
	Now func() time.Time
	// Jitter returns a uniform number in [0, 1) for Retry-After jitter. Default math/rand/v2.
	Jitter func() float64
	// HoldMargin is kept free before the ext_authz deadline when holding a request for max_wait,
	// so that the answer still reaches Envoy in time. Default 25ms.
	HoldMargin time.Duration
	// LeaseID returns a new, unique in-flight lease id (see bucket.Request.Lease). Default: 64
	// random bits in hex.
	LeaseID func() string
	// StoreTimeout, when positive, bounds each store call whatever the client does inside it
	// (waiting for a pooled connection, dialling, asking a Sentinel, following redirections), so
	// that a Check never waits for the store longer than this. Default: no bound but ctx's.
	StoreTimeout time.Duration
	// CheckTimeout, when positive, is the longest one attempt of a check may take, as Envoy
	// enforces it: its per-try timeout, which Envoy does not tell the service (the grpc-timeout
	// it sends is the whole timeout). Every answer is sent within CheckTimeout of the check's
	// arrival and ctx's deadline: holds end before it, and large bodies are priced at their
	// upper bound when an exact count would not fit. Default: ctx's deadline alone.
	CheckTimeout time.Duration
	// Bare answers carry the decision, its metadata and its reservation, and none of what only
	// a client reads: no rate-limit headers, no denial body (internal/replay, which reads none
	// of them). Default: false, the whole answer.
	Bare bool
	// PricingSlots is how many exact counts of large bodies (ExpensiveBytes or more) may run at
	// once; a large body that finds no free slot is priced at its upper bound at once, without
	// waiting. 0: GOMAXPROCS. Negative: no slots and no deadline, every body counted exactly
	// however long it takes (only to measure what the bound prevents).
	PricingSlots int
	// ExpensiveBytes is the body size from which pricing goes through the slots and the
	// deadline. Default DefaultExpensiveBytes.
	ExpensiveBytes int
	// PricingTimeout is the longest an exact count of a large body may take before its upper
	// bound answers instead. Default DefaultPricingTimeout.
	PricingTimeout time.Duration
	// Tracer, when set, traces every decision (internal/tracing): a span for the check, the
	// child of the application's when the request carries a W3C traceparent, with spans for its
	// pricing, its store calls and its hold. Default: none, no spans.
	Tracer trace.Tracer
	// Recorder, when set, receives every decision, and every reservation gets an id in the
	// metadata (reservation.MetadataIDKey) that the response path's record names. Default: none,
	// and no id.
	Recorder Recorder
	// Sleep holds a request for max_wait: it waits d or until ctx ends. Default: a timer. A
	// replay with a virtual clock returns at once.
	Sleep func(ctx context.Context, d time.Duration) error
	// PromptCache bounds the memory of the prompt-cache prefixes requests sent, from which
	// admission expects cache reads (internal/promptcache).
	PromptCache promptcache.Options
	// Learner, when set, prices estimated prompts at their learned factor while the
	// configuration's pricing.learn is enabled (learn.go). Default: none, static estimates.
	Learner Learner
}

// Filter answers ext_authz Check requests. It is safe for concurrent use.
type Filter struct {
	authv3.UnimplementedAuthorizationServer

	policy atomic.Pointer[Policy]
	opts   Options
	log    *zap.Logger
	m      *Metrics
	held   atomic.Int64
	routes routeCache
	// replicas is the number of live replicas last discovered through the store; 0: unknown.
	replicas atomic.Int64
	// storeOK is when a shared store call last succeeded, in Unix nanoseconds; 0: never.
	storeOK atomic.Int64
	// pricing counts the exact counts of large bodies running now (see price).
	pricing atomic.Int64
	// prompts remembers the prompt-cache prefixes admitted requests sent.
	prompts *promptcache.Memory
	// alerts remembers the money budgets whose alert_at this replica reported (spend.go).
	alerts spendAlerts
	// ridPrefix and ridSeq make reservation ids (with Options.Recorder): this process's random
	// prefix and a counter.
	ridPrefix string
	ridSeq    atomic.Uint64
}

var _ authv3.AuthorizationServer = (*Filter)(nil)

// New returns a Filter serving p.
func New(p *Policy, opts Options) (*Filter, error) {
	if opts.Limiter == nil {
		return nil, errors.New("filter: a Limiter is required")
	}
	if p == nil || p.Config == nil || p.Estimator == nil {
		return nil, errors.New("filter: a Policy with a Config and an Estimator is required")
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Jitter == nil {
		opts.Jitter = rand.Float64
	}
	if opts.HoldMargin <= 0 {
		opts.HoldMargin = 25 * time.Millisecond
	}
	if opts.LeaseID == nil {
		opts.LeaseID = newLeaseID
	}
	if opts.Sleep == nil {
		opts.Sleep = sleep
	}
	if opts.PricingSlots == 0 {
		opts.PricingSlots = defaultPricingSlots()
	}
	if opts.ExpensiveBytes <= 0 {
		opts.ExpensiveBytes = DefaultExpensiveBytes
	}
	if opts.PricingTimeout <= 0 {
		opts.PricingTimeout = DefaultPricingTimeout
	}
	if opts.CheckTimeout < 0 || opts.StoreTimeout < 0 {
		return nil, errors.New("filter: CheckTimeout and StoreTimeout must not be negative")
	}
	if opts.CheckTimeout > 0 && opts.CheckTimeout <= opts.StoreTimeout+opts.HoldMargin {
		return nil, fmt.Errorf("filter: CheckTimeout %v leaves no time after the store's %v and the answer's margin %v",
			opts.CheckTimeout, opts.StoreTimeout, opts.HoldMargin)
	}
	f := &Filter{opts: opts, log: opts.Logger, m: opts.Metrics, prompts: promptcache.New(opts.PromptCache)}
	if opts.Recorder != nil {
		f.ridPrefix = newLeaseID() + "-"
	}
	f.SetPolicy(p)
	return f, nil
}

// SetPolicy makes p the policy of every later decision.
func (f *Filter) SetPolicy(p *Policy) {
	f.policy.Store(p)
	f.routes.reset()
}

// UpdatePolicy makes update's result on the policy in force the policy of every later decision.
// When another update or SetPolicy replaced the policy meanwhile, update runs again on that one,
// so that no change is lost. An error leaves the policy as it is.
func (f *Filter) UpdatePolicy(update func(*Policy) (*Policy, error)) error {
	for {
		old := f.policy.Load()
		p, err := update(old)
		if err != nil {
			return err
		}
		if f.policy.CompareAndSwap(old, p) {
			f.routes.reset()
			return nil
		}
	}
}

// Policy returns the policy in force.
func (f *Filter) Policy() *Policy { return f.policy.Load() }

// HoldLimit is the longest max_wait the filter can honour: a hold starts after the store's
// answer and must end, with the answer's margin, within CheckTimeout. 0: no limit (no
// CheckTimeout). A longer max_wait in a route's context_extensions is a bad route; the server
// rejects a limits file holding one (config.Config.CheckMaxWait).
func (f *Filter) HoldLimit() time.Duration {
	if f.opts.CheckTimeout <= 0 {
		return 0
	}
	return f.opts.CheckTimeout - f.opts.StoreTimeout - f.opts.HoldMargin
}

// StoreAnsweredSince reports whether a decision's call to the shared store succeeded at or
// after t (by the filter's clock): the store was up then, without a health ping to ask it.
func (f *Filter) StoreAnsweredSince(t time.Time) bool {
	ok := f.storeOK.Load()
	return ok != 0 && ok >= t.UnixNano()
}

// CountsReplicas reports whether the policy in force needs the number of live replicas
// (SetReplicas): in failure.mode local it divides the limits.
func (f *Filter) CountsReplicas() bool { return f.policy.Load().Config.FailureMode == config.FailLocal }

// SetReplicas records the number of live replicas discovered through the store (a heartbeat
// while it is up). In failure.mode local, each replica then enforces limit / n; until a first
// discovery (n <= 0), failure.replicas applies.
func (f *Filter) SetReplicas(n int) { f.replicas.Store(int64(n)) }

// localReplicas is the number of replicas that share a limit in local mode.
func (f *Filter) localReplicas(p *Policy) int {
	if n := f.replicas.Load(); n > 0 {
		return int(n)
	}
	return p.Config.File.Failure.Replicas
}

// Check decides one request: CheckBytes of its encoding, its answer as a CheckResponse. The
// service serves CheckBytes, which reads the encoded request in place and whose answer is
// encoded by Answer.AppendTo; Check is for callers that hold a decoded request.
func (f *Filter) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	data, err := marshal(req)
	if err != nil {
		f.m.error(reasonMalformed)
		return nil, err
	}
	a, err := f.CheckBytes(ctx, data)
	if err != nil {
		return nil, err
	}
	return a.Response(), nil
}

// CheckBytes decides one request, given as the protobuf encoding of a CheckRequest. It reads
// data in place: data must not change until CheckBytes returns (the answer does not refer to it),
// nor afterwards when its body is large: an exact count abandoned at the deadline (see
// Options.CheckTimeout) may still be reading it. The service's codec gives every request its
// own copy, which nothing writes.
// A malformed encoding is an InvalidArgument error, like a request without HTTP attributes.
func (f *Filter) CheckBytes(ctx context.Context, data []byte) (a *Answer, err error) {
	start := f.opts.Now()
	p := f.policy.Load()
	var w authzwire.Request
	if err := decode(p, data, &w); err != nil {
		f.m.error(reasonMalformed)
		return nil, err
	}
	if f.opts.Tracer != nil {
		var span trace.Span
		ctx, span = f.startCheck(ctx, data, start)
		defer func() { endCheck(span, a, err) }()
	}
	r, err := f.parse(p, &w)
	if err != nil {
		if status.Code(err) == codes.InvalidArgument {
			f.m.error(reasonNotHTTP)
			return nil, err
		}
		var ue *unidentifiedError
		if errors.As(err, &ue) {
			f.m.error(reasonUnidentified)
			f.log.Debug("request without identity", zap.String("reason", string(reasonUnidentified)), zap.String("source", ue.what))
			est := recognized(p, r)
			return f.finish(start, &est, nil, unidentifiedResponse(&est, ue.what)), nil
		}
		var ie *identityError
		if errors.As(err, &ie) {
			f.m.error(reasonDuplicateIdentity)
			f.log.Debug("identity header given more than once", zap.String("reason", string(reasonDuplicateIdentity)),
				zap.String("header", ie.header))
			est := recognized(p, r)
			return f.finish(start, &est, nil, badIdentityResponse(&est, ie.header)), nil
		}
		// A route whose context_extensions are invalid: the operator's mistake, answered 500 in
		// the provider's format so that it is seen at once, never silently unlimited.
		f.m.error(reasonBadRoute)
		f.log.Warn("invalid route context_extensions", zap.String("reason", string(reasonBadRoute)), zap.Error(err))
		est := recognized(p, r)
		return f.finish(start, &est, nil, badRouteResponse(&est, err)), nil
	}

	t0 := f.opts.Now()
	pctx, span := f.child(ctx, spanPricing)
	est := f.price(pctx, p, &r.in, start)
	f.learn(p, &est)
	span.End()
	t1 := f.opts.Now()
	f.m.priced(&est, t1.Sub(t0))
	if est.NCache > 0 {
		f.prompts.Expect(&est, t1)
	}
	if est.Provider == provider.Unknown && p.Config.Unknown == config.UnknownDeny {
		return f.finish(start, &est, nil, unknownResponse(&est)), nil
	}

	pl := f.plan(p, r, &est)
	if pl.unpriced != nil {
		f.m.error(reasonUnpriced)
		return f.finish(start, &est, pl, unpricedResponse(&est, pl)), nil
	}
	if len(pl.enforced.Buckets) == 0 && len(pl.shadow.Buckets) == 0 {
		return f.finish(start, &est, pl, okResponse(nil, pl.metadata(&est, decisionUnlimited, 0))), nil
	}

	// Shadow buckets are counted apart so that they never block the enforced ones.
	if len(pl.shadow.Buckets) > 0 {
		if res, _, err := f.take(ctx, p, &pl.shadow); err == nil {
			pl.shadowOutcome, pl.shadowBlocking = res.Outcome, res.Blocking
		} else {
			pl.shadowFailed = true
		}
	}
	if len(pl.enforced.Buckets) == 0 {
		return f.finish(start, &est, pl, okResponse(nil, pl.metadata(&est, decisionShadow, 0))), nil
	}

	if needsLease(&pl.enforced) {
		pl.enforced.Lease = f.opts.LeaseID()
	}
	held := false
	if pl.enforced.MaxWait > 0 {
		pl.enforced.MaxWait = f.holdable(f.attemptDeadline(ctx, start), pl.enforced.MaxWait, p.Config.File.MaxHeld)
		held = pl.enforced.MaxWait > 0
	}
	res, decided, err := f.take(ctx, p, &pl.enforced)
	if held && (err != nil || res.Outcome != bucket.Delayed) {
		f.held.Add(-1)
	}
	if err != nil {
		return f.storeFailed(ctx, start, p, &est, pl, err)
	}
	pl.result, pl.decided = res, decided
	pl.debited = res.Outcome == bucket.Allowed || res.Outcome == bucket.Delayed
	if pl.debited && f.opts.Recorder != nil {
		pl.rid = f.ridPrefix + strconv.FormatUint(f.ridSeq.Add(1), 16)
	}

	if pl.shadowAll {
		return f.finish(start, &est, pl, okResponse(nil, pl.metadata(&est, decisionShadow, 0))), nil
	}
	switch res.Outcome {
	case bucket.Allowed:
		return f.finish(start, &est, pl, okResponse(pl.headers(&est, &res, 0), pl.metadata(&est, decisionAllowed, 0))), nil
	case bucket.Delayed:
		defer f.held.Add(-1)
		f.m.holding(1)
		defer f.m.holding(-1)
		hctx, span := f.child(ctx, spanHold)
		slept := f.opts.Sleep(hctx, res.Wait)
		span.End()
		if slept != nil {
			// Envoy gave up on the request: give the reservation back.
			f.refund(p, &pl.enforced, res.At)
			f.m.error(reasonHoldCanceled)
			return nil, status.FromContextError(slept).Err()
		}
		return f.finish(start, &est, pl, okResponse(pl.headers(&est, &res, 0), pl.metadata(&est, decisionDelayed, res.Wait))), nil
	case bucket.Impossible:
		return f.finish(start, &est, pl, tooLargeResponse(&est, pl, &res)), nil
	default:
		wait := res.Wait
		if j := p.Config.File.Response.RetryJitter; j > 0 {
			wait += time.Duration(float64(wait) * j * f.opts.Jitter())
		}
		return f.finish(start, &est, pl, rateLimitedResponse(&est, pl, &res, wait)), nil
	}
}

// recognized is the provider and API of r, unpriced: for the answers that precede pricing.
func recognized(p *Policy, r *request) tokens.Estimate {
	var est tokens.Estimate
	var d *provider.Declared
	est.Provider, est.API, _, d = dialects.RecognizeIn(p.Config.Hosts, r.in.Host, r.path)
	if d != nil {
		est.Name = d.Name
	}
	return est
}

// request is the parsed view of a CheckRequest that a decision needs.
type request struct {
	in       tokens.Input
	path     string // without the query string
	tenant   string
	priority string
	floor    float64
	// identified: the tenant came from the request (tenant.source), not tenant.default.
	identified bool
	// plan is the tenant's plan (nil when no rule takes its limits from plans).
	plan  *config.Plan
	route *config.Route
	// own is true when the request carried the operator's own provider credential (and no
	// other): only then may the provider's answer correct a provider_feedback rule.
	own bool
}

// parse reads what a decision needs from a decoded CheckRequest. The body is used in place;
// the strings a decision may keep (path, tenant, priority) are copied out of the message.
func (f *Filter) parse(p *Policy, w *authzwire.Request) (*request, error) {
	if !w.HTTP {
		return nil, status.Error(codes.InvalidArgument, "filter: check request without HTTP attributes")
	}
	r := &request{}
	r.in.Path = w.Path
	if r.in.Path == "" {
		r.in.Path = w.Header[authzwire.HeaderPath]
	}
	r.in.Path = strings.Clone(r.in.Path)
	r.path = r.in.Path
	if i := strings.IndexByte(r.path, '?'); i >= 0 {
		r.path = r.path[:i]
	}
	// The host decides the provider (dialects.Recognize). It is read in place: pricing does not
	// keep it.
	r.in.Host = w.Host
	if r.in.Host == "" {
		r.in.Host = w.Header[authzwire.HeaderAuthority]
	}
	r.in.Body = w.Body()
	r.in.ContentType = w.Header[authzwire.HeaderContentType]
	r.in.ContentEncoding = w.Header[authzwire.HeaderContentEncoding]
	r.in.ContentLength = -1
	if w.Has[authzwire.HeaderContentLength] {
		if n, err := strconv.ParseInt(w.Header[authzwire.HeaderContentLength], 10, 64); err == nil && n >= 0 {
			r.in.ContentLength = n
		}
	} else if w.Size > 0 {
		r.in.ContentLength = w.Size
	}
	r.in.NoContentLength = !w.Has[authzwire.HeaderContentLength]
	r.in.Partial = w.Header[authzwire.HeaderPartial] == "true"

	cfg := p.Config
	if len(w.Ext) > 0 {
		rt, err := f.routes.get(cfg, w.Ext)
		if err != nil {
			return r, err
		}
		if lim := f.HoldLimit(); lim > 0 && rt.Rule != nil && rt.Rule.MaxWait > lim {
			return r, fmt.Errorf("context_extensions[max_wait]: %v cannot be honoured: a check attempt ends within %v (-check-timeout) and holds need the store first", rt.Rule.MaxWait, lim)
		}
		r.route = rt
	}
	switch cfg.TenantSource {
	case config.TenantFromHeader:
		r.tenant = strings.Clone(w.Header[authzwire.HeaderTenant])
	case config.TenantFromPrincipal:
		r.tenant = strings.Clone(w.Principal)
	case config.TenantFromContextExtension:
		if r.route != nil {
			r.tenant = r.route.Tenant
		}
	case config.TenantFromClaim:
		if v, ok := w.MetadataString(config.JWTNamespace, cfg.JWTPayload, cfg.TenantClaim); ok {
			r.tenant = strings.Clone(v)
		}
	case config.TenantFromAPIKey:
		key, err := apiKey(w)
		if err != nil {
			return r, err
		}
		if key != "" {
			// The key itself goes no further than this hash.
			r.tenant = cfg.KeyTenant(key)
		}
	}
	// Envoy joins a repeated header's values with commas: an identity header with a comma was
	// sent more than once (or names a list), and is refused rather than read as one tenant.
	if strings.IndexByte(w.Header[authzwire.HeaderTenant], ',') >= 0 {
		return r, &identityError{header: cfg.File.Tenant.Header}
	}
	if strings.IndexByte(w.Header[authzwire.HeaderPriority], ',') >= 0 {
		return r, &identityError{header: cfg.File.Priority.Header}
	}
	r.identified = r.tenant != ""
	if !r.identified {
		if cfg.DenyUnidentified {
			return r, &unidentifiedError{what: identityName(cfg)}
		}
		r.tenant = cfg.File.Tenant.Default
	}
	if cfg.Feedback {
		r.own = ownCredential(cfg.Own, w)
	}
	r.priority = cfg.File.Priority.Default
	r.floor = cfg.DefaultFloor
	if !f.trustedClass(cfg, r, w) {
		for i := range cfg.TenantClasses {
			if tc := &cfg.TenantClasses[i]; tc.Tenant.Match(r.tenant) {
				r.priority, r.floor = tc.Class, tc.Floor
				break
			}
		}
	}
	if cfg.UsesPlans {
		r.plan = tenantPlan(cfg, r, w)
	}
	return r, nil
}

// trustedClass sets r's class from priority.source, and reports whether it did; else the class
// follows the tenant (priority.tenants), then priority.default.
func (f *Filter) trustedClass(cfg *config.Config, r *request, w *authzwire.Request) bool {
	switch cfg.PrioritySource {
	case config.PriorityFromHeader:
		if fl, ok := cfg.Classes[w.Header[authzwire.HeaderPriority]]; ok && w.Has[authzwire.HeaderPriority] {
			r.priority, r.floor = strings.Clone(w.Header[authzwire.HeaderPriority]), fl
			return true
		}
	case config.PriorityFromClaim:
		if v, ok := w.MetadataString(config.JWTNamespace, cfg.JWTPayload, cfg.PriorityClaim); ok {
			if fl, ok := cfg.Classes[v]; ok {
				r.priority, r.floor = strings.Clone(v), fl
				return true
			}
		}
	case config.PriorityFromPrincipal:
		for i := range cfg.PrincipalClasses {
			if pc := &cfg.PrincipalClasses[i]; w.Principal != "" && pc.Principal.Match(w.Principal) {
				r.priority, r.floor = pc.Class, pc.Floor
				return true
			}
		}
	case config.PriorityFromContextExtension:
		if r.route != nil && r.route.Priority != "" {
			r.priority, r.floor = r.route.Priority, r.route.Floor
			return true
		}
	}
	return false
}

// tenantPlan is r's plan under tenant_plans.source: a map look-up on the compiled plans.
func tenantPlan(cfg *config.Config, r *request, w *authzwire.Request) *config.Plan {
	switch cfg.PlanSource {
	case config.PlanFromClaim:
		if v, ok := w.MetadataString(config.JWTNamespace, cfg.JWTPayload, cfg.PlanClaim); ok {
			return cfg.PlanNamed(v)
		}
		return cfg.DefaultPlan
	case config.PlanFromContextExtension:
		if r.route != nil && r.route.Plan != nil {
			return r.route.Plan
		}
		return cfg.DefaultPlan
	}
	return cfg.PlanOf(r.tenant)
}

// planSource says where r's plan came from, for Explain.
func planSource(cfg *config.Config, r *request, w *authzwire.Request) string {
	switch cfg.PlanSource {
	case config.PlanFromClaim:
		if v, ok := w.MetadataString(config.JWTNamespace, cfg.JWTPayload, cfg.PlanClaim); ok && cfg.Plans[v] != nil {
			return "claim " + cfg.PlanClaim.String()
		}
	case config.PlanFromContextExtension:
		if r.route != nil && r.route.Plan != nil {
			return "context_extensions[plan]"
		}
	default:
		if _, ok := cfg.AssignedPlan(r.tenant); ok {
			return "tenant_plans.table or file"
		}
	}
	return "tenant_plans.default"
}

// apiKey is the provider credential of w: the value of authorization (without "Bearer "),
// x-api-key or api-key. Several that differ, or one given twice, are an identityError: the
// request would be charged to one key while the provider bills another.
func apiKey(w *authzwire.Request) (string, error) {
	key, from := "", ""
	for _, h := range [...]struct {
		i    int
		name string
	}{{authzwire.HeaderAuthorization, "authorization"}, {authzwire.HeaderXAPIKey, "x-api-key"}, {authzwire.HeaderAPIKey, "api-key"}} {
		if !w.Has[h.i] {
			continue
		}
		v := w.Header[h.i]
		if h.i == authzwire.HeaderAuthorization {
			v = config.BearerToken(v)
		}
		v = strings.TrimSpace(v)
		switch {
		case v == "":
			continue
		case strings.IndexByte(v, ',') >= 0:
			return "", &identityError{header: h.name}
		case key != "" && v != key:
			return "", &identityError{header: from + " and " + h.name}
		}
		key, from = v, h.name
	}
	return key, nil
}

// identityName says what identity tenant.source seeks, for a 401's message and the log.
func identityName(cfg *config.Config) string {
	switch cfg.TenantSource {
	case config.TenantFromClaim:
		return "the JWT claim " + cfg.TenantClaim.String()
	case config.TenantFromAPIKey:
		return "a provider API key"
	case config.TenantFromHeader:
		return "the header " + cfg.File.Tenant.Header
	case config.TenantFromPrincipal:
		return "an mTLS principal"
	}
	return "the route's tenant"
}

// unidentifiedError is a request without the identity tenant.source seeks, while
// tenant.missing is deny.
type unidentifiedError struct{ what string }

func (e *unidentifiedError) Error() string { return "filter: no identity: " + e.what }

// ownCredential reports whether w carried the operator's credential and nothing else: every
// credential header present must be one of the operator's (by salted hash), and at least one must
// be. A client's own key has its own budget at the provider, whose answers say nothing of ours; a
// repeated header arrives joined with a comma and never matches. With credentials.injected, Envoy
// replaces whatever the client sent, and every request counts as the operator's.
func ownCredential(o *config.OwnCredentials, w *authzwire.Request) bool {
	if o.Injected() {
		return true
	}
	found := false
	for _, i := range [...]int{authzwire.HeaderAuthorization, authzwire.HeaderXAPIKey, authzwire.HeaderAPIKey} {
		if !w.Has[i] {
			continue
		}
		v := w.Header[i]
		if i == authzwire.HeaderAuthorization {
			v = config.BearerToken(v)
		}
		if !o.Own(v) {
			return false
		}
		found = true
	}
	return found
}

// identityError is a request whose identity header came more than once.
type identityError struct{ header string }

func (e *identityError) Error() string {
	return "filter: header " + e.header + " given more than once"
}

// decode reads data, an encoded CheckRequest, into w for p.
func decode(p *Policy, data []byte, w *authzwire.Request) error {
	if err := authzwire.Decode(data, p.Config.TenantHeader, p.Config.File.Priority.Header, w); err != nil {
		return status.Error(codes.InvalidArgument, "filter: "+err.Error())
	}
	return nil
}

// marshal encodes req for CheckBytes.
func marshal(req *authv3.CheckRequest) ([]byte, error) {
	data, err := proto.Marshal(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, "filter: "+err.Error())
	}
	return data, nil
}

// take runs one Take on the shared store and records its latency and health; decided is when
// the store answered. A circuit breaker in front of the store may answer instead
// (errBreakerOpen): no store call to record.
func (f *Filter) take(ctx context.Context, p *Policy, req *bucket.Request) (res bucket.Result, decided time.Time, err error) {
	t0 := f.opts.Now()
	sctx := ctx
	if f.opts.StoreTimeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, f.opts.StoreTimeout)
		defer cancel()
	}
	sctx, span := f.child(sctx, spanTake)
	res, err = f.opts.Limiter.Take(sctx, req)
	span.End()
	if err == errBreakerOpen {
		return res, t0, err
	}
	t1 := f.opts.Now()
	f.m.store("take", t1.Sub(t0), err)
	if err == nil {
		f.storeOK.Store(t1.UnixNano())
	}
	return res, t1, err
}

// holdable returns how long a request may be held: at most want, and short enough that the
// hold, which starts once the store answered (within StoreTimeout), ends with the margin before
// dl, the attempt's deadline (none when zero); zero when max_held requests are already held
// (it then counts one more).
func (f *Filter) holdable(dl time.Time, want time.Duration, maxHeld int) time.Duration {
	if !dl.IsZero() {
		if left := dl.Sub(f.opts.Now()) - f.opts.StoreTimeout - f.opts.HoldMargin; left < want {
			want = left
		}
	}
	if want <= 0 {
		return 0
	}
	if f.held.Add(1) > int64(maxHeld) {
		f.held.Add(-1)
		return 0
	}
	return want
}

// storeFailed applies failure.mode when the shared store cannot decide.
func (f *Filter) storeFailed(ctx context.Context, start time.Time, p *Policy, est *tokens.Estimate, pl *plan, err error) (*Answer, error) {
	if pl.shadowAll {
		// In global shadow mode the enforced take is the shadow one.
		pl.shadowFailed = true
	}
	if errors.Is(err, errBreakerOpen) {
		// The breaker logged the outage once: no line per request.
		f.m.error(reasonBreakerOpen)
	} else {
		reason := storeReason(ctx, err)
		f.m.error(reason)
		// Failures before the breaker opens are warnings; a failed probe of an open breaker is not.
		lvl := zap.WarnLevel
		var oe *outageError
		if errors.As(err, &oe) {
			lvl = zap.DebugLevel
		}
		f.log.Log(lvl, "store unavailable", zap.String("reason", string(reason)), zap.Stringer("mode", p.Config.FailureMode), zap.Error(err))
	}
	// Global shadow mode never denies, not even while the store is away: every failure mode
	// lets the request through.
	if pl.shadowAll || p.Config.FailureMode == config.FailAllow {
		return f.finish(start, est, pl, okResponse(nil, pl.metadata(est, decisionFailOpen, 0))), nil
	}
	switch p.Config.FailureMode {
	case config.FailLocal:
		if f.opts.Fallback == nil {
			break
		}
		local := pl.enforced
		local.MaxWait = 0
		local.Buckets = localShare(scaleDown(local.Buckets, f.localReplicas(p)))
		res, lerr := f.opts.Fallback.Take(ctx, &local)
		if lerr != nil {
			break
		}
		pl.result = res
		pl.local = true
		switch res.Outcome {
		case bucket.Allowed, bucket.Delayed:
			return f.finish(start, est, pl, okResponse(pl.headers(est, &res, 0), pl.metadata(est, decisionLocal, 0))), nil
		case bucket.Impossible:
			return f.finish(start, est, pl, tooLargeResponse(est, pl, &res)), nil
		default:
			return f.finish(start, est, pl, rateLimitedResponse(est, pl, &res, res.Wait)), nil
		}
	}
	return f.finish(start, est, pl, unavailableResponse(est, pl)), nil
}

// scaleDown divides each bucket's limit and burst by n (rounded up), for a replica's local share.
func scaleDown(specs []bucket.Spec, n int) []bucket.Spec {
	if n <= 1 {
		return specs
	}
	out := make([]bucket.Spec, len(specs))
	for i, s := range specs {
		s.Limit = (s.Limit + int64(n) - 1) / int64(n)
		if s.Burst > 0 {
			s.Burst = (s.Burst + int64(n) - 1) / int64(n)
		}
		out[i] = s
	}
	return out
}

// refund gives a reservation back after the request was abandoned; at is where the store
// counted it (bucket.Result.At).
func (f *Filter) refund(p *Policy, req *bucket.Request, at time.Time) {
	adj := make([]bucket.Adjustment, len(req.Buckets))
	for i, s := range req.Buckets {
		adj[i] = bucket.Adjustment{Spec: s, Delta: s.Cost, At: at}
		if s.Algorithm == bucket.Concurrency {
			adj[i].Lease = req.Lease
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := f.opts.Limiter.Adjust(ctx, req.Tag, adj); err != nil {
		f.m.error(reasonRefundFailed)
		f.log.Warn("refund failed", zap.String("reason", string(reasonRefundFailed)), zap.Error(err))
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish records the decision and returns a.
func (f *Filter) finish(start time.Time, est *tokens.Estimate, pl *plan, a *Answer) *Answer {
	now := f.opts.Now()
	d := now.Sub(start)
	dec := a.meta.decision
	if est.NCache > 0 && forwarded(dec) {
		f.prompts.Sent(est, now)
	}
	f.m.decided(est, pl, dec, d)
	if pl != nil && pl.price != nil && pl.debited && !pl.local {
		f.crossed(pl, now)
	}
	if ce := f.log.Check(zap.DebugLevel, "decision"); ce != nil {
		fields := []zap.Field{
			zap.String("decision", dec),
			zap.String("provider", est.ProviderName()),
			zap.String("api", est.API.String()),
			zap.String("model", safeLabel(est.Model)),
			zap.Int64("prompt_tokens", est.PromptTokens),
			zap.Int64("output_tokens", est.OutputTokens),
			zap.Bool("exact", est.Exact),
			zap.Duration("took", d),
		}
		if est.Reason != "" {
			fields = append(fields, zap.String("estimate_reason", string(est.Reason)))
		}
		if pl != nil {
			fields = append(fields, zap.String("rules", pl.ruleNames()), zap.String("tenant_hash", tenantHash(pl.tenant)))
			if b := pl.blocking(); b != "" {
				fields = append(fields, zap.String("limit", b))
			}
		}
		ce.Write(fields...)
	}
	if f.opts.Recorder != nil {
		f.record(start, est, pl, a)
	}
	return a
}

// record gives the decision to the Recorder: what it was made on and what it decided, never
// what the request said (internal/decisionlog).
func (f *Filter) record(start time.Time, est *tokens.Estimate, pl *plan, a *Answer) {
	d := decisionlog.Decision{
		Time: start, Provider: est.Provider.String(), API: est.API.String(), Model: safeLabel(est.Model),
		Prompt: est.PromptTokens, Output: est.OutputTokens, OutputUnset: est.OutputUnset, Context: est.Context,
		Chars: est.Chars, CacheRead: est.CacheRead, Exact: est.Exact, Reason: string(est.Reason),
		Decision: a.meta.decision, Outcome: decisionlog.OutcomeOf(a.meta.decision), Wait: a.meta.wait,
	}
	if pl != nil {
		if !pl.decided.IsZero() {
			d.Time = pl.decided
		}
		d.Path, d.Tenant, d.Priority = pl.path, pl.tenant, pl.priority
		d.Rules, d.Limit, d.ReservationID = pl.ruleNames(), pl.blocking(), pl.rid
		if d.Outcome == decisionlog.Denied {
			d.Wait = pl.result.Wait
		}
	}
	f.opts.Recorder.Decision(&d)
}

// Explanation is what a request would hit, without debiting anything: for the estimate command.
type Explanation struct {
	Estimate tokens.Estimate
	Tenant   string
	Priority string
	// TenantSource is where the tenant came from: tenant.source, or "default" when the request
	// named none and tenant.default applies.
	TenantSource string
	// Plan is the tenant's plan when a rule with limits_from: plan applies ("" otherwise), and
	// PlanSource where it came from: tenant_plans.source, or "default".
	Plan, PlanSource string
	// Rules are the names of the rules that apply, in order.
	Rules []string
	// Buckets are the buckets the request would debit (shadow ones included), with their costs.
	Buckets []bucket.Spec
	// Shadow marks the buckets that are only counted.
	Shadow []bool
	// Tag is the Redis Cluster hash tag of the decision.
	Tag string
	// Spend is the most the request can cost, reserved in its money budgets, in micro-units of
	// USD, and Price the model's price it was computed at; Priced is false when no cost limit
	// applies. Unpriced names the cost rule that refuses the request for want of a price ("").
	Spend    int64
	Price    price.Price
	Priced   bool
	Unpriced string
}

// Explain prices req and lists the rules and buckets it would hit, without touching the store.
func (f *Filter) Explain(req *authv3.CheckRequest) (*Explanation, error) {
	p := f.policy.Load()
	data, err := marshal(req)
	if err != nil {
		return nil, err
	}
	var w authzwire.Request
	if err := decode(p, data, &w); err != nil {
		return nil, err
	}
	r, err := f.parse(p, &w)
	if err != nil {
		return nil, err
	}
	est := p.Estimator.Estimate(&r.in)
	pl := f.plan(p, r, &est)
	x := &Explanation{Estimate: est, Tenant: r.tenant, Priority: r.priority, Tag: pl.enforced.Tag,
		TenantSource: p.Config.TenantSource.String()}
	if !r.identified {
		x.TenantSource = "default"
	}
	if pl.tenantPlan != nil {
		x.Plan, x.PlanSource = pl.tenantPlan.Name, planSource(p.Config, r, &w)
	}
	for _, rule := range pl.rules {
		x.Rules = append(x.Rules, rule.Name)
	}
	if pl.price != nil {
		x.Spend, x.Price, x.Priced = pl.cost[provider.Cost], *pl.price, true
	}
	if pl.unpriced != nil {
		x.Unpriced = pl.unpriced.Name
	}
	for _, b := range pl.enforced.Buckets {
		x.Buckets = append(x.Buckets, b)
		x.Shadow = append(x.Shadow, pl.shadowAll)
	}
	for _, b := range pl.shadow.Buckets {
		x.Buckets = append(x.Buckets, b)
		x.Shadow = append(x.Shadow, true)
	}
	return x, nil
}
