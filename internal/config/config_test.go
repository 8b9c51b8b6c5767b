package config

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

func TestExampleIsValid(t *testing.T) {
	t.Parallel()
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) == 0 {
		t.Fatal("the example has no rules")
	}
	if got := c.Rules[0].Limit(provider.Tokens); got.Limit != 30000 || got.Period != time.Minute || got.Algorithm != bucket.TokenBucket {
		t.Errorf("first rule tokens = %+v", got)
	}
}

// Every problem of a file is reported at once, each with its key path or line.
func TestInvalidFileReportsEveryProblem(t *testing.T) {
	t.Parallel()
	_, err := Load("testdata/invalid.yaml")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Load = %v, want *Error", err)
	}
	want := []string{
		"line 11: field unknown_key not found in type config.File",
		`tenant.source: "cookie" is not one of none, header, principal, context_extension, claim, api_key`,
		`priority.classes.batch.floor: 1.5 is not in [0, 1)`,
		`priority.default: "vip" is not a class under priority.classes`,
		`unknown: "sometimes" is not one of allow, requests_only, deny`,
		`failure.mode: "panic" is not one of deny, allow, local`,
		`failure.replicas: 0 must be at least 1`,
		`rules[0].name: "bad name!" must be 1 to 64 of [A-Za-z0-9._-]`,
		`rules[0].match.provider: "watsonx" is not one of openai, azure, anthropic, bedrock, gemini, vertex`,
		`rules[0].per[0]: "region" is not one of provider, model, tenant, priority`,
		`rules[0].tokens.limit: 0 is not in [1, 1000000000000]`,
		`rules[0].tokens.period: "fortnight" is not second, minute, hour, day, or a duration from 1s to 744h (31d)`,
		`rules[1].tokens.period: month is a calendar period: use algorithm: quota`,
		`rules[2].requests.burst: applies to token_bucket only`,
		`rules[2].max_wait: 2h0m0s is above 1m (a held request must finish within Envoy's ext_authz timeout)`,
		`rules[3].tokens.period: "minute": a quota resets per calendar day or month`,
		`rules[4].tokens: a rule needs tokens, input_tokens, output_tokens, requests, cost or max_concurrent`,
	}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), "testdata/invalid.yaml: 17 problem(s)") {
		t.Errorf("message does not name the file and count: %v", err)
	}
}

func TestDuplicateRuleNames(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("rules:\n- {name: a, tokens: {limit: 1, period: second}}\n- {name: a, tokens: {limit: 1, period: second}}\n"), "dup")
	if err == nil || !strings.Contains(err.Error(), `rules[1].name: "a" is already the name of rules[0]`) {
		t.Fatalf("err = %v", err)
	}
}

func TestBadDuration(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte("rules:\n- name: a\n  tokens: {limit: 1, period: second}\n  max_wait: soon\n"), "d")
	if err == nil || !strings.Contains(err.Error(), `line 4: "soon" is not a non-negative duration`) {
		t.Fatalf("err = %v", err)
	}
}

func TestEmptyFileIsValidAndUnlimited(t *testing.T) {
	t.Parallel()
	c, err := Parse(nil, "empty")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Rules) != 0 || c.File.Failure.Mode != "deny" || c.File.MaxHeld != 1024 {
		t.Errorf("defaults not applied: %+v", c.File)
	}
}

