package anthropic

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// reported reads a fixture as the response path does: a JSON body is one document, a stream's
// documents are its data lines, folded with provider.Usage.Merge.
func reported(t *testing.T, d provider.Dialect, name string) (provider.Usage, bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "usage", name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(name, ".sse") {
		return d.Usage(b)
	}
	var u provider.Usage
	found := false
	for _, l := range bytes.Split(b, []byte{'\n'}) {
		data, ok := bytes.CutPrefix(bytes.TrimSuffix(l, []byte{'\r'}), []byte("data:"))
		if !ok {
			continue
		}
		if r, ok := d.Usage(bytes.TrimSpace(data)); ok {
			u.Merge(r)
			found = true
		}
	}
	return u, found
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]provider.Usage{
		// Cache writes and reads are input too.
		"messages.json": {Input: 150, Output: 40, CacheRead: 20, CacheWrite: 30},
		// message_start carries the input, message_delta the cumulative output.
		"messages_stream.sse": {Input: 200, Output: 55, CacheRead: 20},
		// The OpenAI SDK compatibility endpoint reports OpenAI's usage.
		"compat_stream.sse": {Input: 200, Output: 40, Total: 240},
	} {
		got, ok := reported(t, Dialect{}, name)
		if got != want || !ok {
			t.Errorf("%s: usage %+v (found %v), want %+v", name, got, ok, want)
		}
	}
	// The cache writes split by lifetime: the 1-hour part, never above the writes.
	for doc, want := range map[string]int64{
		`{"usage":{"input_tokens":1,"cache_creation_input_tokens":800,"cache_creation":{"ephemeral_5m_input_tokens":600,"ephemeral_1h_input_tokens":200}}}`: 200,
		`{"usage":{"input_tokens":1,"cache_creation_input_tokens":100,"cache_creation":{"ephemeral_1h_input_tokens":900}}}`:                                 100,
		`{"usage":{"input_tokens":1,"cache_creation_input_tokens":100,"cache_creation":{"ephemeral_1h_input_tokens":-5}}}`:                                  0,
	} {
		if u, ok := (Dialect{}).Usage([]byte(doc)); !ok || u.CacheWrite1h != want {
			t.Errorf("%s: 1-hour writes %d, want %d", doc, u.CacheWrite1h, want)
		}
	}
}

func TestBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hdrs map[string]string
		dim  provider.Dimension
		want provider.Budget
		ok   bool
	}{
		{map[string]string{"anthropic-ratelimit-tokens-remaining": "4000", "anthropic-ratelimit-tokens-limit": "10000",
			"anthropic-ratelimit-input-tokens-remaining": "1"}, provider.Tokens, provider.Budget{Remaining: 4000, Limit: 10000, Rounding: 1000}, true},
		{map[string]string{"anthropic-ratelimit-input-tokens-remaining": "5000", "anthropic-ratelimit-input-tokens-limit": "10000"},
			provider.InputTokens, provider.Budget{Remaining: 5000, Limit: 10000, Rounding: 1000}, true},
		{map[string]string{"anthropic-ratelimit-input-tokens-remaining": "5000"}, provider.Tokens, provider.Budget{}, false},
		{map[string]string{"anthropic-ratelimit-output-tokens-remaining": "70", "anthropic-ratelimit-output-tokens-limit": "80"},
			provider.OutputTokens, provider.Budget{Remaining: 70, Limit: 80, Rounding: 1000}, true},
		// The compatibility endpoint speaks OpenAI's dialect.
		{map[string]string{"x-ratelimit-remaining-tokens": "5", "anthropic-ratelimit-tokens-remaining": "4000"}, provider.Tokens, provider.Budget{Remaining: 5}, true},
		{map[string]string{"anthropic-ratelimit-requests-remaining": "5"}, provider.Requests, provider.Budget{Remaining: 5}, true},
		{map[string]string{"anthropic-ratelimit-requests-remaining": "5"}, provider.Tokens, provider.Budget{}, false},
		{map[string]string{"anthropic-ratelimit-tokens-remaining": "lots"}, provider.Tokens, provider.Budget{}, false},
	} {
		get := func(k string) (string, bool) { v, ok := tc.hdrs[k]; return v, ok }
		got := (Dialect{}).Budgets(get)[tc.dim]
		ok := got.OK
		got.OK = false
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v %v: budget %+v %v, want %+v %v", tc.hdrs, tc.dim, got, ok, tc.want, tc.ok)
		}
	}
}

