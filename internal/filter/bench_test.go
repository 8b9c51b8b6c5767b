package filter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"

	"github.com/llm-ratelimit/llm-ratelimit/internal/authzwire"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// benchLimits reads the load tool's limits (cmd/loadgen/bench.yaml), so that the benchmarks
// decide what cmd/loadgen decides: 2 buckets per request, per tenant. Tenants t-* have budgets a
// run at the default -benchtime does not spend on the fixed clock; deny-* may send one request
// an hour.
func benchLimits(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("../../cmd/loadgen/bench.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// benchRequest is a CheckRequest as Envoy sends it, with an OpenAI chat body of about size bytes
// of English prose (tiktoken/testdata/english.txt).
func benchRequest(tb testing.TB, size int, tenant string) *authv3.CheckRequest {
	tb.Helper()
	prose, err := os.ReadFile("../tiktoken/testdata/english.txt")
	if err != nil {
		tb.Fatal(err)
	}
	for len(prose) < size {
		prose = append(prose, prose...)
	}
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	build := func(n int) []byte {
		text := prose[:n]
		for !utf8.Valid(text) {
			text = text[:len(text)-1]
		}
		b, _ := json.Marshal(struct {
			Model     string `json:"model"`
			Messages  []msg  `json:"messages"`
			MaxTokens int    `json:"max_tokens"`
		}{"gpt-4o", []msg{{"system", "You are a helpful assistant."}, {"user", string(text)}}, 256})
		return b
	}
	body := build(max(size-len(build(0)), 1))
	hdr := map[string]string{
		":path": "/v1/chat/completions", ":method": "POST", ":authority": "api.openai.com", ":scheme": "http",
		"content-type": "application/json", "content-length": strconv.Itoa(len(body)),
		"accept": "application/json", "user-agent": "OpenAI/Python 1.99.0", "authorization": "Bearer sk-bench",
		"x-request-id": "5f0c4a8e-2b1d-4c3e-9f6a-7d8e9f0a1b2c", "x-forwarded-proto": "http", "x-tenant-id": tenant,
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
		Http: &authv3.AttributeContext_HttpRequest{
			Method: "POST", Path: "/v1/chat/completions", Host: "api.openai.com", Headers: hdr,
			Size: int64(len(body)), RawBody: body, Protocol: "HTTP/1.1",
		}}}}
}

var benchSizes = []int{1 << 10, 8 << 10, 64 << 10}

func sizeName(n int) string { return fmt.Sprintf("%dKB", n>>10) }

