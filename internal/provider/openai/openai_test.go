package openai

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
		"chat.json":                {Input: 200, Output: 100, Total: 300},
		"responses.json":           {Input: 150, Output: 50, Total: 200},
		"embeddings.json":          {Input: 8, Total: 8},
		"chat_stream.sse":          {Input: 200, Output: 40, Total: 240},
		"responses_stream.sse":     {Input: 120, Output: 30, Total: 150},
		"chat_stream_no_usage.sse": {},
	} {
		got, ok := reported(t, Dialect{}, name)
		if got != want || ok != (want != provider.Usage{}) {
			t.Errorf("%s: usage %+v (found %v), want %+v", name, got, ok, want)
		}
	}
}

// Each count is bounded on its own, so that no sum overflows and a negative takes nothing away.
func TestUsageCountsAreBounded(t *testing.T) {
	t.Parallel()
	u, ok := Dialect{}.Usage([]byte(`{"usage":{"prompt_tokens":9223372036854775807,"input_tokens":9223372036854775807,"completion_tokens":-5}}`))
	if !ok || u.Input != 2*provider.MaxCount || u.Output != 0 {
		t.Errorf("usage %+v (found %v), want input 2 x MaxCount, output 0", u, ok)
	}
}

func TestBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		hdrs map[string]string
		want provider.Budget
		ok   bool
	}{
		{map[string]string{"x-ratelimit-remaining-tokens": "3000", "x-ratelimit-limit-tokens": "12000"}, provider.Budget{Remaining: 3000, Limit: 12000}, true},
		{map[string]string{"x-ratelimit-remaining-tokens": " 7 "}, provider.Budget{Remaining: 7}, true},
		// Azure's Responses API has been seen sending -1: it says nothing.
		{map[string]string{"x-ratelimit-remaining-tokens": "-1", "x-ratelimit-limit-tokens": "-1"}, provider.Budget{}, false},
		{map[string]string{"anthropic-ratelimit-tokens-remaining": "5"}, provider.Budget{}, false},
	} {
		get := func(k string) (string, bool) { v, ok := tc.hdrs[k]; return v, ok }
		got := (Dialect{}).Budgets(get)[provider.Tokens]
		ok := got.OK
		got.OK = false
		if got != tc.want || ok != tc.ok {
			t.Errorf("%v: budget %+v %v, want %+v %v", tc.hdrs, got, ok, tc.want, tc.ok)
		}
	}
}

func TestAppendError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		e    provider.Error
		want string
	}{
		{provider.Error{Class: provider.RateLimited, Limit: "requests", Code: "rate_limit_exceeded", Message: "slow <down>"},
			`{"error":{"message":"slow \u003cdown\u003e","type":"requests","param":null,"code":"rate_limit_exceeded"}}`},
		{provider.Error{Class: provider.RateLimited, Code: "rate_limit_exceeded", Message: "m"},
			`{"error":{"message":"m","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`},
		{provider.Error{Class: provider.TooLarge, Code: "request_too_large", Message: "m"},
			`{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"request_too_large"}}`},
		{provider.Error{Class: provider.Unavailable, Code: "rate_limiter_unavailable", Message: "m"},
			`{"error":{"message":"m","type":"server_error","param":null,"code":"rate_limiter_unavailable"}}`},
		{provider.Error{Class: provider.Misconfigured, Code: "rate_limiter_misconfigured", Message: "m"},
			`{"error":{"message":"m","type":"server_error","param":null,"code":"rate_limiter_misconfigured"}}`},
		{provider.Error{Class: provider.InvalidRequest, Code: "duplicate_identity", Message: "m"},
			`{"error":{"message":"m","type":"invalid_request_error","param":null,"code":"duplicate_identity"}}`},
	} {
		if got := string(Dialect{}.AppendError([]byte("x"), provider.ChatCompletions, tc.e)); got != "x"+tc.want {
			t.Errorf("%+v:\n got %s\nwant x%s", tc.e, got, tc.want)
		}
	}
}

func TestProfile(t *testing.T) {
	t.Parallel()
	if p := (Dialect{}).Profile(provider.OpenAI, "gpt-4o"); p != (provider.Profile{}) {
		t.Errorf("OpenAI: %+v, want prompt plus max_tokens, nothing settled", p)
	}
	if p := (Dialect{}).Profile(provider.Azure, "gpt-4o"); p != (provider.Profile{UnsetOutput: provider.ContextWindow}) {
		t.Errorf("Azure: %+v, want the context window reserved without max_tokens", p)
	}
}
