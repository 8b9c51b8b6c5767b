package filter

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostileCase is one kind of hostile or broken input, with the documented decision
// (docs/operations.md, "Hostile input"). Every case must be answered without a panic, well within
// the time bound and with bounded memory.
type hostileCase struct {
	name string
	req  func() *authv3.CheckRequest
	// decision is the expected answer's decision; cost, when >= 0, the expected price.
	decision string
	cost     float64
	// reason is the expected estimate_reason ("" for an exact count).
	reason string
	// seed adds the case to FuzzCheck's committed corpus (too-large inputs are left out).
	seed bool
}

func hostileRequest(path string, body []byte, headers map[string]string) *authv3.CheckRequest {
	h := map[string]string{":path": path, ":method": "POST", ":authority": "api.openai.com", "content-type": "application/json"}
	for k, v := range headers {
		h[k] = v
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: path, Headers: h, RawBody: body},
	}}}
}

func chat(body string, headers map[string]string) func() *authv3.CheckRequest {
	return func() *authv3.CheckRequest { return hostileRequest("/v1/chat/completions", []byte(body), headers) }
}

func withLength(n int) map[string]string { return map[string]string{"content-length": strconv.Itoa(n)} }

// utf16Body is s in UTF-16LE with a byte order mark.
func utf16Body(s string) []byte {
	b := []byte{0xFF, 0xFE}
	for _, u := range utf16.Encode([]rune(s)) {
		b = append(b, byte(u), byte(u>>8))
	}
	return b
}

func gzipOf(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	w.Write(b) //nolint:errcheck // bytes.Buffer
	w.Close()
	return buf.Bytes()
}

