package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAzureRPMSubWindows: 600 RPM over 1 s windows admits 10 a second, over 10 s windows 100;
// the one over is refused until the next window starts; without a window, the 600 may come at once.
func TestAzureRPMSubWindows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		window time.Duration
		allow  int
	}{{time.Second, 10}, {10 * time.Second, 100}} {
		c := newClock()
		c.advance(200 * time.Millisecond)
		a := NewAzure(AzureLimits{RPM: 600, RPMWindow: tc.window})
		for i := range tc.allow {
			if v := a.AdmitAt("gpt-4o", 10, c.now()); !v.Admitted {
				t.Fatalf("%s: request %d refused: %+v", tc.window, i+1, v)
			}
		}
		v := a.AdmitAt("gpt-4o", 10, c.now())
		if v.Admitted || v.Which != "requests" || v.Wait != tc.window-200*time.Millisecond ||
			v.Requests.Limit != int64(tc.allow) || v.Requests.Remaining != 0 {
			t.Fatalf("%s: request %d: %+v", tc.window, tc.allow+1, v)
		}
		// Another deployment has its own counters.
		if v := a.AdmitAt("gpt-4o-mini", 10, c.now()); !v.Admitted {
			t.Fatalf("%s: another deployment refused: %+v", tc.window, v)
		}
		c.advance(v.Wait)
		if v := a.AdmitAt("gpt-4o", 10, c.now()); !v.Admitted {
			t.Fatalf("%s: refused in the next window: %+v", tc.window, v)
		}
	}
	c := newClock()
	a := NewAzure(AzureLimits{RPM: 600})
	for i := range 600 {
		if v := a.AdmitAt("gpt-4o", 1, c.now()); !v.Admitted {
			t.Fatalf("per minute: request %d refused", i+1)
		}
	}
	if v := a.AdmitAt("gpt-4o", 1, c.now()); v.Admitted || v.Wait != time.Minute {
		t.Fatalf("per minute: request 601: %+v", v)
	}
}

// TestAzureWindowsFollowTheClock: the windows are the clock's seconds, not rolling ones: ten at
// 0.9 s and ten more at 1.0 s are all admitted, twenty within 100 ms. A client that must never
// see the 429 cannot know where Azure's windows start, so it keeps at most ten in any rolling
// second, which fits every phase.
func TestAzureWindowsFollowTheClock(t *testing.T) {
	t.Parallel()
	c := newClock()
	a := NewAzure(AzureLimits{RPM: 600, RPMWindow: time.Second})
	c.advance(900 * time.Millisecond)
	for range 10 {
		if v := a.AdmitAt("gpt-4o", 1, c.now()); !v.Admitted {
			t.Fatalf("at 0.9 s: %+v", v)
		}
	}
	c.advance(100 * time.Millisecond)
	for range 10 {
		if v := a.AdmitAt("gpt-4o", 1, c.now()); !v.Admitted {
			t.Fatalf("at 1.0 s: %+v", v)
		}
	}
	if v := a.AdmitAt("gpt-4o", 1, c.now()); v.Admitted {
		t.Fatal("an 11th at 1.0 s admitted")
	}
}

// TestAzureOutOfOrderAdmissions: a request of a window that has ended, admitted after one of the
// next window (its body read later), counts in its own window and leaves the next one's count
// whole.
func TestAzureOutOfOrderAdmissions(t *testing.T) {
	t.Parallel()
	c := newClock()
	a := NewAzure(AzureLimits{RPM: 600, RPMWindow: time.Second, TPM: 100})
	t0 := c.now()
	if v := a.AdmitAt("gpt-4o", 10, t0.Add(1001*time.Millisecond)); !v.Admitted {
		t.Fatalf("at 1.001 s: %+v", v)
	}
	if v := a.AdmitAt("gpt-4o", 10, t0.Add(999*time.Millisecond)); !v.Admitted || v.Requests.Remaining != 9 {
		t.Fatalf("at 0.999 s, after: %+v", v)
	}
	for i := range 9 {
		if v := a.AdmitAt("gpt-4o", 1, t0.Add(1002*time.Millisecond)); !v.Admitted {
			t.Fatalf("at 1.002 s, request %d: %+v", i+2, v)
		}
	}
	if v := a.AdmitAt("gpt-4o", 1, t0.Add(1500*time.Millisecond)); v.Admitted {
		t.Fatalf("an 11th in the second from 1 s admitted: %+v", v)
	}
	// The minute's tokens: 10 + 10 + 9 counted, 71 left, whatever the order.
	if v := a.AdmitAt("gpt-4o", 72, t0.Add(2*time.Second)); v.Admitted || v.Which != "tokens" {
		t.Fatalf("over the minute's tokens: %+v", v)
	}
	if v := a.AdmitAt("gpt-4o", 71, t0.Add(2*time.Second)); !v.Admitted || v.Tokens.Remaining != 0 {
		t.Fatalf("the minute's last tokens: %+v", v)
	}
}

