package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func bedrockCall(t *testing.T, url, op, model, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/model/"+strings.ReplaceAll(model, ":", "%3A")+"/"+op, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = "bedrock-runtime.us-east-1.amazonaws.com"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// The burndown: a Claude 4-era model's output costs 5x at the end; the start reserves the input
// plus maxTokens; over the quota the answer is Bedrock's ThrottlingException.
func TestBedrockAccounting(t *testing.T) {
	t.Parallel()
	srv := &Server{Pricer: testPricer, Recorder: NewRecorder(TokenBucket, nil), CompletionTokens: 100, Now: time.Now,
		Bedrock: &Bedrock{TPM: 1000, Period: time.Hour}}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	const model = "us.anthropic.claude-sonnet-4-20250514-v1:0"
	body := `{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":100}}`
	resp, b := bedrockCall(t, ts.URL, "converse", model, body)
	var v struct {
		Usage struct{ InputTokens, OutputTokens int64 }
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &v) != nil || v.Usage.OutputTokens != 100 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	// 1000 - (input + 500): a second request of input + 100 still fits, a third does not.
	if resp, b := bedrockCall(t, ts.URL, "converse", model, body); resp.StatusCode != 200 {
		t.Fatalf("second: %d %s", resp.StatusCode, b)
	}
	resp, b = bedrockCall(t, ts.URL, "converse", model, body)
	if resp.StatusCode != 429 || !strings.HasPrefix(resp.Header.Get("x-amzn-ErrorType"), "ThrottlingException:") || !bytes.Contains(b, []byte(`"message"`)) {
		t.Errorf("third: %d %v %s, want ThrottlingException", resp.StatusCode, resp.Header, b)
	}
	// Another vendor's model burns 1x: three fit in its own quota.
	for i := range 3 {
		if resp, b := bedrockCall(t, ts.URL, "converse", "amazon.nova-pro-v1:0", body); resp.StatusCode != 200 {
			t.Fatalf("nova %d: %d %s", i, resp.StatusCode, b)
		}
	}
}

// The stream is well-formed event stream messages whose last chunk holds the invocation metrics.
func TestBedrockStream(t *testing.T) {
	t.Parallel()
	srv := &Server{Pricer: testPricer, Recorder: NewRecorder(TokenBucket, nil), CompletionTokens: 3, Now: time.Now, Bedrock: &Bedrock{}}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	resp, b := bedrockCall(t, ts.URL, "invoke-with-response-stream", "anthropic.claude-opus-4-1-20250805-v1:0",
		`{"anthropic_version":"bedrock-2023-05-31","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`)
	if resp.StatusCode != 200 || resp.Header.Get("content-type") != "application/vnd.amazon.eventstream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	var last map[string]any
	n := 0
	for len(b) > 0 {
		total := binary.BigEndian.Uint32(b)
		hl := binary.BigEndian.Uint32(b[4:])
		if crc32.ChecksumIEEE(b[:8]) != binary.BigEndian.Uint32(b[8:]) || crc32.ChecksumIEEE(b[:total-4]) != binary.BigEndian.Uint32(b[total-4:]) {
			t.Fatalf("message %d: bad CRC", n)
		}
		var chunk struct{ Bytes []byte }
		if err := json.Unmarshal(b[12+hl:total-4], &chunk); err != nil {
			t.Fatal(err)
		}
		last = nil
		if err := json.Unmarshal(chunk.Bytes, &last); err != nil {
			t.Fatal(err)
		}
		b, n = b[total:], n+1
	}
	m, _ := last["amazon-bedrock-invocationMetrics"].(map[string]any)
	if n != 2+3+3 || m["outputTokenCount"] != 3.0 {
		t.Errorf("%d messages, last %v", n, last)
	}
}
