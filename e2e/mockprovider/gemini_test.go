package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable clock for the mock's Now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func pacific(t *testing.T) *time.Location {
	t.Helper()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	return la
}

func newGeminiServer(t *testing.T, g *Gemini, clk *fakeClock) *httptest.Server {
	t.Helper()
	if g.Period == 0 {
		g.Period = time.Minute
	}
	g.Zone = pacific(t)
	srv := &Server{Pricer: testPricer, Recorder: NewRecorder(TokenBucket, nil), CompletionTokens: 9, Now: clk.Now, Gemini: g}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts
}

const geminiPath = "/v1beta/models/gemini-2.5-flash:generateContent"

func geminiPost(t *testing.T, url, host, path, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

type geminiUsage struct {
	PromptTokenCount, CandidatesTokenCount, TotalTokenCount, CachedContentTokenCount int64
}

type geminiStatus struct {
	Error struct {
		Code    int
		Message string
		Status  string
		Details []struct {
			Type       string `json:"@type"`
			RetryDelay string
			Violations []struct{ QuotaMetric, QuotaID string }
		}
	}
}

// quota429 checks a 429 is the Gemini API's: RESOURCE_EXHAUSTED, a QuotaFailure naming quotaID,
// a RetryInfo, no rate-limit headers; it returns the retryDelay.
func quota429(t *testing.T, resp *http.Response, b []byte, quotaID string) string {
	t.Helper()
	var st geminiStatus
	if resp.StatusCode != 429 || json.Unmarshal(b, &st) != nil || st.Error.Code != 429 || st.Error.Status != "RESOURCE_EXHAUSTED" {
		t.Fatalf("want a RESOURCE_EXHAUSTED 429: %d %s", resp.StatusCode, b)
	}
	for k := range resp.Header {
		if strings.Contains(strings.ToLower(k), "ratelimit") || strings.EqualFold(k, "retry-after") {
			t.Errorf("header %s: Gemini sends no rate-limit headers", k)
		}
	}
	var delay string
	var ids []string
	for _, d := range st.Error.Details {
		switch d.Type {
		case "type.googleapis.com/google.rpc.RetryInfo":
			delay = d.RetryDelay
		case "type.googleapis.com/google.rpc.QuotaFailure":
			for _, v := range d.Violations {
				ids = append(ids, v.QuotaID)
			}
		}
	}
	if len(ids) != 1 || ids[0] != quotaID {
		t.Errorf("quota ids %v, want %s", ids, quotaID)
	}
	if delay == "" || !strings.Contains(st.Error.Message, "Please retry in ") {
		t.Errorf("no RetryInfo or no retry in the message: %s", b)
	}
	return delay
}

func prompt(text string, maxOut int) string {
	return `{"contents":[{"role":"user","parts":[{"text":"` + text + `"}]}],"generationConfig":{"maxOutputTokens":` +
		jsonInt(maxOut) + `}}`
}

func jsonInt(n int) string { b, _ := json.Marshal(n); return string(b) }

// TPM counts the input only: a large maxOutputTokens costs nothing, the usage reports the
// prompt the mock counted, and the third prompt over the limit is refused with the input quota.
func TestGeminiTPMCountsInputOnly(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	// "hello world" is 2 cl100k_base tokens, plus 3 for the turn: 5 a request.
	ts := newGeminiServer(t, &Gemini{TPM: 10}, clk)
	for i := range 2 {
		resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, prompt("hello world", 100000))
		var v struct{ UsageMetadata geminiUsage }
		if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil {
			t.Fatalf("call %d: %d %s", i, resp.StatusCode, b)
		}
		if u := v.UsageMetadata; u.PromptTokenCount != 5 || u.CandidatesTokenCount != 9 || u.TotalTokenCount != 14 || u.CachedContentTokenCount != 0 {
			t.Fatalf("usage %+v, want 5 + 9", u)
		}
	}
	resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, prompt("hello world", 1))
	// Empty after 10 of 10: 5 tokens refill in 30 s at 10 a minute.
	if d := quota429(t, resp, b, "GenerateContentInputTokensPerModelPerMinute-FreeTier"); d != "30s" {
		t.Errorf("retryDelay %q, want 30s", d)
	}
	// Another model has its own limits.
	if resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-pro:generateContent", prompt("hello world", 1)); resp.StatusCode != 200 {
		t.Fatalf("another model: %d %s", resp.StatusCode, b)
	}
	// Vertex AI's limits are not the Gemini API's, for the same model; its 429 names no quota.
	vertex := "/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash:generateContent"
	for i := range 2 {
		if resp, b := geminiPost(t, ts.URL, "us-central1-aiplatform.googleapis.com", vertex, prompt("hello world", 1)); resp.StatusCode != 200 {
			t.Fatalf("vertex %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b = geminiPost(t, ts.URL, "us-central1-aiplatform.googleapis.com", vertex, prompt("hello world", 1))
	var st geminiStatus
	if resp.StatusCode != 429 || json.Unmarshal(b, &st) != nil || st.Error.Status != "RESOURCE_EXHAUSTED" || len(st.Error.Details) != 0 ||
		!strings.HasPrefix(st.Error.Message, "Resource exhausted. Please try again later.") {
		t.Errorf("vertex 429: %d %s", resp.StatusCode, b)
	}
	clk.Advance(30 * time.Second)
	if resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, prompt("hello world", 1)); resp.StatusCode != 200 {
		t.Fatalf("after the refill: %d %s", resp.StatusCode, b)
	}
	// A prompt over the whole limit never fits: no RetryInfo.
	resp, b = geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, prompt(strings.Repeat("hello world ", 20), 1))
	if resp.StatusCode != 429 || bytes.Contains(b, []byte("RetryInfo")) {
		t.Errorf("too large: %d %s", resp.StatusCode, b)
	}
}

