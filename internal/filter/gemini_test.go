package filter

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// TestGeminiRequestsPerDayEndAtPacificMidnight: the Gemini API's requests per day "reset at
// midnight Pacific time" (ai.google.dev/gemini-api/docs/rate-limits). A daily quota in
// America/Los_Angeles that runs out ten seconds before that midnight is denied in Google's
// format (RetryInfo, retry-after) until it, to the millisecond, and no longer; UTC's midnight,
// hours earlier, resets nothing.
func TestGeminiRequestsPerDayEndAtPacificMidnight(t *testing.T) {
	t.Parallel()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	path := "/v1beta/models/gemini-2.5-flash:generateContent"
	body := []byte(`{"contents":[{"role":"user","parts":[{"text":"Hi"}]}],"generationConfig":{"maxOutputTokens":50}}`)
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: path, RawBody: body, Headers: map[string]string{
			":path": path, ":method": "POST", ":authority": "generativelanguage.googleapis.com", "content-type": "application/json",
			"x-goog-api-key": "test-key"}},
	}}}
	e := newEnv(t, `
tenant: {source: none}
rules:
  - name: gemini-rpd
    match: {provider: gemini}
    per: [model]
    requests: {limit: 2, period: day, algorithm: quota, timezone: America/Los_Angeles}
`, Options{})
	set := func(at time.Time) {
		e.clock.mu.Lock()
		e.clock.t = at
		e.clock.mu.Unlock()
	}
	// denied checks a denial in Google's format and returns its wait.
	denied := func(what string) time.Duration {
		t.Helper()
		resp := e.answer(t, context.Background(), req).Response()
		d := resp.GetDeniedResponse()
		if d == nil || d.GetStatus().GetCode() != 429 {
			t.Fatalf("%s: %v, want a 429", what, resp)
		}
		var b struct {
			Error struct {
				Status  string
				Details []struct {
					Type       string `json:"@type"`
					RetryDelay string
				}
			}
		}
		if err := json.Unmarshal([]byte(d.GetBody()), &b); err != nil || b.Error.Status != "RESOURCE_EXHAUSTED" {
			t.Fatalf("%s: body %s", what, d.GetBody())
		}
		var delay string
		for _, x := range b.Error.Details {
			if x.Type == "type.googleapis.com/google.rpc.RetryInfo" {
				delay = x.RetryDelay
			}
		}
		wait, err := time.ParseDuration(delay)
		if err != nil {
			t.Fatalf("%s: retryDelay %q: %v", what, delay, err)
		}
		if ra := headerOf(resp, "retry-after"); ra == "" {
			t.Errorf("%s: no retry-after", what)
		}
		return wait
	}
	allowed := func(what string) {
		t.Helper()
		if resp := e.answer(t, context.Background(), req).Response(); resp.GetOkResponse() == nil {
			t.Fatalf("%s: %v, want allowed", what, resp)
		}
	}
	// 16:59:55 PDT on 7 July is 23:59:55 UTC.
	set(time.Date(2026, 7, 7, 16, 59, 55, 0, la))
	allowed("first")
	allowed("second")
	e.clock.Add(10 * time.Second) // past UTC's midnight
	if w := denied("after UTC midnight"); w != 7*time.Hour-5*time.Second {
		t.Errorf("after UTC midnight: wait %v, want until 00:00 PDT", w)
	}
	set(time.Date(2026, 7, 7, 23, 59, 50, 0, la))
	if w := denied("ten seconds before Pacific midnight"); w != 10*time.Second {
		t.Errorf("wait %v, want 10s", w)
	}
	e.clock.Add(10*time.Second - time.Millisecond)
	if w := denied("a millisecond before"); w != time.Millisecond {
		t.Errorf("wait %v, want 1ms", w)
	}
	e.clock.Add(time.Millisecond)
	allowed("at Pacific midnight")
	allowed("the new day's second")
	// 1 November 2026 falls back: its day lasts 25 hours.
	set(time.Date(2026, 11, 1, 0, 0, 0, 0, la))
	allowed("autumn first")
	allowed("autumn second")
	if w := denied("the 25-hour day"); w != 25*time.Hour {
		t.Errorf("25-hour day: wait %v, want 25h", w)
	}
}