func TestAmounts(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
rules:
  - name: q
    tokens: {limit: 1000000, period: month, algorithm: quota}
    requests: {limit: 10, period: 90s, algorithm: sliding_window}
  - name: b
    tokens: {limit: 100, period: hour, burst: 500}
`), "a")
	if err != nil {
		t.Fatal(err)
	}
	q, b := c.Rules[0], c.Rules[1]
	if q.Limit(provider.Tokens).Algorithm != bucket.Quota || q.Limit(provider.Tokens).Calendar != bucket.Month {
		t.Errorf("quota: %+v", q.Limit(provider.Tokens))
	}
	if q.Limit(provider.Requests).Period != 90*time.Second || q.Limit(provider.Requests).Algorithm != bucket.SlidingWindow {
		t.Errorf("sliding window: %+v", q.Limit(provider.Requests))
	}
	if b.Limit(provider.Tokens).Capacity() != 500 || b.Limit(provider.Requests) != nil {
		t.Errorf("burst: %+v", b.Limit(provider.Tokens))
	}
	s := b.Limit(provider.Tokens).Spec("n", 7, 0.2)
	if s.Burst != 500 || s.Limit != 100 || s.Period != time.Hour || s.Cost != 7 || s.Floor != 0.2 {
		t.Errorf("spec: %+v", s)
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"", "anything", true},
		{"*", "", true},
		{"gpt-4o", "gpt-4o", true},
		{"gpt-4o", "gpt-4o-mini", false},
		{"gpt-4o*", "gpt-4o-mini", true},
		{"gpt-4o*", "gpt-4", false},
		{"*mini", "gpt-4o-mini", true},
		{"gpt-?o", "gpt-4o", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXbYY", false},
		{"/v1/*/completions", "/v1/chat/completions", true},
		{"*a*a*a*a*a*b", strings.Repeat("a", 5000), false},
	} {
		if got := NewGlob(tc.pattern).Match(tc.s); got != tc.want {
			t.Errorf("Glob(%q).Match(%q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestParseRoute(t *testing.T) {
	t.Parallel()
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := c.ParseRoute(map[string]string{
		"rule": "internal", "tokens_per_minute": "2000", "requests_per_second": "5", "tokens_burst": "4000",
		"per": "tenant, model", "max_wait": "1500ms", "file_rules": "skip", "tenant": "team-a",
	})
	if err != nil {
		t.Fatal(err)
	}
	r := rt.Rule
	if r.Name != "route:internal" || r.Limit(provider.Tokens).Limit != 2000 || r.Limit(provider.Tokens).Period != time.Minute || r.Limit(provider.Tokens).Burst != 4000 ||
		r.Limit(provider.Requests).Limit != 5 || r.Limit(provider.Requests).Period != time.Second || r.Per != PerTenant|PerModel || r.MaxWait != 1500*time.Millisecond {
		t.Errorf("rule = %+v tokens %+v requests %+v", r, r.Limit(provider.Tokens), r.Limit(provider.Requests))
	}
	if !rt.SkipFileRules || rt.Tenant != "team-a" {
		t.Errorf("route = %+v", rt)
	}

	rt, err = c.ParseRoute(map[string]string{"tenant": "t"})
	if err != nil || rt.Rule != nil || rt.Tenant != "t" {
		t.Errorf("tenant only: %+v, %v", rt, err)
	}
}

func TestParseRouteReportsEveryBadKey(t *testing.T) {
	t.Parallel()
	c, _ := Default()
	_, err := c.ParseRoute(map[string]string{
		"rule": "r", "tokens_per_minute": "lots", "tokens_per_hour": "5", "requests_per_minute": "10",
		"requests_per_day": "20", "shadow": "maybe", "file_rules": "never", "color": "blue\n", "algorithm": "quota",
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{
		`context_extensions["color"]: unknown key`,
		`context_extensions[tokens_per_minute]: "lots" is not a whole number`,
		`context_extensions[requests_per_day]: only one requests_per_* key may be set`,
		`context_extensions[shadow]: "maybe" is not true or false`,
		`context_extensions[file_rules]: "never" is not apply or skip`,
		`context_extensions[algorithm]: quota is not available on routes`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	_, err = c.ParseRoute(map[string]string{"file_rules": "skip"})
	if err == nil || !strings.Contains(err.Error(), "skip needs a limit of the route's own") {
		t.Errorf("skip without a limit: %v", err)
	}
	_, err = c.ParseRoute(map[string]string{"rule": "x"})
	if err == nil || !strings.Contains(err.Error(), "need a tokens_per_*, input_tokens_per_*, output_tokens_per_* or requests_per_* key") {
		t.Errorf("rule without amounts: %v", err)
	}
}

// A valid change takes effect; an invalid one is rejected and the old configuration stays.
func TestWatchReloads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "limits.yaml")
	write := func(s string) {
		// Replace the file atomically, as editors and ConfigMap updates do.
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("rules: [{name: a, tokens: {limit: 1, period: second}}]\n")
	loads, errs := make(chan *Config, 4), make(chan error, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		done <- Watch(ctx, path, WatchOptions{
			OnLoad: func(c *Config) { loads <- c }, OnError: func(err error) { errs <- err },
			Settle: 20 * time.Millisecond, Poll: -1,
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The watcher may not be registered yet: keep writing new valid content until it is seen.
	deadline := time.After(10 * time.Second)
	for i := 2; ; i++ {
		write("rules: [{name: b, tokens: {limit: " + string(rune('0'+i%10)) + ", period: second}}]\n")
		select {
		case c := <-loads:
			if c.Rules[0].Name != "b" {
				t.Fatalf("loaded %q", c.Rules[0].Name)
			}
			goto loaded
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no reload seen")
		}
	}
loaded:
	write("rules: [{name: c, tokens: {limit: 0, period: second}}]\n")
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "rules[0].tokens.limit") {
			t.Errorf("reload error = %v", err)
		}
	case c := <-loads:
		t.Fatalf("invalid file loaded: %+v", c.Rules)
	case <-time.After(10 * time.Second):
		t.Fatal("invalid file not reported")
	}
}

func TestMaxConcurrentAndFeedback(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`rules:
  - name: inflight
    match: {provider: openai}
    per: [model]
    max_concurrent: 8
  - name: mirror
    tokens: {limit: 1000, period: minute}
    provider_feedback: true
    max_concurrent: 2
    lease_ttl: 90s
credentials: {injected: true}
`), "t")
	if err != nil {
		t.Fatal(err)
	}
	in, mirror := c.Rules[0], c.Rules[1]
	if in.Concurrent == nil || in.Concurrent.Limit != 8 || in.Concurrent.Period != DefaultLeaseTTL || in.Concurrent.Algorithm != bucket.Concurrency || in.Limit(provider.Tokens) != nil {
		t.Errorf("inflight: %+v concurrent %+v", in, in.Concurrent)
	}
	if !mirror.Feedback || mirror.Concurrent.Period != 90*time.Second {
		t.Errorf("mirror: %+v concurrent %+v", mirror, mirror.Concurrent)
	}
	_, err = Parse([]byte(`rules:
  - name: a
    max_concurrent: -1
  - name: b
    requests: {limit: 5, period: minute}
    lease_ttl: 1m
    provider_feedback: true
  - name: c
    max_concurrent: 1
    lease_ttl: 100ms
  - name: d
    max_concurrent: 2
    provider_feedback: true
credentials: {injected: true}
`), "t")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("want a config error, got %v", err)
	}
	want := []string{
		"rules[0].max_concurrent: -1 is not in [0, 1000000000000]",
		"rules[1].lease_ttl: applies with max_concurrent only",
		"rules[2].lease_ttl: 100ms is not from 1s to 744h",
		"rules[3].provider_feedback: needs a limit: the provider's reports lower the rule's buckets",
	}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

func TestRefund(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("rules: [{name: a, tokens: {limit: 10, period: minute}, refund: true}, {name: b, tokens: {limit: 10, period: minute}}]\n"), "r")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Rules[0].Refund || c.Rules[1].Refund {
		t.Errorf("refund = %v, %v; want true, false (the default)", c.Rules[0].Refund, c.Rules[1].Refund)
	}
	// A sliding window refunds into the sub-window its reservation was counted in.
	if _, err := Parse([]byte("rules: [{name: a, tokens: {limit: 10, period: minute, algorithm: sliding_window}, refund: true}]\n"), "r"); err != nil {
		t.Errorf("refund on a sliding window: %v", err)
	}
	_, err = Parse([]byte("rules: [{name: b, requests: {limit: 1, period: second}, refund: true}]\n"), "r")
	if want := "rules[0].refund: needs tokens"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("missing %q in %v", want, err)
	}
}

func TestSettlement(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("rules: []\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	want := Settlement{KeepOnClientError: 0.25, UsageFactor: 8, MaxUsageTokens: 2_000_000, Decode: []string{"gzip", "deflate", "br", "zstd"}}
	if diff := cmp.Diff(want, c.File.Settlement); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	// Explicit zeros and an empty list are values, not "unset".
	c, err = Parse([]byte("settlement: {keep_on_client_error: 0, usage_factor: 0, decode: []}\n"), "t")
	if err != nil {
		t.Fatal(err)
	}
	want = Settlement{MaxUsageTokens: 2_000_000, Decode: []string{}}
	if diff := cmp.Diff(want, c.File.Settlement); diff != "" {
		t.Errorf("explicit zeros (-want +got):\n%s", diff)
	}
	_, err = Parse([]byte("settlement: {keep_on_client_error: 1.5, usage_factor: 0.5, max_usage_tokens: 0, decode: [gzip, lzw, gzip]}\n"), "t")
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a config error", err)
	}
	for _, key := range []string{"settlement.keep_on_client_error", "settlement.usage_factor", "settlement.max_usage_tokens",
		"settlement.decode[1]", "settlement.decode[2]"} {
		if !strings.Contains(err.Error(), key+":") {
			t.Errorf("no problem reported for %s in:\n%v", key, err)
		}
	}
}

// The choices a decision branches on are compiled to typed values once; a value the file does
// not spell is rejected, never read as the zero choice.
func TestTypedChoices(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		yaml   string
		source TenantSource
		header string
		mode   FailureMode
		refuse bool
	}{
		{"", TenantNone, "", FailDeny, false},
		{"tenant: {source: header, header: X-Tenant}\nfailure: {mode: local}\n", TenantFromHeader, "x-tenant", FailLocal, false},
		{"tenant: {source: principal, header: X-Tenant}\nfailure: {mode: allow}\n", TenantFromPrincipal, "", FailAllow, false},
		{"tenant: {source: context_extension}\npricing: {unreadable: {policy: refuse}}\n", TenantFromContextExtension, "", FailDeny, true},
	} {
		c, err := Parse([]byte(tc.yaml), t.Name())
		if err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		if c.TenantSource != tc.source || c.TenantHeader != tc.header || c.FailureMode != tc.mode || c.RefuseUnreadable != tc.refuse {
			t.Errorf("%q: source %d header %q mode %s refuse %v; want %d %q %s %v", tc.yaml,
				c.TenantSource, c.TenantHeader, c.FailureMode, c.RefuseUnreadable, tc.source, tc.header, tc.mode, tc.refuse)
		}
	}
	for _, bad := range []string{"tenant: {source: Header}\n", "failure: {mode: open}\n", "tenant: {source: header}\n"} {
		if _, err := Parse([]byte(bad), t.Name()); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestAccounting(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
accounting:
  - {provider: openai, model: "gpt-4o*", counting: max_of_chars}
  - {provider: anthropic, model: "claude-sonnet-4*", output_weight: 5, cache_reads: counted, settles: [output_tokens]}
  - {provider: azure, unset_output: default}
`), "accounting")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		provider, model string
		base, want      provider.Profile
	}{
		{"openai", "gpt-4o-mini", provider.Profile{}, provider.Profile{Counting: provider.MaxOfChars}},
		{"openai", "gpt-4.1", provider.Profile{}, provider.Profile{}},
		// Only the fields the entry names change.
		{"anthropic", "claude-sonnet-4-5", provider.Profile{CacheReadsFree: true, Settles: 6},
			provider.Profile{OutputWeight: 5, Settles: provider.DimensionSet(0).With(provider.OutputTokens)}},
		{"azure", "gpt-4o", provider.Profile{UnsetOutput: provider.ContextWindow}, provider.Profile{}},
	} {
		p := tc.base
		c.Apply(&p, tc.provider, tc.model)
		if p != tc.want {
			t.Errorf("%s %s: %+v, want %+v", tc.provider, tc.model, p, tc.want)
		}
	}
	_, err = Parse([]byte(`
accounting:
  - {provider: watsonx, counting: most, unset_output: all, output_weight: 101, cache_reads: maybe, settles: [requests]}
`), "bad")
	for _, want := range []string{
		`accounting[0].provider: "watsonx" is not one of openai, azure, anthropic, bedrock, gemini, vertex`,
		`accounting[0].counting: "most" is not sum or max_of_chars`,
		`accounting[0].unset_output: "all" is not default or context_window`,
		`accounting[0].output_weight: 101 is not in [1, 100]`,
		`accounting[0].cache_reads: "maybe" is not counted or free`,
		`accounting[0].settles[0]: "requests" is not tokens, input_tokens or output_tokens`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in: %v", want, err)
		}
	}
}

