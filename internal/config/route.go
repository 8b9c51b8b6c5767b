package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Route is what an Envoy route (or virtual host) sets through ext_authz context_extensions
// (ExtAuthzPerRoute.check_settings.context_extensions). It is immutable once parsed.
//
// Keys (all optional; values are strings, as Envoy sends them):
//
//	rule                 name of the route's limit; required with any limit key
//	tokens_per_second    tokens admitted per period (also _per_minute, _per_hour, _per_day)
//	requests_per_second  requests admitted per period (also _per_minute, _per_hour, _per_day)
//	tokens_burst         token bucket capacity for tokens (default: the limit)
//	requests_burst       token bucket capacity for requests (default: the limit)
//	algorithm            token_bucket (default) or sliding_window, for both amounts
//	per                  comma-separated scope: provider, model, tenant, priority
//	max_wait             hold a request this long for the budget instead of denying (e.g. 2s)
//	shadow               true: decide and count, always allow
//	file_rules           apply (default): the file's rules apply too; skip: only the route's limit
//	tenant               the tenant, used when tenant.source is context_extension
//	priority             the class, used when priority.source is context_extension
//	plan                 the tenant's plan, used when tenant_plans.source is context_extension
type Route struct {
	// Rule is the route's own limit, or nil. Its name is "route:" + the rule key.
	Rule *Rule
	// SkipFileRules is true when the file's rules do not apply to this route.
	SkipFileRules bool
	// Tenant is the tenant named by the route ("" when none).
	Tenant string
	// Priority is the class named by the route ("" when none), Floor its floor.
	Priority string
	Floor    float64
	// Plan is the plan named by the route (nil when none).
	Plan *Plan
}

// RouteKeys lists the context_extensions keys a route may set.
var RouteKeys = []string{
	"rule", "tokens_per_second", "tokens_per_minute", "tokens_per_hour", "tokens_per_day",
	"input_tokens_per_second", "input_tokens_per_minute", "input_tokens_per_hour", "input_tokens_per_day",
	"output_tokens_per_second", "output_tokens_per_minute", "output_tokens_per_hour", "output_tokens_per_day",
	"requests_per_second", "requests_per_minute", "requests_per_hour", "requests_per_day",
	"tokens_burst", "input_tokens_burst", "output_tokens_burst", "requests_burst", "algorithm", "per", "max_wait", "shadow", "file_rules", "tenant",
	"priority", "plan",
}

var periodSuffixes = []string{"second", "minute", "hour", "day"}

// ParseRoute validates a route's context_extensions against c (for priority class names). Every
// problem is reported at once, each naming its key.
func (c *Config) ParseRoute(ext map[string]string) (*Route, error) {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("context_extensions[%s]: %s", key, fmt.Sprintf(format, args...)))
	}
	known := map[string]bool{}
	for _, k := range RouteKeys {
		known[k] = true
	}
	keys := make([]string, 0, len(ext))
	for k := range ext {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !known[k] {
			bad(strconv.Quote(truncate(k, 64)), "unknown key (known: %s)", strings.Join(RouteKeys, ", "))
		}
	}

	rt := &Route{Tenant: ext["tenant"]}
	if v, ok := ext["priority"]; ok {
		fl, known := c.Classes[v]
		if !known {
			bad("priority", "%q is not a class under priority.classes", truncate(v, 64))
		}
		rt.Priority, rt.Floor = v, fl
	}
	if v, ok := ext["plan"]; ok {
		if rt.Plan = c.Plans[v]; rt.Plan == nil {
			bad("plan", "%q is not a plan under plans", truncate(v, 64))
		}
	}
	switch v := ext["file_rules"]; v {
	case "", "apply":
	case "skip":
		rt.SkipFileRules = true
	default:
		bad("file_rules", "%q is not apply or skip", truncate(v, 64))
	}

	spec := RuleSpec{Name: ext["rule"]}
	algorithm := ext["algorithm"]
	if algorithm == "quota" {
		bad("algorithm", "quota is not available on routes: use the file")
		algorithm = ""
	}
	amount := func(kind string) *Amount {
		var a *Amount
		for _, p := range periodSuffixes {
			key := kind + "_per_" + p
			v, ok := ext[key]
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				bad(key, "%q is not a whole number", truncate(v, 64))
				continue
			}
			if a != nil {
				bad(key, "only one %s_per_* key may be set", kind)
				continue
			}
			a = &Amount{Limit: n, Period: p, Algorithm: algorithm}
		}
		if v, ok := ext[kind+"_burst"]; ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			switch {
			case err != nil:
				bad(kind+"_burst", "%q is not a whole number", truncate(v, 64))
			case a == nil:
				bad(kind+"_burst", "needs a %s_per_* key", kind)
			default:
				a.Burst = n
			}
		}
		return a
	}
	one := func(a *Amount) Amounts {
		if a == nil {
			return nil
		}
		return Amounts{*a}
	}
	spec.Tokens = one(amount("tokens"))
	spec.InputTokens = one(amount("input_tokens"))
	spec.OutputTokens = one(amount("output_tokens"))
	spec.Requests = one(amount("requests"))
	if v, ok := ext["per"]; ok && strings.TrimSpace(v) != "" {
		for _, s := range strings.Split(v, ",") {
			spec.Per = append(spec.Per, strings.TrimSpace(s))
		}
	}
	if v, ok := ext["max_wait"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			bad("max_wait", "%q is not a non-negative duration (like 500ms or 2s)", truncate(v, 64))
		}
		spec.MaxWait = Duration(d)
	}
	switch v := ext["shadow"]; v {
	case "", "false":
	case "true":
		spec.Shadow = true
	default:
		bad("shadow", "%q is not true or false", truncate(v, 64))
	}

	hasLimit := len(spec.Tokens)+len(spec.InputTokens)+len(spec.OutputTokens)+len(spec.Requests) > 0
	switch {
	case hasLimit:
		r, err := compileRule(&spec, "context_extensions", c)
		if err != nil {
			errs = append(errs, err)
		} else {
			r.Name = "route:" + r.Name
			rt.Rule = r
		}
	case spec.Name != "" || spec.Per != nil || spec.MaxWait != 0 || spec.Shadow:
		bad("rule", "rule, per, max_wait and shadow need a tokens_per_*, input_tokens_per_*, output_tokens_per_* or requests_per_* key")
	}
	if rt.SkipFileRules && rt.Rule == nil {
		// To leave a route unlimited, disable ext_authz on it in Envoy instead.
		bad("file_rules", "skip needs a limit of the route's own")
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rt, nil
}

// truncate bounds an operator- or client-supplied value before it goes into a message.
// Callers print it with %q, which escapes control characters.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
