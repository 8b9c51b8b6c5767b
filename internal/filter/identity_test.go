package filter

import (
	"context"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// withIdentity is a chat request from principal carrying a (possibly spoofed) tenant header.
func withIdentity(principal, tenantHeader string) *authv3.CheckRequest {
	h := map[string]string{}
	if tenantHeader != "" {
		h["x-tenant-id"] = tenantHeader
	}
	req := hostileRequest("/v1/chat/completions", []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":5}`), h)
	if principal != "" {
		req.Attributes.Source = &authv3.AttributeContext_Peer{Principal: principal}
	}
	return req
}

// The tenant comes from a header only when tenant.source says so; with the mTLS principal as
// identity, a client's tenant header changes nothing: the same bucket is debited and the same
// decision taken whatever it says.
func TestIdentity(t *testing.T) {
	t.Parallel()
	const rules = "rules: [{name: per-tenant, per: [tenant], tokens: {limit: 26, period: minute}}]\n" // two requests of 13
	const alice = "spiffe://cluster.local/ns/apps/sa/alice"
	for _, tc := range []struct {
		name, config string
		// requests are (principal, header) pairs sent in order; want their decisions.
		requests [][2]string
		want     []string
		tenant   string // the tenant of the last request
	}{
		{"principal: a spoofed header changes nothing", "tenant: {source: principal}\n",
			[][2]string{{alice, ""}, {alice, "bob"}, {alice, "carol"}}, []string{decisionAllowed, decisionAllowed, decisionDenied}, alice},
		{"principal: another principal has its own budget", "tenant: {source: principal}\n",
			[][2]string{{alice, ""}, {alice, ""}, {"spiffe://cluster.local/ns/apps/sa/bob", "alice"}}, []string{decisionAllowed, decisionAllowed, decisionAllowed}, "spiffe://cluster.local/ns/apps/sa/bob"},
		{"none: the header is ignored", "tenant: {source: none, default: everyone}\n",
			[][2]string{{"", "a"}, {"", "b"}, {"", "c"}}, []string{decisionAllowed, decisionAllowed, decisionDenied}, "everyone"},
		{"header: trusted only when configured", "tenant: {source: header, header: x-tenant-id}\n",
			[][2]string{{"", "a"}, {"", "a"}, {"", "b"}}, []string{decisionAllowed, decisionAllowed, decisionAllowed}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.config+rules, Options{})
			for i, r := range tc.requests {
				resp, err := e.f.Check(context.Background(), withIdentity(r[0], r[1]))
				if err != nil {
					t.Fatal(err)
				}
				if got := decision(resp); got != tc.want[i] {
					t.Errorf("request %d %v: %s, want %s", i, r, got, tc.want[i])
				}
			}
			last := tc.requests[len(tc.requests)-1]
			x, err := e.f.Explain(withIdentity(last[0], last[1]))
			if err != nil {
				t.Fatal(err)
			}
			if x.Tenant != tc.tenant {
				t.Errorf("tenant %q, want %q", x.Tenant, tc.tenant)
			}
		})
	}
}

