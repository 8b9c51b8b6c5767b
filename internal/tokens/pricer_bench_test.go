package tokens

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// englishProse returns n bytes of English prose: the GNU and Apache licence texts in the
// counter's testdata/english.txt (verbatim copying permitted), repeated if needed and cut at a
// rune boundary.
func englishProse(tb testing.TB, n int) []byte {
	tb.Helper()
	b, err := os.ReadFile("../tiktoken/testdata/english.txt")
	if err != nil {
		tb.Fatal(err)
	}
	out := bytes.Repeat(b, n/len(b)+1)[:n]
	for !utf8.Valid(out) {
		out = out[:len(out)-1]
	}
	return out
}

// pathological returns n bytes of one of the inputs that make naive BPE quadratic: each is a
// single huge piece (or, for random bytes, many pieces that rarely merge).
func pathological(kind string, n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	switch kind {
	case "letter":
		return bytes.Repeat([]byte("a"), n)
	case "spaces":
		return bytes.Repeat([]byte(" "), n)
	case "newlines":
		return bytes.Repeat([]byte("\n"), n)
	case "cjk":
		// Random common CJK ideographs with no punctuation: one \p{L}+ piece.
		var sb strings.Builder
		for sb.Len() < n-3 {
			sb.WriteRune(rune(0x4E00 + rng.IntN(0x9FA5-0x4E00)))
		}
		return []byte(sb.String())
	case "random":
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	panic("unknown kind " + kind)
}

var pathologicalKinds = []string{"letter", "spaces", "newlines", "cjk", "random"}

// BenchmarkEstimate prices whole requests: a typical small chat request, and 1 MiB chat bodies
// of English and of each pathological text (Envoy's ext_authz timeout is typically 200 ms to
// 1 s; see also TestOneMiB).
func BenchmarkEstimate(b *testing.B) {
	p := newPricer(b, Options{})
	run := func(name, body string) {
		b.Run(name, func(b *testing.B) {
			in := post("/v1/chat/completions", body)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				p.Estimate(in)
			}
		})
	}
	run("chat-small", `{"model":"gpt-4o","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"What is the capital of France? Answer in one word."}],"max_tokens":20}`)
	run("chat-1MiB-english", chatBody(b, englishProse(b, 1<<20)))
	for _, kind := range pathologicalKinds {
		text := pathological(kind, 1<<20)
		if kind == "random" {
			text = bytes.ToValidUTF8(text, []byte("?")) // JSON strings must be UTF-8
		}
		run("chat-1MiB-"+kind, chatBody(b, text))
	}
}

// chatRequest is what encoding/json would need to decode to price a chat request.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
		Name    string `json:"name"`
	} `json:"messages"`
	MaxTokens *int64 `json:"max_tokens"`
	N         *int64 `json:"n"`
}

// BenchmarkParse compares the pricing tape with encoding/json decoding only the fields pricing
// needs, on a 100 KB chat body (parsing only; counting is the same for both).
func BenchmarkParse(b *testing.B) {
	body := []byte(chatBody(b, englishProse(b, 100<<10)))
	b.Run("tape", func(b *testing.B) {
		var d pricing.Doc
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			if err := d.Parse(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var req chatRequest
			if err := json.Unmarshal(body, &req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
