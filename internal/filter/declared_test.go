package filter

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
)

const declaredLimits = `
providers:
  - {name: mistral, hosts: [api.mistral.ai], dialect: openai, encoding: o200k_base}
  - {name: kimi, hosts: ["*.moonshot.ai"], dialect: anthropic}
rules:
  - name: per-provider
    per: [provider]
    tokens: {limit: 100000, period: minute}
  - name: mistral-requests
    match: {provider: mistral}
    requests: {limit: 2, period: minute}
  - name: openai-requests
    match: {provider: openai}
    requests: {limit: 100, period: minute}
  - name: moonshot-host
    match: {host: "api.moonshot.*"}
    requests: {limit: 1, period: minute}
`

// hostRequest is a POST of body to host and path, as Envoy sends it.
func hostRequest(host, path, body string) *authv3.CheckRequest {
	h := map[string]string{":path": path, ":method": "POST", ":authority": host, "content-type": "application/json"}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: path, Host: host, Headers: h, RawBody: []byte(body)},
	}}}
}

// A declared provider is itself for every rule, bucket and answer: its own rules apply, its
// per: [provider] bucket is its own, its denials are in its dialect's format, and the built-in
// provider of the same dialect is untouched by it.
func TestDeclaredProviders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, declaredLimits, Options{})
	chat := `{"model":"mistral-small-latest","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`
	gpt := `{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`
	msgs := `{"model":"kimi-k2","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`
	for i, c := range []struct {
		host, path, body string
		provider, api    string
		rules            string
		status           int32 // 0: allowed
		bodyPrefix       string
	}{
		{"API.Mistral.ai:443", "/v1/chat/completions", chat, "mistral", "chat_completions", "per-provider,mistral-requests", 0, ""},
		{"api.openai.com", "/v1/chat/completions", gpt, "openai", "chat_completions", "per-provider,openai-requests", 0, ""},
		// Another path of the host: its unpriced API, counted by its request limits only.
		{"api.mistral.ai", "/v1/files", `{}`, "mistral", "unpriced", "per-provider,mistral-requests", 0, ""},
		// Its third request: its own rule denies it, in OpenAI's error format.
		{"api.mistral.ai", "/v1/chat/completions", chat, "mistral", "chat_completions", "per-provider,mistral-requests", 429,
			`{"error":{"message":"Rate limit reached for mistral-requests (requests per minute)`},
		// OpenAI's requests are still admitted: they share none of its buckets.
		{"api.openai.com", "/v1/chat/completions", gpt, "openai", "chat_completions", "per-provider,openai-requests", 0, ""},
		{"api.openai.com", "/v1/chat/completions", gpt, "openai", "chat_completions", "per-provider,openai-requests", 0, ""},
		// An Anthropic-compatible host: matched by its host glob, denied in Anthropic's format.
		{"api.moonshot.ai", "/anthropic/v1/messages", msgs, "kimi", "messages", "per-provider,moonshot-host", 0, ""},
		{"api.moonshot.ai", "/anthropic/v1/messages", msgs, "kimi", "messages", "per-provider,moonshot-host", 429,
			`{"type":"error","error":{"type":"rate_limit_error"`},
		// Under the same wildcard but not the rule's host glob.
		{"eu.moonshot.ai", "/anthropic/v1/messages", msgs, "kimi", "messages", "per-provider", 0, ""},
	} {
		resp := e.answer(t, context.Background(), hostRequest(c.host, c.path, c.body)).Response()
		md := resp.GetDynamicMetadata().GetFields()
		if got := md["provider"].GetStringValue(); got != c.provider {
			t.Errorf("%d %s%s: provider %q, want %q", i, c.host, c.path, got, c.provider)
		}
		if got := md["api"].GetStringValue(); got != c.api {
			t.Errorf("%d %s%s: api %q, want %q", i, c.host, c.path, got, c.api)
		}
		if got := md["rules"].GetStringValue(); got != c.rules {
			t.Errorf("%d %s%s: rules %q, want %q", i, c.host, c.path, got, c.rules)
		}
		denied := resp.GetDeniedResponse()
		switch {
		case c.status == 0 && denied != nil:
			t.Errorf("%d %s%s: denied %d %s, want allowed", i, c.host, c.path, denied.GetStatus().GetCode(), denied.GetBody())
		case c.status != 0 && (denied == nil || int32(denied.GetStatus().GetCode()) != c.status):
			t.Errorf("%d %s%s: %v, want %d", i, c.host, c.path, resp, c.status)
		case c.status != 0 && !strings.HasPrefix(denied.GetBody(), c.bodyPrefix):
			t.Errorf("%d %s%s: body %s, want it to start with %s", i, c.host, c.path, denied.GetBody(), c.bodyPrefix)
		}
	}

	// per: [provider] keeps each provider's bucket under its own name.
	for host, want := range map[string]string{"api.mistral.ai": "|p7:mistral", "api.openai.com": "|p6:openai", "x.moonshot.ai": "|p4:kimi"} {
		x, err := e.f.Explain(hostRequest(host, "/v1/chat/completions", chat))
		if err != nil {
			t.Fatal(err)
		}
		if len(x.Buckets) == 0 || !strings.HasSuffix(x.Buckets[0].Name, want) || x.Tag != strings.TrimLeft(want, "|p0123456789:") {
			t.Errorf("%s: buckets %+v tag %q, want a per-provider bucket ending in %s", host, x.Buckets, x.Tag, want)
		}
	}
}