func TestDimensionWindows(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
rules:
  - name: azure
    input_tokens: {limit: 30000, period: minute}
    requests:
      - {limit: 600, period: minute}
      - {limit: 10, period: second}
`), "windows")
	if err != nil {
		t.Fatal(err)
	}
	r := c.Rules[0]
	var got []string
	for _, l := range r.Limits {
		got = append(got, fmt.Sprintf("%s[%d] %d/%v", l.Dim, l.Window, l.Limit.Limit, l.Period))
	}
	want := []string{"input_tokens[0] 30000/1m0s", "requests[0] 600/1m0s", "requests[1] 10/1s"}
	if diff := cmp.Diff(want, got); diff != "" || r.SharedSlots() != 2 || r.Has(provider.Tokens) {
		t.Errorf("limits (-want +got):\n%s shared %d", diff, r.SharedSlots())
	}
	_, err = Parse([]byte(`
rules:
  - name: many
    requests: [{limit: 1, period: second}, {limit: 2, period: second}, {limit: 3, period: second}, {limit: 4, period: second}, {limit: 5, period: second}]
`), "many")
	if err == nil || !strings.Contains(err.Error(), "5 windows: at most 4") {
		t.Errorf("five windows: %v", err)
	}
}

// A quota may follow an IANA time zone, validated at load; other algorithms have no calendar.
func TestQuotaTimezone(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
rules:
  - name: rpd
    match: {provider: gemini}
    requests: {limit: 1500, period: day, algorithm: quota, timezone: America/Los_Angeles}
`), "tz")
	if err != nil {
		t.Fatal(err)
	}
	l := c.Rules[0].Limit(provider.Requests)
	if l.Zone == nil || l.Zone.String() != "America/Los_Angeles" || l.Spec("x", 1, 0).Zone != l.Zone {
		t.Errorf("zoned quota: %+v", l)
	}
	_, err = Parse([]byte(`
rules:
  - name: a
    requests: {limit: 1, period: day, algorithm: quota, timezone: Mars/Olympus_Mons}
  - name: b
    requests: {limit: 1, period: minute, timezone: America/Los_Angeles}
  - name: c
    requests: {limit: 1, period: month, algorithm: quota, timezone: Local}
`), "tz")
	var ce *Error
	if !errors.As(err, &ce) || len(ce.Problems) != 3 ||
		!strings.HasPrefix(ce.Problems[0], `rules[0].requests.timezone: "Mars/Olympus_Mons" is not an IANA time zone`) ||
		ce.Problems[1] != `rules[1].requests.timezone: applies to algorithm: quota only (calendar periods)` ||
		!strings.HasPrefix(ce.Problems[2], `rules[2].requests.timezone: Local depends on the host`) {
		t.Errorf("problems: %v", err)
	}
}