func TestGeminiRPM(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	ts := newGeminiServer(t, &Gemini{RPM: 2, TPM: 1000}, clk)
	for range 2 {
		if resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, prompt("hi", 10)); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, prompt("hi", 10))
	if d := quota429(t, resp, b, "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"); d != "30s" {
		t.Errorf("retryDelay %q, want 30s", d)
	}
}

// RPD resets at midnight Pacific time, on the quota clock: not at UTC's midnight, a day of 23
// hours in spring, and the clock set through POST /gemini/clock.
func TestGeminiRPDResetsAtPacificMidnight(t *testing.T) {
	t.Parallel()
	la := pacific(t)
	clk := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	ts := newGeminiServer(t, &Gemini{RPD: 2}, clk)
	call := func() (*http.Response, []byte) {
		return geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, prompt("hi", 10))
	}
	setClock := func(at time.Time) {
		resp, b := geminiPost(t, ts.URL, "localhost", "/gemini/clock", `{"now":"`+at.Format(time.RFC3339)+`"}`)
		var v struct{ Now time.Time }
		if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil || !v.Now.Equal(at) {
			t.Fatalf("set clock: %d %s", resp.StatusCode, b)
		}
	}
	// 16:59:50 PDT on 7 July is 23:59:50 UTC: UTC's midnight resets nothing.
	setClock(time.Date(2026, 7, 7, 16, 59, 50, 0, la))
	for range 2 {
		if resp, b := call(); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	}
	clk.Advance(20 * time.Second)
	resp, b := call()
	if d := quota429(t, resp, b, "GenerateRequestsPerDayPerProjectPerModel-FreeTier"); d != "25190s" {
		t.Errorf("after UTC midnight: retryDelay %q, want 25190s (until 00:00 PDT)", d)
	}
	// Ten seconds before Pacific midnight: denied for ten seconds, then a new day.
	setClock(time.Date(2026, 7, 7, 23, 59, 50, 0, la))
	resp, b = call()
	if d := quota429(t, resp, b, "GenerateRequestsPerDayPerProjectPerModel-FreeTier"); d != "10s" {
		t.Errorf("retryDelay %q, want 10s", d)
	}
	clk.Advance(9*time.Second + 999*time.Millisecond)
	if resp, _ := call(); resp.StatusCode != 429 {
		t.Fatalf("1 ms before midnight: %d", resp.StatusCode)
	}
	clk.Advance(time.Millisecond)
	for range 2 {
		if resp, b := call(); resp.StatusCode != 200 {
			t.Fatalf("after Pacific midnight: %d %s", resp.StatusCode, b)
		}
	}
	// 8 March 2026 springs forward: from its midnight the day lasts 23 hours.
	setClock(time.Date(2026, 3, 8, 0, 0, 0, 0, la))
	for range 2 {
		if resp, b := call(); resp.StatusCode != 200 {
			t.Fatalf("spring day: %d %s", resp.StatusCode, b)
		}
	}
	resp, b = call()
	if d := quota429(t, resp, b, "GenerateRequestsPerDayPerProjectPerModel-FreeTier"); d != "82800s" {
		t.Errorf("spring day: retryDelay %q, want 82800s (23 h)", d)
	}
}