// A reload that declares a provider makes its host its own from the next decision; one that
// drops it returns the host to the path rule.
func TestDeclaredProvidersReload(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "rules: [{name: all, per: [provider], requests: {limit: 100, period: minute}}]", Options{})
	req := hostRequest("api.groq.com", "/openai/v1/chat/completions", `{"model":"llama-3.3-70b","messages":[]}`)
	provider := func() string {
		return e.answer(t, context.Background(), req).Response().GetDynamicMetadata().GetFields()["provider"].GetStringValue()
	}
	// Without a declaration, /openai/ makes the path Azure's.
	if got := provider(); got != "azure" {
		t.Fatalf("before: provider %q, want the path rule's azure", got)
	}
	for _, step := range []struct{ file, want string }{
		{"providers: [{name: groq, hosts: [api.groq.com], dialect: openai}]\nrules: [{name: all, per: [provider], requests: {limit: 100, period: minute}}]", "groq"},
		{"rules: [{name: all, per: [provider], requests: {limit: 100, period: minute}}]", "azure"},
	} {
		c, err := config.Parse([]byte(step.file), "reload")
		if err != nil {
			t.Fatal(err)
		}
		e.f.SetPolicy(policyFor(t, c))
		if got := provider(); got != step.want {
			t.Errorf("after a reload to %q: provider %q, want %q", step.file, got, step.want)
		}
	}
}

// The metrics and the decision log name a declared provider by its name.
func TestDeclaredProviderLabels(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	e := newEnv(t, declaredLimits, Options{Logger: zap.New(core), Metrics: NewMetrics(reg)})
	e.answer(t, context.Background(), hostRequest("api.mistral.ai", "/v1/chat/completions",
		`{"model":"mistral-small-latest","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`))
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var decisions string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "llm_ratelimit_decisions_total{") {
			decisions += l + "\n"
		}
	}
	if !strings.Contains(decisions, `provider="mistral"`) || strings.Contains(decisions, `provider="openai"`) {
		t.Errorf("decision metrics:\n%s", decisions)
	}
	found := false
	for _, l := range logs.FilterMessage("decision").All() {
		found = found || l.ContextMap()["provider"] == "mistral"
	}
	if !found {
		t.Errorf("no decision logged for provider mistral: %v", logs.All())
	}
}
