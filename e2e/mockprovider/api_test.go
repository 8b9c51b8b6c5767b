package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// testPricer is shared: loading an encoding takes seconds.
var testPricer = &Pricer{DefaultOutput: 4096, AnthropicEncoding: "cl100k_base"}

func newTestServer(t *testing.T, tpm int64) (*httptest.Server, *bytes.Buffer) {
	t.Helper()
	var rec bytes.Buffer
	srv := &Server{
		Pricer:           testPricer,
		Enforcer:         NewEnforcer(TokenBucket, time.Minute, map[string]Limits{"openai": {Tokens: tpm}, "anthropic": {Tokens: tpm}}, time.Now),
		Recorder:         NewRecorder(TokenBucket, &rec),
		CompletionTokens: 3,
		EmbeddingDims:    4,
		Now:              time.Now,
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts, &rec
}

func post(t *testing.T, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

func records(t *testing.T, buf *bytes.Buffer) []Record {
	t.Helper()
	var out []Record
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("record %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

func TestChatCompletionThenRateLimit(t *testing.T) {
	t.Parallel()
	ts, rec := newTestServer(t, 30)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello world"}],"max_tokens":10}`
	resp, b := post(t, ts.URL+"/v1/chat/completions", body, "authorization", "Bearer sk-tenant-a", "x-request-id", "r1")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
		Usage struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	// 3 priming + 3 per message + "user" (1) + "hello world" (2).
	if out.Usage.PromptTokens != 9 || out.Usage.CompletionTokens != 3 || out.Choices[0].Message.Content != " mock mock mock" {
		t.Fatalf("answer %s", b)
	}
	if got := resp.Header.Get("x-ratelimit-remaining-tokens"); got != "11" {
		t.Fatalf("x-ratelimit-remaining-tokens = %q, want 11 (30 - 19)", got)
	}

	resp, b = post(t, ts.URL+"/v1/chat/completions", body)
	if resp.StatusCode != 429 || resp.Header.Get("retry-after") == "" || resp.Header.Get("x-ratelimit-limit-tokens") != "30" {
		t.Fatalf("second request: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	var e struct {
		Error struct{ Type, Code, Message string }
	}
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != "rate_limit_exceeded" || e.Error.Type != "tokens" {
		t.Fatalf("error body %s", b)
	}

	rs := records(t, rec)
	if len(rs) != 2 || rs[0].Status != 200 || rs[0].Cost != 19 || rs[0].Key != "sk-tenant-a" || rs[0].RequestID != "r1" ||
		rs[0].InFlight != 1 || rs[0].End < rs[0].T || rs[1].Status != 429 || rs[1].Which != "tokens" {
		t.Fatalf("records %+v", rs)
	}
}

func TestChatStreamEndsWithUsage(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, 1000)
	resp, b := post(t, ts.URL+"/v1/chat/completions",
		`{"model":"gpt-4o","messages":[{"role":"system","content":"be brief","name":"x"},{"role":"user","content":[{"type":"text","text":"hello world"}]}],"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || resp.Header.Get("content-type") != "text/event-stream" {
		t.Fatalf("status %d %v", resp.StatusCode, resp.Header)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n\n")
	if lines[len(lines)-1] != "data: [DONE]" {
		t.Fatalf("last event %q", lines[len(lines)-1])
	}
	var usage struct {
		Choices []any
		Usage   struct {
			PromptTokens int64 `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lines[len(lines)-2], "data: ")), &usage); err != nil {
		t.Fatal(err)
	}
	// 3 + (3 + "system" 1 + "be brief" 2 + "x" 1 + 1) + (3 + "user" 1 + 2) = 17
	if len(usage.Choices) != 0 || usage.Usage.PromptTokens != 17 {
		t.Fatalf("usage chunk %s", lines[len(lines)-2])
	}
}

// DoneLinger keeps a stream open after its [DONE], which arrives whole before the reply ends.
func TestChatStreamLingersAfterDone(t *testing.T) {
	t.Parallel()
	const linger = 300 * time.Millisecond
	ts, _ := newTestServer(t, 1000)
	ts.Config.Handler.(*Server).DoneLinger = linger
	resp, err := http.Post(ts.URL+"/v1/chat/completions", "application/json", strings.NewReader(
		`{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("no [DONE] before %v", err)
		}
		if line == "data: [DONE]\n" {
			break
		}
	}
	done := time.Now()
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(done); d < linger*9/10 {
		t.Errorf("the reply ended %v after [DONE], want about %v", d, linger)
	}
}

func TestAnthropicMessagesAndErrors(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, 100)
	body := `{"model":"claude-sonnet-4-5","system":"be brief","messages":[{"role":"user","content":"hello world"}],"max_tokens":50}`
	resp, b := post(t, ts.URL+"/v1/messages", body, "x-api-key", "k", "anthropic-version", "2023-06-01")
	var m struct {
		Type  string
		Usage struct {
			InputTokens int64 `json:"input_tokens"`
		}
	}
	if err := json.Unmarshal(b, &m); err != nil || resp.StatusCode != 200 || m.Type != "message" || m.Usage.InputTokens != 15 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if resp.Header.Get("anthropic-ratelimit-tokens-remaining") != "35" {
		t.Fatalf("headers %v", resp.Header)
	}
	resp, b = post(t, ts.URL+"/v1/messages", body)
	var e struct {
		Type  string
		Error struct{ Type string }
	}
	if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 429 || e.Type != "error" || e.Error.Type != "rate_limit_error" {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	resp, b = post(t, ts.URL+"/v1/messages", `{"model":"claude-sonnet-4-5","messages":[]}`)
	if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 400 || e.Error.Type != "invalid_request_error" {
		t.Fatalf("missing max_tokens: %d %s", resp.StatusCode, b)
	}
	resp, b = post(t, ts.URL+"/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":101,"stream":true,"messages":[]}`)
	if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 429 || !strings.Contains(string(b), "Request too large") {
		t.Fatalf("too large: %d %s", resp.StatusCode, b)
	}
}

func TestAnthropicStream(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, 1000)
	resp, b := post(t, ts.URL+"/v1/messages", `{"model":"claude-haiku-4-5","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":2,"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(l, "event: "); ok {
			names = append(names, n)
		}
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(names, " ") != want {
		t.Fatalf("events %v", names)
	}
}

func TestEmbeddingsBase64(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, 1000)
	resp, b := post(t, ts.URL+"/v1/embeddings", `{"model":"text-embedding-3-small","input":["hello world","hi"],"encoding_format":"base64"}`)
	var out struct {
		Data  []struct{ Embedding string }
		Usage struct {
			PromptTokens int64 `json:"prompt_tokens"`
		}
	}
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s %v", resp.StatusCode, b, err)
	}
	raw, err := base64.StdEncoding.DecodeString(out.Data[1].Embedding)
	if len(out.Data) != 2 || err != nil || len(raw) != 16 || out.Usage.PromptTokens != 3 {
		t.Fatalf("embeddings %s", b)
	}
}

func TestResponsesAndModels(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, 1000)
	resp, b := post(t, ts.URL+"/v1/responses", `{"model":"gpt-4o-mini","input":"hello world","instructions":"be brief","max_output_tokens":7}`)
	var out struct {
		Object string
		Usage  struct {
			InputTokens int64 `json:"input_tokens"`
		}
	}
	// 3 + (3 + "system" + 2) + (3 + "user" + 2) = 15
	if err := json.Unmarshal(b, &out); err != nil || resp.StatusCode != 200 || out.Object != "response" || out.Usage.InputTokens != 15 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	r, err := http.Get(ts.URL + "/v1/models")
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("models: %v %v", r, err)
	}
	r.Body.Close()
	r, err = http.Get(ts.URL + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var st Stats
	if err := json.NewDecoder(r.Body).Decode(&st); err != nil || st.Providers["openai"].AdmittedTokens != 22 {
		t.Fatalf("stats %+v %v", st, err)
	}
}

func TestPriceDoesNotAdmit(t *testing.T) {
	t.Parallel()
	ts, rec := newTestServer(t, 10)
	resp, b := post(t, ts.URL+"/price/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello world"}],"max_tokens":100}`)
	var p struct{ Prompt, Output, Cost int64 }
	if err := json.Unmarshal(b, &p); err != nil || resp.StatusCode != 200 || p.Prompt != 9 || p.Cost != 109 || rec.Len() != 0 {
		t.Fatalf("%d %s, %d bytes recorded", resp.StatusCode, b, rec.Len())
	}
}

func TestNonUTF8BodyIsPriced(t *testing.T) {
	t.Parallel()
	ts, _ := newTestServer(t, 1000)
	resp, b := post(t, ts.URL+"/v1/chat/completions", "{\"model\":\"gpt-4o-mini\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"caf\xe9\"}]}")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}

// With ChargeActual the budget pays the prompt plus the tokens generated, not max_tokens.
func TestChargeActual(t *testing.T) {
	t.Parallel()
	ts, rec := newTestServer(t, 30)
	ts.Config.Handler.(*Server).ChargeActual = true
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello world"}],"max_tokens":10}`
	for i := range 2 {
		resp, b := post(t, ts.URL+"/v1/chat/completions", body)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, b)
		}
	}
	// 9 prompt + 3 generated, twice: 24 of 30; reserved pricing (19 each) would refuse the second.
	if got := records(t, rec); len(got) != 2 || got[0].Cost != 12 || got[1].Cost != 12 {
		t.Fatalf("records %+v", got)
	}
}

