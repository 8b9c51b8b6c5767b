package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
)

// The admin API, on the admin port beside /metrics, /healthz and /readyz: JSON under versioned
// paths. Reads need nothing; a change needs the bearer token of Options.AdminToken, and is
// refused with 403 when none is configured. Buckets are named by the scope a request would
// debit (provider, model, tenant), resolved from the rules in force, never by scanning the store.

// adminTimeout bounds one admin call to the store.
const adminTimeout = 5 * time.Second

// noToken is the answer to a change while no token is configured.
const noToken = "changes are disabled: no admin token is configured (start with -admin-token-file FILE or ADMIN_TOKEN)"

// adminAPI registers the admin API's endpoints on mux.
func (s *Server) adminAPI(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/buckets", s.getBuckets)
	mux.HandleFunc("POST /v1/buckets/reset", s.resetBuckets)
	mux.HandleFunc("POST /v1/buckets/set", s.setBucket)
	mux.HandleFunc("POST /v1/buckets/lift", s.liftPause)
	mux.HandleFunc("GET /v1/config", s.getConfig)
}

// bucketJSON is one bucket in /v1/buckets.
type bucketJSON struct {
	Rule string `json:"rule"`
	// Kind is what it counts: tokens, input tokens, output tokens, requests, concurrent requests.
	Kind   string `json:"kind"`
	Window uint8  `json:"window"`
	// Per are the scopes the bucket is kept per; Shared is true when there are none (one
	// bucket for every request of the rule).
	Per       []string `json:"per"`
	Shared    bool     `json:"shared"`
	Shadow    bool     `json:"shadow"`
	Algorithm string   `json:"algorithm"`
	Limit     int64    `json:"limit"`
	Capacity  int64    `json:"capacity"`
	Period    string   `json:"period"`
	Remaining int64    `json:"remaining"`
	// ResetMS is the time until the bucket is full again (a quota: until its period ends), in
	// milliseconds, rounded up.
	ResetMS int64 `json:"reset_ms"`
	Leases  int64 `json:"leases"`
}

// bucketsJSON is the answer of /v1/buckets and /v1/buckets/reset.
type bucketsJSON struct {
	Provider string       `json:"provider"`
	Model    string       `json:"model"`
	Tenant   string       `json:"tenant"`
	Rule     string       `json:"rule,omitempty"`
	Tag      string       `json:"tag"`
	Buckets  []bucketJSON `json:"buckets"`
	// Reset is how many buckets a reset made full; Lifted how many a lift refilled; Set is 1
	// after a set.
	Reset  int `json:"reset,omitempty"`
	Lifted int `json:"lifted,omitempty"`
	Set    int `json:"set,omitempty"`
}

// selectorOf reads the buckets' query: provider and model required, tenant, priority, plan and
// rule optional, and the endpoint's own parameters (extra); any other parameter is an error.
func selectorOf(r *http.Request, extra ...string) (filter.Selector, error) {
	q := r.URL.Query()
	for k, v := range q {
		switch {
		case k == "provider", k == "model", k == "tenant", k == "priority", k == "plan", k == "rule", slices.Contains(extra, k):
			if len(v) != 1 {
				return filter.Selector{}, errors.New("parameter " + k + " given more than once")
			}
		default:
			known := strings.Join(append([]string{"provider", "model", "tenant", "priority", "plan", "rule"}, extra...), ", ")
			return filter.Selector{}, errors.New("unknown parameter " + k + " (" + known + ")")
		}
	}
	sel := filter.Selector{Provider: q.Get("provider"), Model: q.Get("model"), Tenant: q.Get("tenant"),
		Priority: q.Get("priority"), Plan: q.Get("plan"), Rule: q.Get("rule")}
	if sel.Provider == "" || sel.Model == "" {
		return sel, errors.New("provider and model are required")
	}
	return sel, nil
}

// selectBuckets resolves r's query to its buckets, answering the error itself (ok false).
func (s *Server) selectBuckets(w http.ResponseWriter, r *http.Request, extra ...string) (sel filter.Selector, tag string, found []filter.Selected, ok bool) {
	sel, err := selectorOf(r, extra...)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return sel, "", nil, false
	}
	if sel.Tenant == "" {
		sel.Tenant = s.filter.Policy().Config.File.Tenant.Default
	}
	tag, found = s.filter.Select(sel)
	if sel.Rule != "" && len(found) == 0 {
		writeError(w, http.StatusNotFound, "rule "+sel.Rule+" has no bucket for this provider, model and tenant")
		return sel, "", nil, false
	}
	return sel, tag, found, true
}