// Streams: a JSON array without alt, server-sent events with alt=sse; the Vertex path on a
// regional host; every chunk carries the usage so far and the last one the totals.
func TestGeminiStreams(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	ts := newGeminiServer(t, &Gemini{TPM: 1000}, clk)
	vertex := "/v1/projects/p1/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent"
	for _, c := range []struct{ host, path string }{
		{"generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash:streamGenerateContent"},
		{"us-central1-aiplatform.googleapis.com", vertex},
	} {
		resp, b := geminiPost(t, ts.URL, c.host, c.path, prompt("hello world", 100))
		var chunks []struct{ UsageMetadata geminiUsage }
		if resp.StatusCode != 200 || json.Unmarshal(b, &chunks) != nil || len(chunks) != 3 {
			t.Fatalf("%s array: %d %s", c.host, resp.StatusCode, b)
		}
		if u := chunks[2].UsageMetadata; u.PromptTokenCount != 5 || u.CandidatesTokenCount != 9 || u.TotalTokenCount != 14 {
			t.Errorf("%s array: last usage %+v", c.host, u)
		}
		resp, b = geminiPost(t, ts.URL, c.host, c.path+"?alt=sse", prompt("hello world", 100))
		if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" {
			t.Fatalf("%s sse: %d %v", c.host, resp.StatusCode, resp.Header)
		}
		var last geminiUsage
		n := 0
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev struct{ UsageMetadata geminiUsage }
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatalf("event %q: %v", data, err)
			}
			last, n = ev.UsageMetadata, n+1
		}
		if n != 3 || last.TotalTokenCount != 14 {
			t.Errorf("%s sse: %d events, last usage %+v", c.host, n, last)
		}
	}
}

// cachedContent brings input the body does not hold: counted by TPM, in promptTokenCount and
// reported as cachedContentTokenCount.
func TestGeminiCachedContent(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	ts := newGeminiServer(t, &Gemini{TPM: 1000, CachedTokens: 600}, clk)
	body := `{"cachedContent":"cachedContents/abc","contents":[{"role":"user","parts":[{"text":"hello world"}]}]}`
	resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, body)
	var v struct{ UsageMetadata geminiUsage }
	if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if u := v.UsageMetadata; u.PromptTokenCount != 605 || u.CachedContentTokenCount != 600 {
		t.Fatalf("usage %+v, want 605 of which 600 cached", u)
	}
	// 395 left: a second one (605) waits.
	resp, b = geminiPost(t, ts.URL, "generativelanguage.googleapis.com", geminiPath, body)
	quota429(t, resp, b, "GenerateContentInputTokensPerModelPerMinute-FreeTier")
}

