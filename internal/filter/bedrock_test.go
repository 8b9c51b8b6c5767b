package filter

import (
	"context"
	"encoding/json"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// TestBedrockDenial: a Converse request to a Claude 4-era model is priced with its output
// weighted 5x (the burndown), and over the limit it is answered as Bedrock answers throttling:
// 429, x-amzn-ErrorType: ThrottlingException and {"message"}, which the AWS SDKs retry. The
// control is the same model with the weight overridden to 1 in the limits file.
func TestBedrockDenial(t *testing.T) {
	t.Parallel()
	const model = "us.anthropic.claude-sonnet-4-20250514-v1%3A0"
	path := "/model/" + model + "/converse"
	body := []byte(`{"messages":[{"role":"user","content":[{"text":"Hi"}]}],"inferenceConfig":{"maxTokens":500}}`)
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: path, RawBody: body, Headers: map[string]string{
			":path": path, ":method": "POST", ":authority": "bedrock-runtime.us-east-1.amazonaws.com", "content-type": "application/json",
			"authorization": "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260304/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=0"}},
	}}}
	const rules = `
tenant: {source: none}
rules:
  - name: bedrock-tpm
    match: {provider: bedrock}
    per: [model]
    tokens: {limit: 4000, period: minute}
`
	for _, c := range []struct {
		name, accounting string
		secondDenied     bool
	}{
		{"weighted", "", true},
		{"unweighted", "accounting:\n  - {provider: bedrock, output_weight: 1}\n", false},
	} {
		e := newEnv(t, rules+c.accounting, Options{})
		first := e.answer(t, context.Background(), req).Response()
		md := first.GetDynamicMetadata().GetFields()
		if first.GetOkResponse() == nil || md["provider"].GetStringValue() != "bedrock" || md["api"].GetStringValue() != "converse" ||
			md["model"].GetStringValue() != "us.anthropic.claude-sonnet-4-20250514-v1:0" {
			t.Fatalf("%s: first %v", c.name, first)
		}
		// Two requests fit 4000 tokens unweighted (about 530 each), not with 5 x 500 of output each.
		second := e.answer(t, context.Background(), req).Response()
		denied := second.GetDeniedResponse()
		if !c.secondDenied {
			if denied != nil {
				t.Errorf("%s: second denied %v", c.name, second)
			}
			continue
		}
		if denied == nil || denied.GetStatus().GetCode() != 429 {
			t.Fatalf("%s: second %v, want a 429", c.name, second)
		}
		var typ string
		for _, h := range denied.GetHeaders() {
			if h.GetHeader().GetKey() == "x-amzn-errortype" {
				typ = h.GetHeader().GetValue()
			}
		}
		var b map[string]any
		if err := json.Unmarshal([]byte(denied.GetBody()), &b); err != nil || len(b) != 1 || b["message"] == "" || typ != "ThrottlingException" {
			t.Errorf("%s: denial %s, x-amzn-errortype %q: want Bedrock's ThrottlingException", c.name, denied.GetBody(), typ)
		}
	}
}