// peekJSON peeks found and renders them.
func (s *Server) peekJSON(ctx context.Context, sel filter.Selector, tag string, found []filter.Selected) (*bucketsJSON, error) {
	out := &bucketsJSON{Provider: sel.Provider, Model: sel.Model, Tenant: sel.Tenant, Rule: sel.Rule, Tag: tag, Buckets: []bucketJSON{}}
	if len(found) == 0 {
		return out, nil
	}
	specs := specsOf(found)
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	snaps, err := s.breaker.Peek(ctx, tag, specs)
	if err != nil {
		return nil, err
	}
	for i, f := range found {
		sp, sn := &f.Spec, snaps[i]
		per := f.Per
		if per == nil {
			per = []string{}
		}
		out.Buckets = append(out.Buckets, bucketJSON{Rule: f.Rule, Kind: f.Kind, Window: f.Window, Per: per,
			Shared: len(f.Per) == 0, Shadow: f.Shadow, Algorithm: sp.Algorithm.String(), Limit: sp.Limit,
			Capacity: sp.Capacity(), Period: f.Period, Remaining: sn.Remaining,
			ResetMS: int64((sn.Reset + time.Millisecond - 1) / time.Millisecond), Leases: sn.Leases})
	}
	return out, nil
}

func specsOf(found []filter.Selected) []bucket.Spec {
	specs := make([]bucket.Spec, len(found))
	for i := range found {
		specs[i] = found[i].Spec
	}
	return specs
}

// getBuckets answers GET /v1/buckets: the state of a scope's buckets, read without debiting.
func (s *Server) getBuckets(w http.ResponseWriter, r *http.Request) {
	sel, tag, found, ok := s.selectBuckets(w, r)
	if !ok {
		return
	}
	out, err := s.peekJSON(r.Context(), sel, tag, found)
	if err != nil {
		s.log.Warn("admin: peek failed", zap.String("endpoint", endpoint(r)), zap.Error(err))
		writeError(w, http.StatusServiceUnavailable, "store: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// resetBuckets answers POST /v1/buckets/reset: the scope's buckets are made full.
func (s *Server) resetBuckets(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	sel, tag, found, ok := s.selectBuckets(w, r)
	if !ok {
		return
	}
	fields := changeFields(r, sel, len(found))
	if len(found) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
		err := s.breaker.Reset(ctx, tag, specsOf(found))
		cancel()
		if err != nil {
			s.log.Warn("admin: reset failed", append(fields, zap.Error(err))...)
			writeError(w, http.StatusServiceUnavailable, "store: "+err.Error())
			return
		}
	}
	s.log.Info("admin: buckets reset", fields...)
	out, err := s.peekJSON(r.Context(), sel, tag, found)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store: reset done, then: "+err.Error())
		return
	}
	out.Reset = len(found)
	writeJSON(w, http.StatusOK, out)
}

// changeFields are the log fields of a change: who, which endpoint, which scope (the tenant
// hashed), never the query itself.
func changeFields(r *http.Request, sel filter.Selector, n int) []zap.Field {
	return []zap.Field{zap.String("remote", r.RemoteAddr), zap.String("endpoint", endpoint(r)),
		zap.String("provider", sel.Provider), zap.String("model", sel.Model), zap.String("rule", sel.Rule),
		zap.String("tenant_hash", filter.TenantHash(sel.Tenant)), zap.Int("buckets", n)}
}

// kindOf reads a set's kind parameter: the kind as /v1/buckets names it ("input tokens"), or
// with an underscore ("input_tokens").
func kindOf(v string) string { return strings.ReplaceAll(v, "_", " ") }

// setBucket answers POST /v1/buckets/set: one bucket of the scope (rule, kind and window name
// it) is set to hold remaining. Lowering is one atomic call of the store; raising reads the
// level and gives back the difference, so a decision between the two stays counted. A
// concurrency bucket's level is its leases: reset releases them.
func (s *Server) setBucket(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	sel, tag, found, ok := s.selectBuckets(w, r, "kind", "window", "remaining")
	if !ok {
		return
	}
	q := r.URL.Query()
	if sel.Rule == "" || q.Get("kind") == "" || q.Get("remaining") == "" {
		writeError(w, http.StatusBadRequest, "set needs rule, kind and remaining (and window, default 0)")
		return
	}
	window, err := strconv.ParseUint(q.Get("window"), 10, 8)
	if q.Get("window") == "" {
		window, err = 0, nil
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "window: not a window index: "+strconv.Quote(q.Get("window")))
		return
	}
	i := slices.IndexFunc(found, func(f filter.Selected) bool { return f.Kind == kindOf(q.Get("kind")) && f.Window == uint8(window) })
	if i < 0 {
		writeError(w, http.StatusNotFound, "rule "+sel.Rule+" has no bucket of kind "+strconv.Quote(q.Get("kind"))+
			" and window "+strconv.FormatUint(window, 10)+" for this scope")
		return
	}
	b := found[i].Spec
	if b.Algorithm == bucket.Concurrency {
		writeError(w, http.StatusBadRequest, "a concurrency bucket holds leases, not an amount: reset releases them")
		return
	}
	remaining, err := strconv.ParseInt(q.Get("remaining"), 10, 64)
	if err != nil || remaining < 0 || remaining > b.Capacity() {
		writeError(w, http.StatusBadRequest, "remaining: want an integer from 0 to the capacity, "+strconv.FormatInt(b.Capacity(), 10))
		return
	}
	fields := append(changeFields(r, sel, 1), zap.String("kind", found[i].Kind), zap.Uint64("window", window), zap.Int64("remaining", remaining))
	ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
	err = s.set(ctx, tag, b, remaining)
	cancel()
	if err != nil {
		s.log.Warn("admin: bucket set failed", append(fields, zap.Error(err))...)
		writeError(w, http.StatusServiceUnavailable, "store: "+err.Error())
		return
	}
	s.log.Info("admin: bucket set", fields...)
	out, err := s.peekJSON(r.Context(), sel, tag, found)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store: set done, then: "+err.Error())
		return
	}
	out.Set = 1
	writeJSON(w, http.StatusOK, out)
}

