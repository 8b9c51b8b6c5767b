package filter

import (
	"context"
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