// TestAzureTPMCountsPerMinute: the TPM is a count reset each minute of the clock; a request over
// it refuses until the minute ends, one above it can never fit.
func TestAzureTPMCountsPerMinute(t *testing.T) {
	t.Parallel()
	c := newClock()
	c.advance(45 * time.Second)
	a := NewAzure(AzureLimits{TPM: 1000})
	if v := a.AdmitAt("gpt-4o", 900, c.now()); !v.Admitted || v.Tokens.Remaining != 100 || v.HasRequests {
		t.Fatalf("first: %+v", v)
	}
	if v := a.AdmitAt("gpt-4o", 200, c.now()); v.Admitted || v.Which != "tokens" || v.Wait != 15*time.Second {
		t.Fatalf("over the count: %+v", v)
	}
	if v := a.AdmitAt("gpt-4o", 1001, c.now()); v.Admitted || !v.TooLarge || v.Wait != 0 {
		t.Fatalf("too large: %+v", v)
	}
	c.advance(15 * time.Second)
	if v := a.AdmitAt("gpt-4o", 1000, c.now()); !v.Admitted || v.Tokens.Remaining != 0 {
		t.Fatalf("next minute: %+v", v)
	}
}

// TestAzureCost: prompt + max_tokens x max(best_of, n); the model's context size when the
// request names no max_tokens.
func TestAzureCost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Price
		want int64
	}{
		{Price{API: "chat_completions", Model: "gpt-4o", Prompt: 9, Output: 4096, OutputUnset: true, N: 1}, 128_009},
		{Price{API: "chat_completions", Model: "gpt-4o-mini", Prompt: 9, Output: 4096, OutputUnset: true, N: 1}, 128_009},
		{Price{API: "chat_completions", Model: "gpt-4.1", Prompt: 9, Output: 4096, OutputUnset: true, N: 1}, 1_047_585},
		{Price{API: "chat_completions", Model: "gpt-35-turbo", Prompt: 9, Output: 4096, OutputUnset: true, N: 1}, 16_394},
		{Price{API: "chat_completions", Model: "unknown", Prompt: 9, Output: 4096, OutputUnset: true, N: 1}, 4_105},
		{Price{API: "chat_completions", Model: "gpt-4o", Prompt: 9, Output: 200, N: 2}, 209},
		{Price{API: "completions", Model: "gpt-4o", Prompt: 9, Output: 100, N: 1, BestOf: 3}, 309},
		{Price{API: "completions", Model: "gpt-4o", Prompt: 9, Output: 200, N: 2, BestOf: 3}, 309},
		{Price{API: "embeddings", Model: "text-embedding-3-small", Prompt: 9}, 9},
	} {
		if got := AzureCost(&tc.p); got != tc.want {
			t.Errorf("%+v: %d, want %d", tc.p, got, tc.want)
		}
	}
}

