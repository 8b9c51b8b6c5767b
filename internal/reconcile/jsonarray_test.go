package reconcile

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/gemini"
)

// elements frames src cut into chunks of size n.
func elements(src []byte, n, limit int) []string {
	var a arrayFrames
	var got []string
	for len(src) > 0 {
		k := min(n, len(src))
		a.write(src[:k], limit, func(e []byte) { got = append(got, string(e)) })
		src = src[k:]
	}
	return got
}

func TestArrayFrames(t *testing.T) {
	t.Parallel()
	src := []byte(" [{\"a\":\"]}[{\\\"\"},\r\n{\"b\":[1,{\"c\":2}]}\n,\n[3] , 4, \"x]\", {\"d\":{}}]{\"after\":1}")
	want := []string{`{"a":"]}[{\""}`, `{"b":[1,{"c":2}]}`, `[3]`, `{"d":{}}`}
	for n := 1; n <= len(src); n++ {
		if got := elements(src, n, 1<<10); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("chunks of %d: %q, want %q", n, got, want)
		}
	}
	// An element above the limit is skipped whole; the ones after it are still read.
	big := []byte(`[{"big":"` + strings.Repeat("x", 100) + `"},{"small":1}]`)
	for n := 1; n <= len(big); n += 7 {
		if got := elements(big, n, 50); len(got) != 1 || got[0] != `{"small":1}` {
			t.Fatalf("chunks of %d: %q, want only the small element", n, got)
		}
	}
	// Memory stays within the limit however the element is cut.
	var a arrayFrames
	a.write([]byte("["), 64, func([]byte) {})
	for range 100 {
		a.write([]byte(`{"k":"`+strings.Repeat("y", 30)+`",`), 64, func([]byte) { t.Fatal("an unfinished element emitted") })
		if len(a.buf) > 64 {
			t.Fatalf("kept %d bytes over the limit", len(a.buf))
		}
	}
}

// A streamed Gemini reply without alt=sse is one JSON array; its last chunk's usage wins.
func TestParserReadsJSONArray(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../provider/gemini/testdata/usage/stream.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3, 64, len(src)} {
		p := &parser{dialect: gemini.Dialect{}, limit: 1 << 10}
		for b := src; len(b) > 0; b = b[min(n, len(b)):] {
			p.write(b[:min(n, len(b))])
		}
		u, ok := p.end()
		if want := (provider.Usage{Input: 42, Output: 7, Total: 49}); !ok || u != want {
			t.Errorf("chunks of %d: %+v %v, want %+v", n, u, ok, want)
		}
	}
	// Gemini's server-sent events carry usageMetadata, which the data-line filter lets through.
	p := &parser{dialect: gemini.Dialect{}, limit: 1 << 10, sse: true}
	sse, err := os.ReadFile("../provider/gemini/testdata/usage/stream.sse")
	if err != nil {
		t.Fatal(err)
	}
	p.write(sse)
	if u, ok := p.end(); !ok || u.Output != 10 {
		t.Errorf("SSE usage %+v %v", u, ok)
	}
}

func FuzzArrayFrames(f *testing.F) {
	f.Add([]byte(`[{"usageMetadata":{"promptTokenCount":3}},{"a":"]"}]`), uint8(3))
	f.Add([]byte(`[[[[[[{"\\"}]]]]]]]]]]`), uint8(1))
	f.Fuzz(func(t *testing.T, src []byte, n uint8) {
		size := int(n%32) + 1
		const limit = 256
		deadline := time.Now().Add(time.Second)
		var a arrayFrames
		for b := src; len(b) > 0; b = b[min(size, len(b)):] {
			a.write(b[:min(size, len(b))], limit, func(e []byte) {
				if len(e) > limit {
					t.Fatalf("emitted %d bytes over the limit", len(e))
				}
				if e[0] != '{' && e[0] != '[' {
					t.Fatalf("emitted %q: not an object or array", e)
				}
				if json.Valid(src) && !json.Valid(e) {
					t.Fatalf("an element %q of valid JSON is not valid", e)
				}
			})
			if len(a.buf) > limit {
				t.Fatalf("kept %d bytes", len(a.buf))
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("too slow")
		}
	})
}
