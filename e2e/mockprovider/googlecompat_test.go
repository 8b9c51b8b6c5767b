package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const vertexHost = "us-central1-aiplatform.googleapis.com"

func TestVertexClaudeAnswersMessagesUnderVertexQuotas(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)}
	ts := newGeminiServer(t, &Gemini{RPM: 2}, clk)
	base := "/v1/projects/p/locations/us-central1/publishers/anthropic/models/claude-sonnet-4-5@20250929:"
	body := `{"anthropic_version":"vertex-2023-10-16","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`

	resp, b := geminiPost(t, ts.URL, vertexHost, base+"rawPredict", body)
	var msg struct {
		Type  string
		Model string
		Usage struct {
			InputTokens  int64 `json:"input_tokens"`
			OutputTokens int64 `json:"output_tokens"`
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &msg) != nil || msg.Type != "message" ||
		msg.Model != "claude-sonnet-4-5@20250929" || msg.Usage.InputTokens <= 0 || msg.Usage.OutputTokens != 9 {
		t.Fatalf("rawPredict: %d %s", resp.StatusCode, b)
	}

	resp, b = geminiPost(t, ts.URL, vertexHost, base+"streamRawPredict", body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("content-type"), "text/event-stream") ||
		!strings.Contains(string(b), "event: message_delta") || !strings.Contains(string(b), `"output_tokens":9`) {
		t.Fatalf("streamRawPredict: %d %s", resp.StatusCode, b)
	}

	// Two requests a minute per model: the third is Google's 429.
	resp, b = geminiPost(t, ts.URL, vertexHost, base+"rawPredict", body)
	var st geminiStatus
	if resp.StatusCode != 429 || json.Unmarshal(b, &st) != nil || st.Error.Status != "RESOURCE_EXHAUSTED" {
		t.Fatalf("third: %d %s", resp.StatusCode, b)
	}

	// A body naming its model, or without an anthropic_version, is refused.
	for _, bad := range []string{
		`{"anthropic_version":"vertex-2023-10-16","model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		`{"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		if resp, b := geminiPost(t, ts.URL, vertexHost, base+"rawPredict", bad); resp.StatusCode != 400 {
			t.Errorf("%s: %d %s", bad, resp.StatusCode, b)
		}
	}
}

func TestGeminiOpenAICompatCountsAsGemini(t *testing.T) {
	t.Parallel()
	clk := &fakeClock{t: time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)}
	g := &Gemini{TPM: 100}
	ts := newGeminiServer(t, g, clk)
	const host, path = "generativelanguage.googleapis.com", "/v1beta/openai/chat/completions"
	resp, b := geminiPost(t, ts.URL, host, path,
		`{"model":"gemini-2.5-flash","max_tokens":50,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}`)
	var c struct {
		Object string
		Usage  struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
		}
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &c) != nil || c.Object != "chat.completion" || c.Usage.CompletionTokens != 9 {
		t.Fatalf("chat: %d %s", resp.StatusCode, b)
	}
	// Gemini's count: "be brief" (2) and "hi" (1), plus 3 a turn.
	if c.Usage.PromptTokens != 9 {
		t.Errorf("prompt_tokens %d, want 9", c.Usage.PromptTokens)
	}
	resp, b = geminiPost(t, ts.URL, host, path,
		`{"model":"gemini-2.5-flash","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || !strings.Contains(string(b), `"prompt_tokens":4`) || !strings.Contains(string(b), "data: [DONE]") {
		t.Fatalf("stream: %d %s", resp.StatusCode, b)
	}
	// The same model's input TPM as generateContent: 13 of 100 used, 90 more do not fit.
	resp, b = geminiPost(t, ts.URL, host, geminiPath,
		`{"contents":[{"role":"user","parts":[{"text":"`+strings.Repeat("hi ", 90)+`"}]}]}`)
	if resp.StatusCode != 429 {
		t.Fatalf("generateContent over the shared TPM: %d %s", resp.StatusCode, b)
	}
}
