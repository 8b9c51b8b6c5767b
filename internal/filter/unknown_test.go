package filter

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

func call(host, path, body string) *authv3.CheckRequest {
	h := map[string]string{":path": path, ":method": "POST", ":authority": host, "content-type": "application/json"}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: path, Headers: h, RawBody: []byte(body)},
	}}}
}

const everyRequest = `
unknown: %s
rules:
  - name: all
    tokens: {limit: 100000, period: minute}
    requests: {limit: 1000, period: minute}
`

// kinds lists the kinds of the buckets a reservation debited.
func kinds(t *testing.T, resp *authv3.CheckResponse) string {
	t.Helper()
	r, err := reservation.Decode(resp.GetDynamicMetadata().GetFields()["reservation"].GetStringValue())
	if err != nil {
		t.Fatal(err)
	}
	var k []byte
	for _, b := range r.Buckets {
		k = append(k, b.Kind)
	}
	return string(k)
}

// A request that is no known provider's API follows the unknown policy; a provider's unpriced
// API (images, batches, files...) takes request limits only, whatever the policy.
func TestUnknownPolicy(t *testing.T) {
	t.Parallel()
	unknown := call("llm.internal", "/v2/generate", `{"prompt":"a long enough prompt to be priced as text"}`)
	images := call("api.openai.com", "/v1/images/generations", `{"model":"gpt-image-1","prompt":"a lighthouse"}`)
	for _, tc := range []struct {
		policy                  string
		decision, kinds, images string
	}{
		{"allow", decisionAllowed, "tr", "r"},
		{"requests_only", decisionAllowed, "r", "r"},
		{"deny", decisionUnknown, "", "r"},
	} {
		e := newEnv(t, fmt.Sprintf(everyRequest, tc.policy), Options{})
		resp := e.answer(t, context.Background(), unknown).Response()
		md := resp.GetDynamicMetadata().GetFields()
		if d := decisionOf(resp); d != tc.decision {
			t.Errorf("%s: decision %q, want %q", tc.policy, d, tc.decision)
		}
		if md["provider"].GetStringValue() != "unknown" || md["estimate_reason"].GetStringValue() != "unknown_api" {
			t.Errorf("%s: metadata %v", tc.policy, md)
		}
		// The metadata's cost is what the token buckets took: none under requests_only.
		if c := md["cost"].GetNumberValue(); (tc.policy == "requests_only") != (c == 0) {
			t.Errorf("%s: metadata cost %v", tc.policy, c)
		}
		if tc.kinds != "" {
			if k := kinds(t, resp); k != tc.kinds {
				t.Errorf("%s: buckets %q, want %q", tc.policy, k, tc.kinds)
			}
		} else {
			if resp.GetDeniedResponse().GetStatus().GetCode() != 403 {
				t.Errorf("deny: status %v", resp.GetDeniedResponse().GetStatus())
			}
			var body struct {
				Error struct{ Type, Code, Message string }
			}
			if err := json.Unmarshal([]byte(resp.GetDeniedResponse().GetBody()), &body); err != nil || body.Error.Code != "unknown_api" {
				t.Errorf("deny: body %q (%v)", resp.GetDeniedResponse().GetBody(), err)
			}
		}
		resp = e.answer(t, context.Background(), images).Response()
		md = resp.GetDynamicMetadata().GetFields()
		if d := decisionOf(resp); d != decisionAllowed || md["provider"].GetStringValue() != "openai" ||
			md["api"].GetStringValue() != "unpriced" || md["estimate_reason"].GetStringValue() != "unpriced_api" || md["cost"].GetNumberValue() != 0 {
			t.Errorf("%s: images: decision %q, metadata %v", tc.policy, d, md)
		}
		if k := kinds(t, resp); k != tc.images {
			t.Errorf("%s: images buckets %q, want %q", tc.policy, k, tc.images)
		}
	}
}

// The metadata's cost is what the tokens dimension counted: for Azure, the model's context window
// when the request names no max_tokens (what the access log reports as reserved).
func TestMetadataCostIsTheCharge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, `
pricing: {azure_deployments: {prod: gpt-4o}}
rules:
  - name: azure
    match: {provider: azure}
    tokens: {limit: 1000000, period: minute}
`, Options{})
	resp := e.answer(t, context.Background(), call("res.openai.azure.com", "/openai/deployments/prod/chat/completions?api-version=2024-10-21",
		`{"messages":[{"role":"user","content":"Hello"}]}`)).Response()
	md := resp.GetDynamicMetadata().GetFields()
	prompt, cost := md["prompt_tokens"].GetNumberValue(), md["cost"].GetNumberValue()
	if decisionOf(resp) != decisionAllowed || cost != prompt+128_000 {
		t.Errorf("decision %q, prompt %v, cost %v: want the prompt plus gpt-4o's 128,000-token context", decisionOf(resp), prompt, cost)
	}
}