func TestLearn(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("rules: []\n"), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	if c.LearnEnabled || c.Learn != learn.DefaultPolicy {
		t.Errorf("defaults: enabled %v policy %+v; want false %+v", c.LearnEnabled, c.Learn, learn.DefaultPolicy)
	}
	c, err = Parse([]byte("pricing: {learn: {enabled: true, quantile: 0.95, min_samples: 20, min_factor: 0.6, max_factor: 1.2, half_life: 30s}}\n"), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	want := learn.Policy{Quantile: 0.95, MinSamples: 20, Min: 0.6, Max: 1.2, HalfLife: 30 * time.Second}
	if !c.LearnEnabled || c.Learn != want {
		t.Errorf("set: enabled %v policy %+v; want true %+v", c.LearnEnabled, c.Learn, want)
	}
	_, err = Parse([]byte("pricing: {learn: {quantile: 2, min_samples: 0, min_factor: 1.5, max_factor: 0.5, half_life: 0s, when: always}}\n"), t.Name())
	for _, w := range []string{"quantile", "min_samples", "min_factor", "max_factor", "half_life", "when"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("bad learn: %v; want it to name %s", err, w)
		}
	}
}

// reserve_output: learned is for the operator's own budgets and for providers that count output
// as generated; a rule mirroring a provider that counts max_tokens at admission is refused.
func TestReserveOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		rule string
		want string // "" valid; else a substring of the error
	}{
		{"{name: t, match: {provider: openai}, per: [tenant], tokens: {limit: 1000, period: minute}, reserve_output: learned}", ""},
		{"{name: t, match: {provider: anthropic}, per: [tenant], output_tokens: {limit: 1000, period: minute}, reserve_output: learned}", ""},
		{"{name: t, match: {provider: gemini}, per: [model], provider_feedback: true, tokens: {limit: 1000, period: minute}, reserve_output: learned}", ""},
		{"{name: t, match: {provider: openai}, per: [model], tokens: {limit: 1000, period: minute}, reserve_output: max_tokens}", ""},
		{"{name: t, match: {provider: openai}, per: [model], provider_feedback: true, tokens: {limit: 1000, period: minute}, reserve_output: learned}", `learned on a provider_feedback rule of "openai"`},
		{"{name: t, match: {provider: anthropic}, per: [model], provider_feedback: true, output_tokens: {limit: 1000, period: minute}, reserve_output: learned}", `rule of "anthropic"`},
		{"{name: t, match: {provider: vertex, model: claude-*}, per: [model], provider_feedback: true, tokens: {limit: 1000, period: minute}, reserve_output: learned}", `rule of "vertex"`},
		{"{name: t, per: [model], provider_feedback: true, tokens: {limit: 1000, period: minute}, reserve_output: learned}", `rule of ""`},
		{"{name: t, match: {provider: openai}, per: [tenant], input_tokens: {limit: 1000, period: minute}, reserve_output: learned}", "learned needs tokens or output_tokens"},
		{"{name: t, match: {provider: openai}, per: [tenant], tokens: {limit: 1000, period: minute}, reserve_output: guess}", `"guess" is not max_tokens or learned`},
	} {
		c, err := Parse([]byte("credentials: {injected: true}\nrules:\n  - "+tc.rule+"\n"), t.Name())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.rule, err)
		case tc.want == "" && !c.Rules[0].LearnedOutput && strings.Contains(tc.rule, "learned"):
			t.Errorf("%s: LearnedOutput false", tc.rule)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.rule, err, tc.want)
		}
	}
}
