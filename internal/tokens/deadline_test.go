package tokens

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
)

// boundCases are requests of every API and the hostile shapes that cost Estimate the most per
// byte: random text that misses every cache, CJK, invalid UTF-8, runs that cannot be cut.
func boundCases(tb testing.TB) []*Input {
	r := rand.New(rand.NewPCG(1, 2))
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	var random strings.Builder
	for random.Len() < 256<<10 {
		random.WriteByte(b64[r.IntN(len(b64))])
	}
	cjk := strings.Repeat("漢字仮名交じり文", 4096)
	return []*Input{
		post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello there"}],"max_tokens":7,"n":3}`),
		post("/v1/chat/completions", chatBody(tb, []byte(random.String()))),
		post("/v1/chat/completions", chatBody(tb, []byte(cjk))),
		post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"\u00e9\ud800 \\n\\t"}]}`),
		post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]}`),
		post("/v1/completions", `{"model":"gpt-3.5-turbo-instruct","prompt":["a b c","d"],"max_tokens":9,"best_of":2}`),
		post("/v1/embeddings", `{"model":"text-embedding-3-small","input":["one","two",[1,2,3]]}`),
		post("/v1/responses", `{"model":"gpt-4o","instructions":"be brief","input":[{"role":"user","content":"hi"}],"max_output_tokens":50}`),
		post("/v1/messages", `{"model":"claude-sonnet-4-5","system":"s","messages":[{"role":"user","content":[{"type":"text","text":"`+cjk[:3000]+`"}]}],"max_tokens":300}`),
		post("/v1/messages", `{"model":"claude-opus-4-7","messages":[{"role":"user","content":"abababababab"}],"max_tokens":1}`),
		post("/openai/deployments/d/chat/completions?api-version=1", `{"messages":[{"role":"user","content":"x"}]}`),
		post("/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"`+strings.Repeat("ab", 200<<10)+`"}]}`),
		post("/v1/chat/completions", "not json at all \xff\xfe"),
		post("/v1/chat/completions", strings.Repeat("[", 500)),
		post("/v1/unknown", `{"model":"gpt-4o","x":"y"}`),
		{Path: "/v1/chat/completions", Body: []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"partial`), ContentLength: 4096, Partial: true},
		{Path: "/v1/chat/completions", Body: gzipped(`{"model":"gpt-4o","messages":[{"role":"user","content":"zipped"}],"max_tokens":3}`), ContentEncoding: "gzip", ContentLength: -1},
		{Path: "/v1/chat/completions", Body: []byte("\x1f\x8b garbage"), ContentEncoding: "br", ContentLength: -1},
	}
}

// TestBound: Bound is never below Estimate, reserves the same output, names the same provider,
// API and model, and is marked ReasonDeadline.
func TestBound(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{OpenAI: openai.Settings{AzureDeployments: map[string]string{"d": "gpt-4o"}}})
	for i, in := range boundCases(t) {
		est, b := p.Estimate(in), p.Bound(in)
		if b.PromptTokens < est.PromptTokens || b.Cost() < est.Cost() {
			t.Errorf("case %d (%s): bound %+v below estimate %+v", i, in.Path, b, est)
		}
		if b.OutputTokens != est.OutputTokens || b.Provider != est.Provider || b.API != est.API || b.Model != est.Model {
			t.Errorf("case %d (%s): bound %+v, estimate %+v", i, in.Path, b, est)
		}
		// A body Estimate itself prices at its upper bound (unreadable, partial, undecodable)
		// keeps that reason: it was never counted.
		if b.Exact || (b.Reason != ReasonDeadline && b.Reason != est.Reason) {
			t.Errorf("case %d: bound is exact=%v reason %q (estimate %q)", i, b.Exact, b.Reason, est.Reason)
		}
	}
}

// TestBoundIsCheap: Bound costs a parse, not a tokenization: on a 1 MiB body of random text
// (the kind Estimate is slowest on) it is far faster than Estimate, measured on the same body.
func TestBoundIsCheap(t *testing.T) {
	t.Parallel()
	p := newPricer(t, Options{})
	r := rand.New(rand.NewPCG(3, 4))
	const b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	text := make([]byte, 1<<20)
	for i := range text {
		text[i] = b64[r.IntN(len(b64))]
	}
	in := post("/v1/chat/completions", chatBody(t, text))
	t0 := time.Now()
	b := p.Bound(in)
	db := time.Since(t0)
	t0 = time.Now()
	est := p.Estimate(in)
	de := time.Since(t0)
	t.Logf("1 MiB of random text: Bound %v (%d tokens), Estimate %v (%d tokens)", db, b.PromptTokens, de, est.PromptTokens)
	if db*10 > de {
		t.Errorf("Bound took %v, Estimate %v: not an order of magnitude cheaper", db, de)
	}
}

// FuzzBound: on any input Bound never panics and is never below Estimate.
func FuzzBound(f *testing.F) {
	p := newPricer(f, Options{OpenAI: openai.Settings{AzureDeployments: map[string]string{"d": "gpt-4o"}}, CountCache: -1})
	for _, in := range boundCases(f) {
		if len(in.Body) < 4096 {
			f.Add(in.Path, in.Body, in.ContentEncoding, in.ContentLength, in.Partial)
		}
	}
	f.Fuzz(func(t *testing.T, path string, body []byte, encoding string, length int64, partial bool) {
		in := &Input{Path: path, Body: body, ContentEncoding: encoding, ContentLength: length, Partial: partial}
		est, b := p.Estimate(in), p.Bound(in)
		if b.PromptTokens < est.PromptTokens || b.OutputTokens != est.OutputTokens || b.Reason == ReasonInternal {
			t.Fatalf("bound %+v, estimate %+v", b, est)
		}
	})
}
