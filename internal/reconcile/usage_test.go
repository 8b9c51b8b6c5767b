package reconcile

import (
	"strings"
	"testing"
)

// BenchmarkParserSSE reads an OpenAI stream of 500 content events, its usage and [DONE], in
// chunks of 1 KiB, as the response path reads every streamed reply: with include_usage (each
// content event says "usage":null, and is decoded) and without (no content event is decoded).
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