// A tenant or priority header that came twice reaches the service joined with a comma (Envoy's
// CheckRequest); it is refused with a 400 in the provider's format, never charged to the joined
// name or to either half.
func TestDuplicateIdentityRefused(t *testing.T) {
	t.Parallel()
	const cfg = "tenant: {source: header, header: x-tenant-id}\n" +
		"priority: {header: x-llm-priority, default: interactive, classes: {interactive: {floor: 0}, batch: {floor: 0.5}}}\n" +
		"rules: [{name: per-tenant, per: [tenant], requests: {limit: 2, period: minute}}]\n" // two requests a tenant
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		status  int32
		body    string // a substring of the body
	}{
		{"two tenants", "/v1/chat/completions", map[string]string{"x-tenant-id": "a,b"}, 400, `"code":"duplicate_identity"`},
		{"the same tenant twice", "/v1/chat/completions", map[string]string{"x-tenant-id": "a,a"}, 400, `"type":"invalid_request_error"`},
		{"an empty second copy", "/v1/chat/completions", map[string]string{"x-tenant-id": "a,"}, 400, `x-tenant-id`},
		{"two classes", "/v1/chat/completions", map[string]string{"x-tenant-id": "a", "x-llm-priority": "batch,interactive"}, 400, `x-llm-priority`},
		{"Anthropic's format", "/v1/messages", map[string]string{":authority": "api.anthropic.com", "x-tenant-id": "a,b"}, 400, `{"type":"error","error":{"type":"invalid_request_error"`},
		{"one tenant", "/v1/chat/completions", map[string]string{"x-tenant-id": "a"}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, cfg, Options{})
			body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":5}`)
			resp, err := e.f.Check(context.Background(), hostileRequest(tc.path, body, tc.headers))
			if err != nil {
				t.Fatal(err)
			}
			if tc.status == 0 {
				if got := decision(resp); got != decisionAllowed {
					t.Fatalf("decision %s, want allowed", got)
				}
				return
			}
			if got := decision(resp); got != decisionBadIdentity {
				t.Errorf("decision %s, want %s", got, decisionBadIdentity)
			}
			d := resp.GetDeniedResponse()
			if got := int32(d.GetStatus().GetCode()); got != tc.status {
				t.Errorf("status %d, want %d", got, tc.status)
			}
			if !strings.Contains(d.GetBody(), tc.body) {
				t.Errorf("body %s, want it to contain %s", d.GetBody(), tc.body)
			}
			if _, ok := resp.GetDynamicMetadata().GetFields()["tenant"]; ok {
				t.Error("a refused request names a tenant in its metadata")
			}
			// Nothing was charged: the first half of the joined value still has its whole budget.
			for i := 0; i < 2; i++ {
				r, err := e.f.Check(context.Background(), hostileRequest(tc.path, body, map[string]string{"x-tenant-id": "a"}))
				if err != nil {
					t.Fatal(err)
				}
				if got := decision(r); got != decisionAllowed {
					t.Errorf("tenant a's request %d after the refusal: %s, want allowed", i, got)
				}
			}
			r, err := e.f.Check(context.Background(), hostileRequest(tc.path, body, map[string]string{"x-tenant-id": "a"}))
			if err != nil {
				t.Fatal(err)
			}
			if got := decision(r); got != decisionDenied {
				t.Errorf("tenant a's third request: %s, want denied (its budget is two)", got)
			}
		})
	}
}

// The metadata (and so the access log) names the tenant charged: its hash by default, the
// tenant itself with tenant.log: clear; and the class the request was decided in.
func TestTenantInMetadata(t *testing.T) {
	t.Parallel()
	const rules = "rules: [{name: per-tenant, per: [tenant], tokens: {limit: 1000, period: minute}}]\n"
	const prio = "priority: {header: x-llm-priority, default: interactive, classes: {interactive: {floor: 0}, batch: {floor: 0.5}}, " +
		"tenants: [{tenant: \"10.1.*\", class: batch}]}\n"
	for _, tc := range []struct {
		name, config string
		headers      map[string]string
		tenant       string
		priority     string
	}{
		// printf %s team-a | sha256sum | cut -c1-16
		{"hashed by default", "tenant: {source: header, header: x-tenant-id}\n" + prio, map[string]string{"x-tenant-id": "team-a"}, "96c2886c51d1dfb4", "interactive"},
		{"clear when asked", "tenant: {source: header, header: x-tenant-id, log: clear}\n" + prio, map[string]string{"x-tenant-id": "team-a"}, "team-a", "interactive"},
		{"the default tenant, hashed", "tenant: {source: header, header: x-tenant-id, default: nobody}\n" + prio, nil, tenantHash("nobody"), "interactive"},
		{"class from the tenant", "tenant: {source: header, header: x-tenant-id, log: clear}\n" + prio, map[string]string{"x-tenant-id": "10.1.0.7"}, "10.1.0.7", "batch"},
		{"a trusted class header first", "tenant: {source: header, header: x-tenant-id, log: clear}\n" + prio, map[string]string{"x-tenant-id": "10.1.0.7", "x-llm-priority": "interactive"}, "10.1.0.7", "interactive"},
		{"an unknown class: the tenant's", "tenant: {source: header, header: x-tenant-id, log: clear}\n" + prio, map[string]string{"x-tenant-id": "10.1.0.7", "x-llm-priority": "vip"}, "10.1.0.7", "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, tc.config+rules, Options{})
			body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":5}`)
			resp, err := e.f.Check(context.Background(), hostileRequest("/v1/chat/completions", body, tc.headers))
			if err != nil {
				t.Fatal(err)
			}
			md := resp.GetDynamicMetadata().GetFields()
			if got := md["tenant"].GetStringValue(); got != tc.tenant {
				t.Errorf("metadata tenant %q, want %q", got, tc.tenant)
			}
			if got := md["priority"].GetStringValue(); got != tc.priority {
				t.Errorf("metadata priority %q, want %q", got, tc.priority)
			}
		})
	}
}
