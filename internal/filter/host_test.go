package filter

import (
	"context"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// TestAnthropicOpenAIEndpoint: Claude called through Anthropic's OpenAI-compatible endpoint is
// Anthropic for every rule (the anthropic rule's 1000 tokens bind, no openai rule applies) and
// is denied in OpenAI's error format, which its client, the OpenAI SDK, reads. The control is
// the same body without a host: the path alone makes it OpenAI, as it was before the host
// decided.
func TestAnthropicOpenAIEndpoint(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":600,"messages":[{"role":"user","content":"Hi"}]}`)
	req := func(host string) *authv3.CheckRequest {
		h := map[string]string{":path": "/v1/chat/completions", ":method": "POST", ":authority": host, "content-type": "application/json"}
		return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/chat/completions", Headers: h, RawBody: body},
		}}}
	}
	for _, c := range []struct {
		host, provider, rules string
	}{
		{"api.anthropic.com", "anthropic", "anthropic"},
		{"", "openai", "openai-model"}, // control: the path rule
	} {
		e := newEnv(t, "", Options{})
		first := e.answer(t, context.Background(), req(c.host)).Response()
		md := first.GetDynamicMetadata().GetFields()
		if got := md["provider"].GetStringValue(); got != c.provider {
			t.Errorf("host %q: provider %q, want %q", c.host, got, c.provider)
		}
		if got := md["rules"].GetStringValue(); got != c.rules {
			t.Errorf("host %q: rules %q, want %q", c.host, got, c.rules)
		}
		second := e.answer(t, context.Background(), req(c.host)).Response()
		denied := second.GetDeniedResponse()
		if c.provider == "openai" {
			// 1000 tokens per model under openai-model: the second fits, the Anthropic rule never ran.
			continue
		}
		if denied == nil || denied.GetStatus().GetCode() != 429 {
			t.Fatalf("host %q: second request %v, want a 429 from the anthropic rule", c.host, second)
		}
		if b := denied.GetBody(); !strings.HasPrefix(b, `{"error":{"message":"Rate limit reached for anthropic`) || strings.Contains(b, `"type":"error"`) {
			t.Errorf("denial body %s: want OpenAI's format", b)
		}
	}
}
