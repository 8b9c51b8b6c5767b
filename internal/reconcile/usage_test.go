package reconcile

import (
	"strings"
	"testing"
)

// BenchmarkParserSSE reads an OpenAI stream of 500 content events, its usage and [DONE], in
// chunks of 1 KiB, as the response path reads every streamed reply: with include_usage (each
// content event says "usage":null, which is looked at, not decoded) and without.
func BenchmarkParserSSE(b *testing.B) {
	content := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null,"logprobs":null}]%s}` + "\n\n"
	usage := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":200,"completion_tokens":500,"total_tokens":700}}` + "\n\n"
	for _, bc := range []struct{ name, field string }{{"include_usage", `,"usage":null`}, {"content_only", ""}} {
		stream := []byte(strings.Repeat(strings.Replace(content, "%s", bc.field, 1), 500) + usage + "data: [DONE]\n\n")
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				p := parser{sse: true, limit: 4 << 20}
				for s := stream; len(s) > 0; {
					n := min(1024, len(s))
					p.write(s[:n])
					s = s[n:]
				}
				if u, ok := p.end(); !ok || u.Total != 700 {
					b.Fatalf("usage %+v %v", u, ok)
				}
			}
		})
	}
}

// Events whose usage fields are all null are skipped; any other mention of usage is decoded.
func TestNullUsage(t *testing.T) {
	t.Parallel()
	for data, want := range map[string]bool{
		`{"choices":[{"delta":{"content":"hi"}}],"usage":null}`:            true,
		`{"choices":[],"usage": null}`:                                     true,
		`{"a":{"usage":null},"usage":null}`:                                true,
		`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`: false,
		`{"response":{"usage":null},"usage":{"input_tokens":3}}`:           false,
		`{"usageMetadata":{"promptTokenCount":3}}`:                         false,
		`{"usage"`: false,
		`{"type":"message_delta","usage":{"output_tokens":55}}`:                 false,
		`{"type":"response.completed","response":{"usage":{"total_tokens":9}}}`: false,
	} {
		if got := nullUsage([]byte(data)); got != want {
			t.Errorf("nullUsage(%s) = %v, want %v", data, got, want)
		}
	}
	p := parser{sse: true, limit: 1 << 20}
	p.write([]byte("data: {\"choices\":[{\"delta\":{}}],\"usage\":null}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":3,\"total_tokens\":5}}\n\ndata: [DONE]\n\n"))
	if u, ok := p.end(); !ok || u.Total != 5 {
		t.Errorf("usage %+v %v, want 5 tokens", u, ok)
	}
}
