package filter

import (
	"context"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

func TestCharge(t *testing.T) {
	t.Parallel()
	est := tokens.Estimate{PromptTokens: 100, OutputTokens: 50, Chars: 1000}
	unset := tokens.Estimate{PromptTokens: 100, OutputTokens: 4096, OutputUnset: true, Context: 128_000, Chars: 1000}
	unread := tokens.Estimate{PromptTokens: 9000, OutputTokens: 50}
	for _, tc := range []struct {
		name string
		prof provider.Profile
		est  tokens.Estimate
		want costs
	}{
		{"sum", provider.Profile{}, est, costs{150, 100, 50, 1}},
		// The larger of max_tokens and a quarter of the characters: 250.
		{"max of chars", provider.Profile{Counting: provider.MaxOfChars}, est, costs{250, 100, 50, 1}},
		{"max of chars, output larger", provider.Profile{Counting: provider.MaxOfChars}, tokens.Estimate{PromptTokens: 1, OutputTokens: 900, Chars: 40}, costs{900, 1, 900, 1}},
		// A body priced at its bound has no character count: the bound stands in for it.
		{"max of chars, unread body", provider.Profile{Counting: provider.MaxOfChars}, unread, costs{9000, 9000, 50, 1}},
		{"output weight", provider.Profile{OutputWeight: 5}, est, costs{350, 100, 250, 1}},
		{"context window, no maximum", provider.Profile{UnsetOutput: provider.ContextWindow}, unset, costs{128_100, 100, 128_000, 1}},
		{"context window, maximum given", provider.Profile{UnsetOutput: provider.ContextWindow}, est, costs{150, 100, 50, 1}},
		{"default output", provider.Profile{}, unset, costs{4196, 100, 4096, 1}},
		{"capped", provider.Profile{OutputWeight: 100}, tokens.Estimate{PromptTokens: 1 << 50, OutputTokens: 1 << 50}, costs{bucket.MaxAmount, bucket.MaxAmount, bucket.MaxAmount, 1}},
	} {
		if got := charge(&tc.prof, &tc.est); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

const dimensionLimits = `
rules:
  - name: claude
    match: {provider: anthropic}
    input_tokens: {limit: 30000, period: minute}
    output_tokens: {limit: 8000, period: minute}
    requests:
      - {limit: 50, period: minute}
      - {limit: 2, period: second}
`

func messages(body string) *authv3.CheckRequest {
	h := map[string]string{":path": "/v1/messages", ":method": "POST", ":authority": "api.anthropic.com", "content-type": "application/json"}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/messages", Headers: h, RawBody: []byte(body)},
	}}}
}

// A rule of several dimensions debits each with its own cost, the first windows in one key
// (slots 3, 4 and 2, next to each other), the requests' second window in its own.
func TestDimensionsPlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dimensionLimits, Options{})
	body := `{"model":"claude-sonnet-4-5","max_tokens":600,"messages":[{"role":"user","content":"Hi"}]}`
	resp := e.answer(t, context.Background(), messages(body)).Response()
	if d := decisionOf(resp); d != decisionAllowed {
		t.Fatalf("decision %q", d)
	}
	md := resp.GetDynamicMetadata().GetFields()
	r, err := reservation.Decode(md["reservation"].GetStringValue())
	if err != nil {
		t.Fatal(err)
	}
	prompt := int64(md["prompt_tokens"].GetNumberValue())
	type got struct {
		kind byte
		slot uint8
		name string
		cost int64
	}
	var buckets []got
	for _, b := range r.Buckets {
		buckets = append(buckets, got{b.Kind, b.Spec.Slot, b.Spec.Name, b.Spec.Cost})
	}
	want := []got{
		{reservation.KindInput, 3, "claude:b", prompt},
		{reservation.KindOutput, 4, "claude:b", 600},
		{reservation.KindRequests, 2, "claude:b", 1},
		{reservation.KindRequests, 0, "claude:r1", 1},
	}
	if len(buckets) != len(want) {
		t.Fatalf("buckets %+v, want %+v", buckets, want)
	}
	for i := range want {
		if buckets[i] != want[i] {
			t.Errorf("bucket %d: %+v, want %+v", i, buckets[i], want[i])
		}
	}
	// Anthropic's input and output settle to the usage; cache reads are given back.
	if !r.Buckets[0].Refund || !r.Buckets[1].Refund || r.Buckets[2].Refund || !r.CacheReadsFree || r.Weight != 1 {
		t.Errorf("reservation %+v: want input and output refundable, cache reads free", r)
	}
	// The answer reports each dimension in Anthropic's names, the reset an RFC 3339 instant.
	for _, h := range []string{"input-tokens", "output-tokens", "requests"} {
		reset := headerOf(resp, "anthropic-ratelimit-"+h+"-reset")
		if _, err := time.Parse(time.RFC3339, reset); err != nil || headerOf(resp, "anthropic-ratelimit-"+h+"-limit") == "" {
			t.Errorf("anthropic-ratelimit-%s-*: limit %q reset %q", h, headerOf(resp, "anthropic-ratelimit-"+h+"-limit"), reset)
		}
	}
	if v := headerOf(resp, "anthropic-ratelimit-output-tokens-remaining"); v != "7400" {
		t.Errorf("output tokens remaining %q, want 7400", v)
	}
	if v := headerOf(resp, "x-ratelimit-limit-tokens"); v != "" {
		t.Errorf("OpenAI's headers on an Anthropic answer: %q", v)
	}
}