func TestAPIOnHost(t *testing.T) {
	for _, c := range []struct{ host, path, provider, api string }{
		{"api.anthropic.com", "/v1/chat/completions", "anthropic", "chat_completions"},
		{"API.anthropic.com:80", "/v1/messages", "anthropic", "messages"},
		{"api.anthropic.com", "/v1/embeddings", "", ""},
		{"api.openai.com", "/v1/chat/completions", "openai", "chat_completions"},
		{"127.0.0.1:8080", "/v1/messages", "anthropic", "messages"},
	} {
		if p, a := APIOnHost(c.host, c.path); p != c.provider || a != c.api {
			t.Errorf("APIOnHost(%q, %q) = %q %q, want %q %q", c.host, c.path, p, a, c.provider, c.api)
		}
	}
}

// A key with a budget of its own is admitted, refused and reported against it alone: its 429
// leaves the shared budget whole, and the shared budget's state never shows in its headers.
func TestKeyOfItsOwnOrganisation(t *testing.T) {
	t.Parallel()
	var rec bytes.Buffer
	srv := &Server{
		Pricer:           testPricer,
		Enforcer:         NewEnforcer(TokenBucket, time.Minute, map[string]Limits{"openai": {Tokens: 1000}}, time.Now),
		KeyEnforcers:     map[string]*Enforcer{"sk-foreign": NewEnforcer(TokenBucket, time.Minute, map[string]Limits{"openai": {Tokens: 30}}, time.Now)},
		KeyLatency:       map[string]time.Duration{"sk-slow": 50 * time.Millisecond},
		Recorder:         NewRecorder(TokenBucket, &rec),
		CompletionTokens: 3,
		Now:              time.Now,
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	body := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello world"}],"max_tokens":10}`
	resp, _ := post(t, ts.URL+"/v1/chat/completions", body, "authorization", "Bearer sk-foreign")
	if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-remaining-tokens") != "11" || resp.Header.Get("x-ratelimit-limit-tokens") != "30" {
		t.Fatalf("first foreign request: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = post(t, ts.URL+"/v1/chat/completions", body, "authorization", "Bearer sk-foreign")
	if resp.StatusCode != 429 || resp.Header.Get("retry-after") == "" {
		t.Fatalf("second foreign request: %d %v, want 429 with retry-after", resp.StatusCode, resp.Header)
	}
	t0 := time.Now()
	resp, _ = post(t, ts.URL+"/v1/chat/completions", body, "authorization", "Bearer sk-slow")
	if resp.StatusCode != 200 || resp.Header.Get("x-ratelimit-remaining-tokens") != "981" {
		t.Fatalf("shared request: %d %v, want the shared budget whole but this one", resp.StatusCode, resp.Header)
	}
	if d := time.Since(t0); d < 50*time.Millisecond {
		t.Errorf("sk-slow answered in %s, want its 50ms latency", d)
	}
}

// The control endpoint changes the factor Anthropic prompts are counted with, from the next
// request on; a bad factor is refused and changes nothing.
func TestControlAnthropicFactor(t *testing.T) {
	t.Parallel()
	srv := &Server{Pricer: &Pricer{DefaultOutput: 4096, AnthropicEncoding: "cl100k_base", AnthropicFactor: 1},
		Recorder: NewRecorder(TokenBucket, &bytes.Buffer{}), CompletionTokens: 3, Now: time.Now}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	prompt := func() int64 {
		t.Helper()
		_, b := post(t, ts.URL+"/price/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hello world, how are you today?"}]}`,
			"host", "api.anthropic.com")
		var p struct{ Prompt int64 }
		if err := json.Unmarshal(b, &p); err != nil || p.Prompt <= 0 {
			t.Fatalf("price: %s", b)
		}
		return p.Prompt
	}
	before := prompt()
	for _, bad := range []string{"0", "-1", "abc", "100"} {
		if resp, _ := post(t, ts.URL+"/control/anthropic-factor", bad); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("factor %q: %d", bad, resp.StatusCode)
		}
	}
	if got := prompt(); got != before {
		t.Fatalf("after bad factors: %d, want %d", got, before)
	}
	if resp, b := post(t, ts.URL+"/control/anthropic-factor", "2"); resp.StatusCode != http.StatusOK {
		t.Fatalf("factor 2: %d %s", resp.StatusCode, b)
	}
	if got := prompt(); got != 2*before {
		t.Fatalf("after factor 2: %d, want %d", got, 2*before)
	}
}