// gzipBomb is 64 MiB of JSON in about 64 KiB of gzip, built once.
var gzipBomb = sync.OnceValue(func() []byte {
	return gzipOf(append(append([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"`), bytes.Repeat([]byte("A"), 64<<20)...), `"}]}`...))
})

func hostileCases() []hostileCase {
	const ok = `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":%s}`
	mib := strings.Repeat("a", 1<<20)
	nested := strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000)
	manyHeaders := map[string]string{}
	for i := range 10_000 {
		manyHeaders[fmt.Sprintf("x-h-%d", i)] = "v"
	}
	return []hostileCase{
		// Broken JSON is priced at the upper bound (a token per byte, the model's maximum
		// output: more than this bucket holds) and counted: a client cannot escape its limit by
		// sending garbage.
		{name: "malformed-json", req: chat(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hel`, nil),
			decision: decisionTooLarge, reason: "not_json", cost: -1, seed: true},
		{name: "wrong-types", req: chat(`{"model":5,"messages":"hello","max_tokens":"many","n":[1]}`, nil),
			decision: decisionAllowed, reason: "wrong_type", cost: -1, seed: true},
		// 1 MiB of prompt costs more than the 1000-token bucket can ever hold: 413. One letter
		// repeated is counted exactly (its periodic rule); an uncuttable run of two letters
		// past 256 KiB is counted in chunks.
		{name: "one-mib-string", req: chat(`{"model":"gpt-4o","messages":[{"role":"user","content":"`+mib+`"}]}`, withLength(len(mib)+54)),
			decision: decisionTooLarge, reason: "", cost: -1},
		{name: "one-mib-two-letters", req: chat(`{"model":"gpt-4o","messages":[{"role":"user","content":"`+strings.Repeat("ab", 1<<19)+`"}]}`, withLength(len(mib)+54)),
			decision: decisionTooLarge, reason: "long_run", cost: -1},
		// Deeper than the pricer's nesting cap (10,000, above Python's) is not JSON to it:
		// priced at the upper bound, here too large for the bucket.
		{name: "nested-100k", req: chat(`{"model":"gpt-4o","messages":[{"role":"user","content":`+nested+`}]}`, nil),
			decision: decisionTooLarge, reason: "not_json", cost: -1},
		{name: "invalid-utf8", req: chat("{\"model\":\"gpt-4o\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\xc3\"}],\"max_tokens\":5}", nil),
			decision: decisionAllowed, reason: "invalid_utf8", cost: -1, seed: true},
		// 64 MiB behind 64 KiB of gzip: decoding stops at the pricer's 4 MiB cap.
		{name: "gzip-bomb", req: func() *authv3.CheckRequest {
			return hostileRequest("/v1/chat/completions", gzipBomb(), map[string]string{"content-encoding": "gzip"})
		}, decision: decisionTooLarge, reason: "gzip", cost: -1},
		{name: "unknown-encoding", req: chat(fmt.Sprintf(ok, "5"), map[string]string{"content-encoding": "br"}),
			decision: decisionAllowed, reason: "unsupported_encoding", cost: -1, seed: true},
		// n is capped at 128: 128 x 10 output tokens.
		{name: "n-1e9", req: chat(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":5,"n":1e9}`, nil),
			decision: decisionAllowed, cost: 8 + 128*5, seed: true},
		// A negative max_tokens is invalid (the provider rejects it): the default output is reserved.
		{name: "max-tokens-negative", req: chat(fmt.Sprintf(ok, "-5"), nil),
			decision: decisionAllowed, reason: "wrong_type", cost: -1, seed: true},
		// An overflowing max_tokens can never fit: 413, never a wrapped-around negative cost.
		{name: "max-tokens-overflow", req: chat(fmt.Sprintf(ok, "99999999999999999999999"), nil),
			decision: decisionTooLarge, cost: -1, seed: true},
		{name: "max-tokens-1e30", req: chat(fmt.Sprintf(ok, "1e30"), nil),
			decision: decisionTooLarge, cost: -1, seed: true},
		// The body is read whatever the content type says: a client cannot dodge pricing by
		// mislabelling it.
		{name: "unknown-content-type", req: chat(fmt.Sprintf(ok, "5"), map[string]string{"content-type": "application/x-evil"}),
			decision: decisionAllowed, cost: 13, seed: true},
		{name: "many-headers", req: chat(fmt.Sprintf(ok, "5"), manyHeaders),
			decision: decisionAllowed, cost: 13},
		// Tenants are opaque bytes: escaped or hashed into bucket keys, sanitized in logs.
		{name: "tenant-control-chars", req: chat(fmt.Sprintf(ok, "5"), map[string]string{"x-tenant-id": "team-\r\n\x00\x1b[31m"}),
			decision: decisionAllowed, cost: 13, seed: true},
		{name: "tenant-braces", req: chat(fmt.Sprintf(ok, "5"), map[string]string{"x-tenant-id": "team-{x}}{"}),
			decision: decisionAllowed, cost: 13, seed: true},
		{name: "tenant-megabytes", req: chat(fmt.Sprintf(ok, "5"), map[string]string{"x-tenant-id": "team-" + mib}),
			decision: decisionAllowed, cost: 13},
		{name: "empty-body", req: chat("", nil), decision: decisionTooLarge, reason: "not_json", cost: -1, seed: true},
		// What the providers' parsers accept is read, its max_tokens reserved (8 + 900).
		{name: "utf8-bom", req: chat("\xEF\xBB\xBF"+fmt.Sprintf(ok, "900"), nil), decision: decisionAllowed, cost: 908},
		{name: "utf16-nan", req: chat(string(utf16Body(strings.Replace(fmt.Sprintf(ok, "900"), `"max_tokens"`, `"temperature":NaN,"max_tokens"`, 1))), nil),
			decision: decisionAllowed, cost: 908},
		// A body of exactly Envoy's max_request_bytes without content-length may be cut: priced
		// at the upper bound (the context window), never from its prefix.
		{name: "one-mib-no-length", req: chat(`{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"`+mib, nil),
			decision: decisionTooLarge, reason: "partial_body", cost: -1},
		// Context the body does not show is reserved at the context window.
		{name: "previous-response", req: func() *authv3.CheckRequest {
			return hostileRequest("/v1/responses", []byte(`{"model":"gpt-4o","previous_response_id":"resp_1","input":"Hi","max_output_tokens":5}`), nil)
		}, decision: decisionTooLarge, reason: "previous_response", cost: -1},
	}
}

// Every hostile case gets its documented decision, quickly and with bounded memory.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	for _, hc := range hostileCases() {
		t.Run(hc.name, func(t *testing.T) {
			// The pricer's own rule for each case, counted exactly however long it takes (under
			// the race detector too): the deadline's upper bound is TestPricingBounded's.
			e := newEnv(t, "", Options{PricingSlots: -1})
			req := hc.req()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			resp := e.answer(t, context.Background(), req).Response()
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if got := decision(resp); got != hc.decision {
				t.Errorf("decision %q, want %q (%v)", got, hc.decision, resp.GetDynamicMetadata())
			}
			md := resp.GetDynamicMetadata().GetFields()
			if got := md["estimate_reason"].GetStringValue(); got != hc.reason {
				t.Errorf("estimate_reason %q, want %q", got, hc.reason)
			}
			cost := md["cost"].GetNumberValue()
			if cost < 0 || (hc.cost >= 0 && cost != hc.cost) {
				t.Errorf("cost %v, want %v", cost, hc.cost)
			}
			// Generous for two shared cores; the unbounded versions take minutes or gigabytes.
			// The race detector slows the tokenizer about 50 times.
			bound := 10 * time.Second
			if raceEnabled {
				bound = 90 * time.Second
			}
			if took > bound {
				t.Errorf("took %v", took)
			}
			// TotalAlloc includes what was allocated concurrently by parallel tests: a loose bound.
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
				t.Errorf("allocated %d MiB", alloc>>20)
			}
		})
	}
}

// A request without HTTP attributes is the only RPC error: Envoy's status_on_error applies.
func TestHostileNotHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	for _, req := range []*authv3.CheckRequest{nil, {}, {Attributes: &authv3.AttributeContext{}}} {
		_, err := e.f.Check(context.Background(), req)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("Check(%v) error %v, want InvalidArgument", req, err)
		}
	}
}
