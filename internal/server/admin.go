package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
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
	// Reset is how many buckets a reset made full.
	Reset int `json:"reset,omitempty"`
}

// selectorOf reads the buckets' query: provider and model required, tenant, priority, plan and
// rule optional; any other parameter is an error.
func selectorOf(r *http.Request) (filter.Selector, error) {
	q := r.URL.Query()
	for k, v := range q {
		switch k {
		case "provider", "model", "tenant", "priority", "plan", "rule":
			if len(v) != 1 {
				return filter.Selector{}, errors.New("parameter " + k + " given more than once")
			}
		default:
			return filter.Selector{}, errors.New("unknown parameter " + k + " (provider, model, tenant, priority, plan, rule)")
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
func (s *Server) selectBuckets(w http.ResponseWriter, r *http.Request) (sel filter.Selector, tag string, found []filter.Selected, ok bool) {
	sel, err := selectorOf(r)
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
	fields := []zap.Field{zap.String("remote", r.RemoteAddr), zap.String("endpoint", endpoint(r)),
		zap.String("provider", sel.Provider), zap.String("model", sel.Model), zap.String("rule", sel.Rule),
		zap.String("tenant_hash", filter.TenantHash(sel.Tenant)), zap.Int("buckets", len(found))}
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