// The dimension that runs out names itself in the denial, as the provider would.
func TestDimensionsDenial(t *testing.T) {
	t.Parallel()
	e := newEnv(t, dimensionLimits, Options{})
	big := `{"model":"claude-sonnet-4-5","max_tokens":5000,"messages":[{"role":"user","content":"Hi"}]}`
	if d := decisionOf(e.answer(t, context.Background(), messages(big)).Response()); d != decisionAllowed {
		t.Fatalf("first: %q", d)
	}
	e.clock.Add(time.Second) // past the per-second window
	resp := e.answer(t, context.Background(), messages(big)).Response()
	denied := resp.GetDeniedResponse()
	if denied == nil || denied.GetStatus().GetCode() != 429 {
		t.Fatalf("second: %v, want 429", resp)
	}
	if b := denied.GetBody(); !strings.Contains(b, "claude (output tokens per minute)") || !strings.Contains(b, `"type":"rate_limit_error"`) {
		t.Errorf("denial body %s", b)
	}
	if got := resp.GetDynamicMetadata().GetFields()["limit"].GetStringValue(); got != "claude output tokens" {
		t.Errorf("limit %q", got)
	}
	// The per-second window: two requests a second, the third held out.
	e2 := newEnv(t, dimensionLimits, Options{})
	small := `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"Hi"}]}`
	var last *authv3.CheckResponse
	for range 3 {
		last = e2.answer(t, context.Background(), messages(small)).Response()
	}
	if b := last.GetDeniedResponse().GetBody(); !strings.Contains(b, "claude (requests per second)") {
		t.Errorf("third request in a second: %s", b)
	}
}

// OpenAI's character rule and Azure's context reservation, from the file's accounting.
func TestAccountingOverrides(t *testing.T) {
	t.Parallel()
	const limits = `
accounting:
  - {provider: openai, model: "gpt-4o*", counting: max_of_chars}
rules:
  - name: all
    tokens: {limit: 1000000, period: minute}
`
	e := newEnv(t, limits, Options{})
	body := `{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"` + strings.Repeat("a ", 2000) + `"}]}`
	resp := e.answer(t, context.Background(), chat(body, nil)()).Response()
	r, err := reservation.Decode(resp.GetDynamicMetadata().GetFields()["reservation"].GetStringValue())
	if err != nil {
		t.Fatal(err)
	}
	if want := (int64(len(body)) + 3) / 4; r.Buckets[0].Spec.Cost != want || !r.CharsCounted {
		t.Errorf("max_of_chars: cost %d (chars counted %v), want %d", r.Buckets[0].Spec.Cost, r.CharsCounted, want)
	}
	// A model the override does not match keeps the built-in sum.
	body = `{"model":"gpt-4.1","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	resp = e.answer(t, context.Background(), chat(body, nil)()).Response()
	md := resp.GetDynamicMetadata().GetFields()
	r, _ = reservation.Decode(md["reservation"].GetStringValue())
	if want := int64(md["prompt_tokens"].GetNumberValue()) + 10; r.Buckets[0].Spec.Cost != want || r.CharsCounted {
		t.Errorf("sum: cost %d, want %d", r.Buckets[0].Spec.Cost, want)
	}
}
