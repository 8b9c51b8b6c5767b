package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestMaxCounted: a text over MaxCounted costs its length in bytes, never less than its count;
// shorter texts are counted as before.
func TestMaxCounted(t *testing.T) {
	p := &Pricer{DefaultOutput: 4096, AnthropicEncoding: "cl100k_base", MaxCounted: 100, encs: testPricer.encs}
	long := strings.Repeat("hello world ", 50) // 600 bytes, about 100 tokens
	for _, tc := range []struct {
		text string
		want int64
	}{
		{"hello world", 3 + 1 + 2 + 3}, // message, role, two tokens, priming
		{long, 3 + 1 + int64(len(long)) + 3},
	} {
		body, _ := json.Marshal(map[string]any{"model": "gpt-4o", "max_tokens": 1, "messages": []any{map[string]string{"role": "user", "content": tc.text}}})
		pr, err := p.Price("/v1/chat/completions", body)
		if err != nil || pr.Prompt != tc.want {
			t.Errorf("%d bytes: prompt %v (%v), want %d", len(tc.text), pr, err, tc.want)
		}
		exact, _ := testPricer.Price("/v1/chat/completions", body)
		if pr.Prompt < exact.Prompt {
			t.Errorf("%d bytes: %d below the count %d", len(tc.text), pr.Prompt, exact.Prompt)
		}
	}
}