// BenchmarkHotPath measures the pieces of one decision, each on its own, on the in-memory store:
// decode (the service's reader of the CheckRequest's encoding; decode-proto is protobuf's full
// decoding, which the no-op floor pays), price (the Estimator), decide (CheckBytes: decode,
// parse, price, plan, take, answer) and encode (Answer.AppendTo; encode-proto is proto.Marshal of
// Answer.Response).
// The Redis round trip is measured by bucket.BenchmarkRedis and the whole path under load by
// cmd/loadgen.
func BenchmarkHotPath(b *testing.B) {
	e := newEnv(b, benchLimits(b), Options{})
	ctx := context.Background()
	for _, size := range benchSizes {
		req := benchRequest(b, size, "t-042")
		wire, err := proto.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("decode/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			p := e.f.Policy()
			for b.Loop() {
				var w authzwire.Request
				if err := decode(p, wire, &w); err != nil || len(w.Body()) == 0 {
					b.Fatal(err)
				}
			}
		})
		b.Run("decode-proto/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for b.Loop() {
				var r authv3.CheckRequest
				if err := proto.Unmarshal(wire, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("price/"+sizeName(size), func(b *testing.B) {
			in := &tokens.Input{Path: "/v1/chat/completions", Body: req.GetAttributes().GetRequest().GetHttp().GetRawBody(),
				ContentType: "application/json", ContentLength: -1}
			est := e.f.Policy().Estimator
			b.SetBytes(int64(len(in.Body)))
			b.ReportAllocs()
			for b.Loop() {
				if est.Estimate(in).PromptTokens <= 0 {
					b.Fatal("no prompt tokens")
				}
			}
		})
		b.Run("decide/"+sizeName(size), func(b *testing.B) {
			b.SetBytes(int64(len(wire)))
			b.ReportAllocs()
			for b.Loop() {
				a, err := e.f.CheckBytes(ctx, wire)
				if err != nil || a.Decision() != decisionAllowed {
					b.Fatalf("Check: %v %v", a, err)
				}
			}
		})
	}
	// A provider the limits file declares: the same decision, its host found in the table.
	declared := newEnv(b, "providers: [{name: mistral, hosts: [api.mistral.ai], dialect: openai, encoding: o200k_base}]\n"+
		benchLimits(b), Options{})
	mistral, err := proto.Marshal(declaredRequest(benchRequest(b, 1<<10, "t-042")))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decide-declared/1KB", func(b *testing.B) {
		b.SetBytes(int64(len(mistral)))
		b.ReportAllocs()
		for b.Loop() {
			a, err := declared.f.CheckBytes(ctx, mistral)
			if err != nil || a.Decision() != decisionAllowed {
				b.Fatalf("Check: %v %v", a, err)
			}
		}
	})
	// A denial (429): what a tenant over its limit costs on every retry.
	denied, err := proto.Marshal(benchRequest(b, 1<<10, "deny-2"))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := e.f.CheckBytes(ctx, denied); err != nil { // spends the hour's one request
		b.Fatal(err)
	}
	b.Run("deny/1KB", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			a, err := e.f.CheckBytes(ctx, denied)
			if err != nil || a.Decision() != decisionDenied {
				b.Fatalf("Check: %v %v", a, err)
			}
		}
	})
	for _, tenant := range []string{"t-042", "deny-1"} {
		name := "encode/allowed"
		if tenant != "t-042" {
			name = "encode/denied"
		}
		a := e.answer(b, ctx, benchRequest(b, 1<<10, tenant))
		if tenant != "t-042" {
			a = e.answer(b, ctx, benchRequest(b, 1<<10, tenant)) // the second one is denied
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := a.AppendTo(nil); !ok {
					b.Fatal("AppendTo declined")
				}
			}
		})
		resp := a.Response()
		b.Run(strings.Replace(name, "encode", "encode-proto", 1), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := proto.Marshal(resp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// declaredRequest is req sent to api.mistral.ai, a host the benchmark's limits file declares.
func declaredRequest(req *authv3.CheckRequest) *authv3.CheckRequest {
	h := req.GetAttributes().GetRequest().GetHttp()
	h.Host, h.Headers[":authority"] = "api.mistral.ai", "api.mistral.ai"
	return req
}

// TestHotPathBenchmarkSmoke runs each hot-path benchmark once, so that `go test` keeps them
// working; it checks results, not speed.
func TestHotPathBenchmarkSmoke(t *testing.T) {
	t.Parallel()
	e := newEnv(t, benchLimits(t), Options{})
	ctx := context.Background()
	for _, size := range benchSizes {
		resp, err := e.f.Check(ctx, benchRequest(t, size, "t-042"))
		if err != nil || decision(resp) != decisionAllowed {
			t.Fatalf("%s: %v %v, want allowed", sizeName(size), decision(resp), err)
		}
	}
	declared := newEnv(t, "providers: [{name: mistral, hosts: [api.mistral.ai], dialect: openai, encoding: o200k_base}]\n"+
		benchLimits(t), Options{})
	if a := declared.answer(t, ctx, declaredRequest(benchRequest(t, 1<<10, "t-042"))); a.Decision() != decisionAllowed ||
		a.Response().GetDynamicMetadata().GetFields()["provider"].GetStringValue() != "mistral" {
		t.Fatalf("declared: %v %v, want allowed for mistral", a.Decision(), a.Response().GetDynamicMetadata())
	}
	e.f.Check(ctx, benchRequest(t, 1<<10, "deny-1")) //nolint:errcheck // spends the budget
	a := e.answer(t, ctx, benchRequest(t, 1<<10, "deny-1"))
	if a.Decision() != decisionDenied {
		t.Fatalf("deny tenant: %v, want denied", a.Decision())
	}
	res := testing.Benchmark(func(b *testing.B) {
		for b.Loop() {
			if _, ok := a.AppendTo(nil); !ok {
				b.Fatal("AppendTo declined")
			}
		}
	})
	if res.N == 0 {
		t.Fatal("encode benchmark did not run")
	}
}

// BenchmarkDecisionLog is a 1 KB decision without and with a decision log (a real
// decisionlog.Log writing to a file): what -decision-log adds to the request path.
func BenchmarkDecisionLog(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		var opts Options
		var log *decisionlog.Log
		if on {
			name = "on"
			var err error
			log, err = decisionlog.Open(decisionlog.Options{Path: filepath.Join(b.TempDir(), "decisions.log"), Buffer: 1 << 16})
			if err != nil {
				b.Fatal(err)
			}
			opts.Recorder = log
		}
		e := newEnv(b, benchLimits(b), opts)
		wire, err := proto.Marshal(benchRequest(b, 1<<10, "t-042"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a, err := e.f.CheckBytes(context.Background(), wire)
				if err != nil || a.Decision() != decisionAllowed {
					b.Fatalf("Check: %v %v", a, err)
				}
			}
		})
		if log != nil {
			if err := log.Close(); err != nil {
				b.Fatal(err)
			}
			// Dropping is the log's answer to a writer that cannot keep up; a tight loop of
			// decisions on the benchmark's cores may outrun it.
			b.Logf("decision log: %d records dropped", log.Dropped())
		}
	}
}
