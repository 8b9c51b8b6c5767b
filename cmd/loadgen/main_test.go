package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// TestSmoke runs the tool briefly, in process, against the in-memory store and against a real
// redis-server, and checks that every run answered and that the figures were printed. It makes
// no claim on speed: the figures of a loaded test machine mean nothing.
func TestSmoke(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	for _, tc := range []struct {
		name string
		args []string
		runs []string
	}{
		{"memory", []string{"-store", "memory", "-floors", "noop"}, []string{"noop floor", "ext-authz"}},
		{"redis", []string{"-redis-url", srv.URL(), "-body", "1k,8k"}, []string{"noop floor", "evalsha floor", "ext-authz"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			// Deadlines far above any latency: errors here are failures, not a slow machine.
			args := append([]string{"-c", "4", "-d", "700ms", "-warmup", "100ms", "-distinct", "64", "-deny", "0.2", "-timeout", "20s", "-redis-timeout", "5s"}, tc.args...)
			if err := run(context.Background(), args, &out, &errOut); err != nil {
				t.Fatalf("loadgen %v: %v\n%s", args, err, errOut.String())
			}
			table, js, ok := strings.Cut(out.String(), "\n{")
			if !ok {
				t.Fatalf("no JSON after the table:\n%s", out.String())
			}
			var rep report
			if err := json.Unmarshal([]byte("{"+js), &rep); err != nil {
				t.Fatalf("JSON: %v\n%s", err, js)
			}
			if len(rep.Runs) != len(tc.runs) {
				t.Fatalf("%d runs, want %v:\n%s", len(rep.Runs), tc.runs, table)
			}
			for i, r := range rep.Runs {
				if r.Name != tc.runs[i] || r.Requests == 0 || r.Errors != 0 || r.P50 <= 0 || r.P99 < r.P50 || r.Max < r.P99 {
					t.Errorf("run %d: %+v, want %q with answers and ordered percentiles, no errors", i, r, tc.runs[i])
				}
				if !strings.Contains(table, r.Name) {
					t.Errorf("table without %q:\n%s", r.Name, table)
				}
			}
			ours := rep.Runs[len(rep.Runs)-1]
			if ours.Denied == 0 || ours.Allowed == 0 {
				t.Errorf("service run: %d allowed, %d denied; want both with -deny 0.2", ours.Allowed, ours.Denied)
			}
			if _, ok := rep.Ratios["throughput_vs_noop"]; !ok {
				t.Errorf("no ratio to the noop floor: %v", rep.Ratios)
			}
			if tc.name == "redis" {
				if rep.Redis == nil || rep.Redis.Sent["fcall"] == 0 {
					t.Fatalf("no FCALL counted: %+v", rep.Redis)
				}
				if _, ok := rep.Ratios["throughput_vs_evalsha"]; !ok {
					t.Errorf("no ratio to the evalsha floor: %v", rep.Ratios)
				}
			}
		})
	}
}

// TestRequests checks the generated requests: sizes near the target, the deny share, valid JSON.
func TestRequests(t *testing.T) {
	t.Parallel()
	sizes, err := parseSizes("1k,8k")
	if err != nil {
		t.Fatal(err)
	}
	w := &workload{sizes: sizes, models: []string{"gpt-4o", "claude-sonnet-4-5"}, tenants: 100, deny: 0.25, seed: 1}
	reqs, err := w.requests(400)
	if err != nil {
		t.Fatal(err)
	}
	denied := 0
	for _, r := range reqs {
		if strings.HasPrefix(r.tenant, "deny-") {
			denied++
		}
	}
	if denied < 60 || denied > 140 {
		t.Errorf("%d of 400 requests from deny tenants, want about 100", denied)
	}
	for _, size := range sizes {
		body, _ := chatBody(rand.New(rand.NewPCG(1, 1)), "gpt-4o", size, -1)
		if len(body) < size || len(body) > size+32 || !json.Valid(body) {
			t.Errorf("body for %d bytes: %d bytes, valid JSON %v", size, len(body), json.Valid(body))
		}
	}
	// Conversation turns: the same history on every turn of a conversation, a new last message.
	for _, model := range []string{"gpt-4o", "claude-sonnet-4-5"} {
		rng := rand.New(rand.NewPCG(1, 1))
		a, _ := chatBody(rng, model, 8192, 3)
		b, _ := chatBody(rng, model, 8192, 3)
		var va, vb struct {
			System   string `json:"system"`
			Messages []msg  `json:"messages"`
		}
		if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
			t.Fatalf("%s: invalid JSON", model)
		}
		n := len(va.Messages)
		if len(a) < 7000 || len(a) > 9500 || n < 4 || n != len(vb.Messages) || va.System != vb.System {
			t.Fatalf("%s: %d bytes, %d and %d messages", model, len(a), n, len(vb.Messages))
		}
		for i := 0; i < n-1; i++ {
			if va.Messages[i] != vb.Messages[i] {
				t.Fatalf("%s: message %d differs between turns", model, i)
			}
		}
		if last := va.Messages[n-1]; last.Role != "user" || last == vb.Messages[n-1] || len(last.Content) < 200 || len(last.Content) > 700 {
			t.Fatalf("%s: last messages %+v and %+v", model, last, vb.Messages[n-1])
		}
	}
	if _, err := parseSizes("0k"); err == nil {
		t.Error("parseSizes(0k): no error")
	}
}

// TestOutcome checks the tool's partial reading of answers against real ones.
func TestOutcome(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		resp               *authv3.CheckResponse
		status, httpStatus int64
	}{
		{okResponse, 0, 0},
		{&authv3.CheckResponse{Status: &rpcstatus.Status{Code: 8}, HttpResponse: &authv3.CheckResponse_DeniedResponse{
			DeniedResponse: &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{Code: 429}, Body: "{}"}}}, 8, 429},
		{&authv3.CheckResponse{Status: &rpcstatus.Status{Code: 14}, HttpResponse: &authv3.CheckResponse_DeniedResponse{
			DeniedResponse: &authv3.DeniedHttpResponse{Status: &typev3.HttpStatus{Code: 503}}}}, 14, 503},
	} {
		b, err := proto.Marshal(tc.resp)
		if err != nil {
			t.Fatal(err)
		}
		var o outcome
		if err := (rawCodec{}).Unmarshal(b, &o); err != nil || o.status != tc.status || o.httpStatus != tc.httpStatus {
			t.Errorf("%v: %+v, %v; want %d %d", tc.resp, o, err, tc.status, tc.httpStatus)
		}
	}
	if err := (&outcome{}).parse([]byte{0x0a, 0x05}); err == nil {
		t.Error("truncated answer: no error")
	}
}
