package filter

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicopt "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaiopt "github.com/openai/openai-go/v3/option"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// replay serves a denied CheckResponse as Envoy would send it to the client: its status, headers
// and body, for every request. It records when each request arrived.
type replay struct {
	resp *authv3.DeniedHttpResponse
	mu   sync.Mutex
	at   []time.Time
}

func (r *replay) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	r.at = append(r.at, time.Now())
	r.mu.Unlock()
	for _, h := range r.resp.GetHeaders() {
		w.Header().Set(h.GetHeader().GetKey(), h.GetHeader().GetValue())
	}
	w.WriteHeader(int(r.resp.GetStatus().GetCode()))
	w.Write([]byte(r.resp.GetBody())) //nolint:errcheck // test server
}

func (r *replay) arrivals() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.at...)
}

// deniedFor returns a real 429 of the filter for the named request: the second of two requests
// that each need most of the bucket. The waits are rewritten to values that tell the SDKs'
// choices apart: retry-after-ms 1500, retry-after 3 s, and the SDKs' own first backoff is at
// most 500 ms.
func deniedFor(t *testing.T, name string) *authv3.DeniedHttpResponse {
	t.Helper()
	e := newEnv(t, "", Options{})
	e.check(t, name)
	resp := e.check(t, name)
	d := resp.GetDeniedResponse()
	if d == nil || d.GetStatus().GetCode() != 429 {
		t.Fatalf("%s: not a 429: %v", name, resp)
	}
	for _, h := range d.GetHeaders() {
		switch h.GetHeader().GetKey() {
		case "retry-after-ms":
			h.Header.Value = "1500"
		case "retry-after":
			h.Header.Value = "3"
		}
	}
	return d
}

// checkRetried asserts that the SDK made two requests (one retry) spaced by the advertised
// retry-after-ms, not by its own backoff.
func checkRetried(t *testing.T, r *replay) {
	t.Helper()
	at := r.arrivals()
	if len(at) != 2 {
		t.Fatalf("the SDK made %d requests, want 2 (one retry)", len(at))
	}
	// Up to 900 ms late for a loaded machine, and still short of retry-after's 3 s.
	gap := at[1].Sub(at[0])
	if gap < 1500*time.Millisecond || gap > 2400*time.Millisecond {
		t.Errorf("the SDK waited %v between attempts, want the advertised retry-after-ms of 1500ms", gap)
	}
}

func TestOpenAISDKSurfacesRateLimit(t *testing.T) {
	t.Parallel()
	d := deniedFor(t, "chat_big")
	r := &replay{resp: d}
	srv := httptest.NewServer(r)
	defer srv.Close()

	client := openai.NewClient(openaiopt.WithBaseURL(srv.URL+"/v1"), openaiopt.WithAPIKey("sk-test"), openaiopt.WithMaxRetries(1))
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "gpt-4o",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
		MaxTokens: openai.Int(900),
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *openai.Error", err)
	}
	if apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Code != "rate_limit_exceeded" || apiErr.Type != "tokens" {
		t.Errorf("error = status %d code %q type %q", apiErr.StatusCode, apiErr.Code, apiErr.Type)
	}
	if !strings.Contains(apiErr.Message, "Rate limit reached for openai-model (tokens per minute)") {
		t.Errorf("message = %q", apiErr.Message)
	}
	checkRetried(t, r)
}

func TestAnthropicSDKSurfacesRateLimit(t *testing.T) {
	t.Parallel()
	d := deniedFor(t, "messages_big")
	r := &replay{resp: d}
	srv := httptest.NewServer(r)
	defer srv.Close()

	client := anthropic.NewClient(anthropicopt.WithBaseURL(srv.URL), anthropicopt.WithAPIKey("sk-ant-test"), anthropicopt.WithMaxRetries(1))
	_, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model:     "claude-sonnet-4-5",
		MaxTokens: 900,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("Hello"))},
	})
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) {
		t.Fatalf("err = %v, want *anthropic.Error", err)
	}
	if apiErr.StatusCode != http.StatusTooManyRequests {
		t.Errorf("status = %d", apiErr.StatusCode)
	}
	raw := apiErr.RawJSON()
	if !strings.Contains(raw, `"type":"rate_limit_error"`) || !strings.Contains(raw, "Rate limit reached for anthropic (tokens per minute)") {
		t.Errorf("error body = %s", raw)
	}
	checkRetried(t, r)
}

// A request that can never fit is not retried by the SDKs.
func TestSDKsDoNotRetryTooLarge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	d := e.check(t, "chat_huge").GetDeniedResponse()
	if d.GetStatus().GetCode() != 413 {
		t.Fatalf("status %v", d.GetStatus())
	}
	r := &replay{resp: d}
	srv := httptest.NewServer(r)
	defer srv.Close()
	client := openai.NewClient(openaiopt.WithBaseURL(srv.URL+"/v1"), openaiopt.WithAPIKey("sk-test"), openaiopt.WithMaxRetries(2))
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-4o",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")},
	})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 413 || apiErr.Code != "request_too_large" {
		t.Fatalf("err = %v", err)
	}
	if n := len(r.arrivals()); n != 1 {
		t.Errorf("the SDK sent %d requests, want 1 (no retry)", n)
	}
	if got := headerOf(&authv3.CheckResponse{HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: d}}, "retry-after"); got != "" {
		t.Errorf("retry-after = %q on a request that can never fit", got)
	}
}