// TestAzureOverHTTP: deployment paths priced and admitted by Azure's accounting, with Azure's
// headers, 429 body and records.
func TestAzureOverHTTP(t *testing.T) {
	t.Parallel()
	at := time.Unix(1_800_000_000, 0).Add(30 * time.Second)
	now := func() time.Time { return at }
	var buf bytes.Buffer
	srv := &Server{
		Pricer:           testPricer,
		Enforcer:         NewEnforcer(TokenBucket, time.Minute, map[string]Limits{"openai": {Tokens: 1}}, now),
		Recorder:         NewRecorder(TokenBucket, &buf),
		Azure:            NewAzure(AzureLimits{TPM: 130_000, RPM: 600, RPMWindow: time.Second}),
		CompletionTokens: 3,
		EmbeddingDims:    4,
		Now:              now,
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	chat := ts.URL + "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
	// No max_tokens: the context size (128,000) is reserved besides the 9-token prompt. The
	// body's model is not the deployment's: the deployment decides.
	body := `{"model":"whatever","messages":[{"role":"user","content":"hello world"}]}`
	resp, b := post(t, chat, body)
	h := resp.Header
	if resp.StatusCode != 200 || h.Get("x-ratelimit-remaining-tokens") != "1991" || h.Get("x-ratelimit-limit-tokens") != "130000" ||
		h.Get("x-ratelimit-reset-tokens") != "30" || h.Get("x-ratelimit-limit-requests") != "10" ||
		h.Get("x-ratelimit-remaining-requests") != "9" || h.Get("x-ratelimit-reset-requests") != "1" {
		t.Fatalf("%d %v %s", resp.StatusCode, h, b)
	}
	resp, b = post(t, chat, body)
	if resp.StatusCode != 429 || resp.Header.Get("retry-after-ms") != "30000" || resp.Header.Get("retry-after") != "30" ||
		!strings.Contains(string(b), `"code":"429"`) || !strings.Contains(string(b), "token rate limit") {
		t.Fatalf("over TPM: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	// max_tokens 100 x best_of 3 on the completions API: 2 + 300 each, of the 1,991 left.
	for i := range 6 {
		resp, b = post(t, ts.URL+"/openai/deployments/gpt-4o/completions", `{"prompt":"hello world","max_tokens":100,"best_of":3}`)
		if resp.StatusCode != 200 {
			t.Fatalf("completion %d: %d %s", i+1, resp.StatusCode, b)
		}
	}
	if got := resp.Header.Get("x-ratelimit-remaining-tokens"); got != "179" {
		t.Fatalf("remaining %q, want 1991 - 6 x 302", got)
	}
	// Seven admitted in this second (a refusal is not counted): three more fit, the 11th is
	// refused by the RPM window whatever its size, until the next second.
	for i := range 3 {
		if resp, b := post(t, ts.URL+"/openai/deployments/gpt-4o/embeddings", `{"input":"hi"}`); resp.StatusCode != 200 {
			t.Fatalf("embedding %d: %d %s", i+1, resp.StatusCode, b)
		}
	}
	resp, b = post(t, ts.URL+"/openai/deployments/gpt-4o/embeddings", `{"input":"hi"}`)
	if resp.StatusCode != 429 || resp.Header.Get("retry-after-ms") != "1000" || resp.Header.Get("retry-after") != "1" ||
		!strings.Contains(string(b), "call rate limit") {
		t.Fatalf("11th in a second: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	// A handler records its answer after the client has read it; Add writes the line before it
	// counts it, under one lock.
	deadline := time.Now().Add(5 * time.Second)
	for st := srv.Recorder.Stats().Providers["azure"]; st == nil || st.Admitted+st.RateLimited < 12; st = srv.Recorder.Stats().Providers["azure"] {
		if time.Now().After(deadline) {
			t.Fatalf("stats %+v", st)
		}
		time.Sleep(10 * time.Millisecond)
	}
	rs := records(t, &buf)
	if len(rs) != 12 {
		t.Fatalf("%d records", len(rs))
	}
	first, last := rs[0], rs[len(rs)-1]
	if first.Provider != "azure" || first.Model != "gpt-4o" || first.Cost != 128_009 || first.Status != 200 ||
		rs[1].Which != "tokens" || rs[1].Status != 429 || last.Which != "requests" || last.WaitMS != 1000 {
		t.Fatalf("records %+v", rs)
	}
	st := srv.Recorder.Stats().Providers["azure"]
	if st.Admitted != 10 || st.RateLimited != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPriceOfAzure: /price answers Azure's counting.
func TestPriceOfAzure(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, 0)
	_, b := post(t, ts.URL+"/price/openai/deployments/gpt-4o/chat/completions", `{"messages":[{"role":"user","content":"hello world"}]}`)
	var out struct {
		Provider string
		Cost     int64
	}
	if err := json.Unmarshal(b, &out); err != nil || out.Provider != "azure" || out.Cost != 128_009 {
		t.Fatalf("%s", b)
	}
}

func TestRunRejectsBadAzureFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-azure-rpm-window", "5s"}, {"-azure-rpm", "-1"}, {"-azure-tpm", "-1"}} {
		var out, errs bytes.Buffer
		if err := run(t.Context(), args, &out, &errs); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