func TestGeminiBadRequests(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)}
	ts := newGeminiServer(t, &Gemini{TPM: 1000}, clk)
	for _, c := range []struct{ path, body string }{
		{geminiPath, `{"contents":[]}`},
		{geminiPath, `not json`},
	} {
		resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", c.path, c.body)
		if resp.StatusCode != 400 || !bytes.Contains(b, []byte(`"INVALID_ARGUMENT"`)) {
			t.Errorf("%s: %d %s", c.body, resp.StatusCode, b)
		}
	}
	if resp, b := geminiPost(t, ts.URL, "generativelanguage.googleapis.com", "/v1beta/models/gemini-2.5-flash:countTokens", prompt("hi", 1)); resp.StatusCode != 404 {
		t.Errorf("countTokens: %d %s", resp.StatusCode, b)
	}
}

func TestGeminiRecognition(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		host string
		want bool
	}{
		{"generativelanguage.googleapis.com", true},
		{"generativelanguage.googleapis.com:443", true},
		{"us-central1-aiplatform.googleapis.com", true},
		{"aiplatform.googleapis.com", true},
		{"-aiplatform.googleapis.com", false},
		{"a.b-aiplatform.googleapis.com", false},
		{"api.openai.com", false},
	} {
		if got := geminiHost(c.host); got != c.want {
			t.Errorf("geminiHost(%q) = %v", c.host, got)
		}
	}
	for _, c := range []struct{ path, model, method string }{
		{"/v1beta/models/gemini-2.5-flash:generateContent", "gemini-2.5-flash", "generateContent"},
		{"/v1/projects/p/locations/l/publishers/google/models/gemini-2.0-flash-001:streamGenerateContent", "gemini-2.0-flash-001", "streamGenerateContent"},
		{"/v1beta/models/gemini%2D2.5:generateContent", "gemini-2.5", "generateContent"},
		{"/v1beta/models/gemini-2.5-flash:countTokens", "", ""},
		{"/v1beta/models/a/b:generateContent", "", ""},
		{"/v1beta/models/:generateContent", "", ""},
		{"/v1/chat/completions", "", ""},
	} {
		model, method, ok := geminiCall(c.path)
		if ok != (c.model != "") || (ok && (model != c.model || method != c.method)) {
			t.Errorf("geminiCall(%q) = %q %q %v", c.path, model, method, ok)
		}
	}
}

// FuzzGeminiCall: the path parser never panics, and what it accepts names a model without a
// slash and one of the two methods.
func FuzzGeminiCall(f *testing.F) {
	for _, s := range []string{geminiPath, "/v1/projects/p/locations/l/publishers/google/models/m:streamGenerateContent",
		"/models/", "/models/:", "/models/%zz:generateContent", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		model, method, ok := geminiCall(p)
		if !ok {
			return
		}
		if model == "" || (method != "generateContent" && method != "streamGenerateContent") {
			t.Fatalf("geminiCall(%q) = %q %q", p, model, method)
		}
	})
}

// FuzzGeminiPrompt: any body the JSON decoder accepts is counted without a panic, never
// negative.
func FuzzGeminiPrompt(f *testing.F) {
	f.Add([]byte(prompt("hello", 3)))
	f.Add([]byte(`{"systemInstruction":{"parts":[{"text":"x"}]},"contents":[{"parts":[]}],"tools":[{"a":1}]}`))
	f.Add([]byte(`{"contents":null}`))
	g := &Gemini{Factor: 1.25, CachedTokens: 10}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req geminiRequest
		if json.Unmarshal(b, &req) != nil {
			return
		}
		in, cached, err := g.prompt(testPricer, &req)
		if err == nil && (in < 0 || cached < 0 || cached > in) {
			t.Fatalf("prompt(%s) = %d, %d", b, in, cached)
		}
	})
}
