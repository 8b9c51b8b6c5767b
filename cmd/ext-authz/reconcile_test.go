package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// The served process wires the ext_proc response path on the gRPC port, next to Check and on the
// same store: a ProcessingRequest stream carrying the reservation of an admitted Check (in
// metadata_context, as Envoy forwards it) refunds the unused tokens and releases the in-flight
// lease, so that a Check refused before the response passes after it. Run against the in-memory
// store and a real Redis, in both of Envoy's ext_proc modes.
func TestResponsePathRefundsOnTheStore(t *testing.T) {
	t.Parallel()
	// One request of ~1,010 tokens fits in 1,500; a second fits only once the first has given
	// back what it did not use (refill: 1,500 per hour, under one token in a test's time), and
	// the lease of max_concurrent: 1 stops it as well until the response ends.
	cfg := writeFile(t, "limits.yaml", `
rules:
  - name: chat
    match: {provider: openai}
    per: [model]
    tokens: {limit: 1500, period: hour}
    max_concurrent: 1
    lease_ttl: 1h
    refund: true
`)
	redis := redistest.StartServer(t)
	for _, tc := range []struct {
		name          string
		args          []string
		observability bool
	}{
		{"memory/observability", nil, true},
		{"memory/answered", nil, false},
		{"redis/observability", []string{"-redis-url", redis.URL(), "-redis-prefix", "extproc-obs:"}, true},
		{"redis/answered", []string{"-redis-url", redis.URL(), "-redis-prefix", "extproc-ans:"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startProc(t, append([]string{"-config", cfg, "-redis-timeout", "2s", "-check-timeout", "5s"}, tc.args...)...)
			conn := p.dial(t)
			authz := authv3.NewAuthorizationClient(conn)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()

			check := func() *authv3.CheckResponse {
				t.Helper()
				resp, err := authz.Check(ctx, chatRequest("gpt-4o", 1000, nil))
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return resp
			}
			first := check()
			if c := first.GetStatus().GetCode(); c != int32(codes.OK) {
				t.Fatalf("first Check: code %d, want OK: %v", c, first)
			}
			res := first.GetDynamicMetadata().GetFields()[reservation.MetadataKey].GetStringValue()
			if r, err := reservation.Decode(res); err != nil || r.Lease == "" {
				t.Fatalf("first Check: reservation %q (%v): want one with a lease", res, err)
			}
			if c := check().GetStatus().GetCode(); c == int32(codes.OK) {
				t.Fatal("second Check admitted while the first holds its reservation and the only lease")
			}

			// The response path, as Envoy's ext_proc filter sends it: headers, then the body with
			// the provider's usage (15 tokens of the ~1,010 reserved).
			md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				reservation.MetadataNamespace: first.GetDynamicMetadata()}}
			stream, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
			if err != nil {
				t.Fatalf("Process: %v", err)
			}
			msgs := []*extprocv3.ProcessingRequest{
				{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
					Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
						{Key: ":status", RawValue: []byte("200")},
						{Key: "content-type", RawValue: []byte("application/json")},
					}}}}},
				{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
					Body:        []byte(`{"id":"x","object":"chat.completion","usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`),
					EndOfStream: true}}},
			}
			for _, m := range msgs {
				m.MetadataContext, m.ObservabilityMode = md, tc.observability
				if err := stream.Send(m); err != nil {
					t.Fatalf("Send: %v", err)
				}
				if !tc.observability {
					// Outside observability mode Envoy waits for an answer to each message.
					if _, err := stream.Recv(); err != nil {
						t.Fatalf("Recv: %v", err)
					}
				}
			}
			if err := stream.CloseSend(); err != nil {
				t.Fatal(err)
			}
			// The server settles before it ends the stream: the next Check sees the refund.
			if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
				t.Fatalf("stream end: %v, want EOF (observability mode is never answered)", err)
			}

			// Refunded and released: the same request fits again (1,500 - 15 >= ~1,010).
			if c := check(); c.GetStatus().GetCode() != int32(codes.OK) {
				t.Fatalf("Check after the response: code %d (limit %q), want OK (refund and lease release)",
					c.GetStatus().GetCode(), c.GetDynamicMetadata().GetFields()["limit"].GetStringValue())
			}
			metrics := metricLines(t, ctx, p)
			for _, want := range []string{
				`llm_ratelimit_reconciled_responses_total{provider="openai",result="usage"} 1`,
				`llm_ratelimit_leases_released_total{result="ok"} 1`,
			} {
				if !slices.Contains(metrics, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}

// metricLines returns the sample lines of the process's /metrics.
func metricLines(t *testing.T, ctx context.Context, p *proc) []string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.adminAddr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(b), "\n")
}