func TestProfile(t *testing.T) {
	t.Parallel()
	for model, free := range map[string]bool{
		"claude-sonnet-4-5": true, "claude-opus-4-1-20250805": true, "claude-3-7-sonnet-latest": true,
		"claude-3-haiku-20240307": false, "claude-3-5-haiku-latest": false, "claude-haiku-4-5": true,
	} {
		p := (Dialect{}).Profile(provider.Anthropic, model)
		if p.CacheReadsFree != free || !p.Settles.Has(provider.InputTokens) || !p.Settles.Has(provider.OutputTokens) ||
			p.Settles.Has(provider.Tokens) || p.Weight() != 1 || p.Counting != provider.Sum {
			t.Errorf("%s: profile %+v, want cache reads free %v, input and output settled", model, p, free)
		}
	}
}

func TestRateHeaders(t *testing.T) {
	t.Parallel()
	h, ok := (Dialect{}).RateHeaders(provider.Messages, provider.OutputTokens)
	if want := (provider.RateHeaders{Limit: "anthropic-ratelimit-output-tokens-limit", Remaining: "anthropic-ratelimit-output-tokens-remaining",
		Reset: "anthropic-ratelimit-output-tokens-reset", ResetAt: true}); !ok || h != want {
		t.Errorf("Messages output tokens: %+v %v, want %+v", h, ok, want)
	}
	// The compatibility endpoint answers in OpenAI's names, which have no input or output.
	if h, ok := (Dialect{}).RateHeaders(provider.ChatCompletions, provider.Tokens); !ok || h.Limit != "x-ratelimit-limit-tokens" || h.ResetAt {
		t.Errorf("compatibility endpoint tokens: %+v %v", h, ok)
	}
	if _, ok := (Dialect{}).RateHeaders(provider.ChatCompletions, provider.InputTokens); ok {
		t.Error("compatibility endpoint: input tokens headers")
	}
}

func TestAppendError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		api  provider.API
		e    provider.Error
		want string
	}{
		{provider.Messages, provider.Error{Class: provider.RateLimited, Limit: "tokens", Code: "rate_limit_exceeded", Message: "slow & steady"},
			`{"type":"error","error":{"type":"rate_limit_error","message":"slow \u0026 steady"}}`},
		{provider.Messages, provider.Error{Class: provider.TooLarge, Code: "request_too_large", Message: "m"},
			`{"type":"error","error":{"type":"request_too_large","message":"m"}}`},
		{provider.Messages, provider.Error{Class: provider.Unavailable, Code: "rate_limiter_unavailable", Message: "m"},
			`{"type":"error","error":{"type":"api_error","message":"m"}}`},
		{provider.Messages, provider.Error{Class: provider.Misconfigured, Code: "rate_limiter_misconfigured", Message: "m"},
			`{"type":"error","error":{"type":"api_error","message":"m"}}`},
		{provider.Messages, provider.Error{Class: provider.InvalidRequest, Code: "duplicate_identity", Message: "m"},
			`{"type":"error","error":{"type":"invalid_request_error","message":"m"}}`},
		// The compatibility endpoint's client is the OpenAI SDK.
		{provider.ChatCompletions, provider.Error{Class: provider.RateLimited, Limit: "tokens", Code: "rate_limit_exceeded", Message: "m"},
			`{"error":{"message":"m","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
	} {
		if got := string(Dialect{}.AppendError(nil, tc.api, tc.e)); got != tc.want {
			t.Errorf("%v %+v:\n got %s\nwant %s", tc.api, tc.e, got, tc.want)
		}
	}
}