// set brings bucket b to remaining: Lower when it holds more, a refund of the difference when
// it holds less.
func (s *Server) set(ctx context.Context, tag string, b bucket.Spec, remaining int64) error {
	if err := s.store.Lower(ctx, tag, []bucket.Level{{Spec: b, Remaining: remaining}}); err != nil {
		return err
	}
	snap, err := s.breaker.Peek(ctx, tag, []bucket.Spec{b})
	if err != nil {
		return err
	}
	if d := remaining - snap[0].Remaining; d > 0 {
		return s.store.Adjust(ctx, tag, []bucket.Adjustment{{Spec: b, Delta: d}})
	}
	return nil
}

// refill gives every bucket of specs back what it lacks of its capacity (a refund is never
// above the capacity: a decision between the read and the refund stays counted).
func (s *Server) refill(ctx context.Context, tag string, specs []bucket.Spec) error {
	snaps, err := s.breaker.Peek(ctx, tag, specs)
	if err != nil {
		return err
	}
	adj := make([]bucket.Adjustment, 0, len(specs))
	for i, b := range specs {
		if d := b.Capacity() - snaps[i].Remaining; d > 0 {
			adj = append(adj, bucket.Adjustment{Spec: b, Delta: d})
		}
	}
	if len(adj) == 0 {
		return nil
	}
	return s.store.Adjust(ctx, tag, adj)
}

// liftPause answers POST /v1/buckets/lift: the scope's token buckets and sliding windows are
// refilled, undoing a provider 429's pause (which lowers them so that nothing fits before the
// provider's retry-after), while its quotas keep what they counted and its in-flight leases stay
// held.
func (s *Server) liftPause(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r) {
		return
	}
	sel, tag, found, ok := s.selectBuckets(w, r)
	if !ok {
		return
	}
	var rate []bucket.Spec
	for _, f := range found {
		if a := f.Spec.Algorithm; a == bucket.TokenBucket || a == bucket.SlidingWindow {
			rate = append(rate, f.Spec)
		}
	}
	fields := changeFields(r, sel, len(rate))
	if len(rate) > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), adminTimeout)
		err := s.refill(ctx, tag, rate)
		cancel()
		if err != nil {
			s.log.Warn("admin: lift failed", append(fields, zap.Error(err))...)
			writeError(w, http.StatusServiceUnavailable, "store: "+err.Error())
			return
		}
	}
	s.log.Info("admin: pause lifted", fields...)
	out, err := s.peekJSON(r.Context(), sel, tag, found)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "store: lift done, then: "+err.Error())
		return
	}
	out.Lifted = len(rate)
	writeJSON(w, http.StatusOK, out)
}

// authorized checks a change's bearer token, answering the refusal itself: 403 while no token
// is configured, 401 for a missing or wrong one. The comparison takes the same time whatever
// the token (both are hashed to one length first).
func (s *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	refuse := func(status int, why, msg string) bool {
		s.log.Warn("admin: change refused", zap.String("remote", r.RemoteAddr), zap.String("endpoint", endpoint(r)), zap.String("reason", why))
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="llm-ratelimit admin"`)
		}
		writeError(w, status, msg)
		return false
	}
	if s.opts.AdminToken == "" {
		return refuse(http.StatusForbidden, "no_token_configured", noToken)
	}
	got, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found || got == "" {
		return refuse(http.StatusUnauthorized, "token_missing", "a change needs the header Authorization: Bearer <admin token>")
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.opts.AdminToken))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		return refuse(http.StatusUnauthorized, "token_wrong", "the admin token is wrong")
	}
	return true
}

// configJSON is the answer of /v1/config: the file in force and its rules, without secrets
// (no credentials, salts or hashes of keys: only what the rules match and limit).
type configJSON struct {
	Source       string     `json:"source"`
	SHA256       string     `json:"sha256"`
	Shadow       bool       `json:"shadow"`
	TenantSource string     `json:"tenant_source"`
	FailureMode  string     `json:"failure_mode"`
	Rules        []ruleJSON `json:"rules"`
}

type ruleJSON struct {
	Name          string            `json:"name"`
	Match         map[string]string `json:"match"`
	Per           []string          `json:"per"`
	Limits        []limitJSON       `json:"limits"`
	MaxConcurrent int64             `json:"max_concurrent,omitempty"`
	MaxWaitMS     int64             `json:"max_wait_ms,omitempty"`
	Shadow        bool              `json:"shadow,omitempty"`
	LimitsFrom    string            `json:"limits_from,omitempty"`
}

type limitJSON struct {
	Dimension string `json:"dimension"`
	Window    uint8  `json:"window"`
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Capacity  int64  `json:"capacity"`
	// Period is a token bucket's or sliding window's period ("1m0s"), a quota's calendar
	// ("day", "month") with its zone.
	Period string `json:"period"`
}

// getConfig answers GET /v1/config.
func (s *Server) getConfig(w http.ResponseWriter, _ *http.Request) {
	c := s.filter.Policy().Config
	out := configJSON{Source: c.Source, SHA256: c.SHA256, Shadow: c.File.Shadow, TenantSource: c.TenantSource.String(),
		FailureMode: c.FailureMode.String(), Rules: []ruleJSON{}}
	for _, r := range c.Rules {
		rj := ruleJSON{Name: r.Name, Match: map[string]string{}, Per: r.Per.Names(), Limits: []limitJSON{},
			MaxWaitMS: r.MaxWait.Milliseconds(), Shadow: r.Shadow}
		for k, g := range map[string]config.Glob{"provider": r.Provider, "host": r.Host, "model": r.Model, "path": r.Path,
			"tenant": r.Tenant, "priority": r.Priority} {
			if !g.Any() {
				rj.Match[k] = g.String()
			}
		}
		if r.FromPlan {
			rj.LimitsFrom = "plan"
		}
		for _, l := range r.Limits {
			rj.Limits = append(rj.Limits, limitJSON{Dimension: l.Dim.String(), Window: l.Window, Algorithm: l.Algorithm.String(),
				Limit: l.Limit.Limit, Capacity: l.Capacity(), Period: periodOf(&l.Limit)})
		}
		if r.Concurrent != nil {
			rj.MaxConcurrent = r.Concurrent.Limit
		}
		out.Rules = append(out.Rules, rj)
	}
	writeJSON(w, http.StatusOK, out)
}

// periodOf is a limit's period for /v1/config.
func periodOf(l *config.Limit) string {
	if l.Algorithm != bucket.Quota {
		return l.Period.String()
	}
	zone := "UTC"
	if l.Zone != nil {
		zone = l.Zone.String()
	}
	if l.Calendar == bucket.Month {
		return "month (" + zone + ")"
	}
	return "day (" + zone + ")"
}

// endpoint names r's endpoint for logs: method and path, without the query (which names a
// tenant).
func endpoint(r *http.Request) string { return r.Method + " " + r.URL.Path }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // an error is a client gone: nothing to tell it
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
