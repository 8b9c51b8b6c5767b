package main

import (
	"context"
	"encoding/hex"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// collector is an OTLP/gRPC trace collector that keeps the span names it receives, by trace id.
type collector struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string][]string
}

func (c *collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				id := hex.EncodeToString(s.GetTraceId())
				c.spans[id] = append(c.spans[id], s.GetName())
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serve -otlp-endpoint exports a decision's spans, in the caller's trace, to the collector; the
// last ones at shutdown.
func TestServeExportsSpansOverOTLP(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	col := &collector{spans: map[string][]string{}}
	g := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(g, col)
	go g.Serve(lis) //nolint:errcheck // stopped below
	defer g.Stop()

	p := startProc(t, "-otlp-endpoint", "http://"+lis.Addr().String())
	client := authv3.NewAuthorizationClient(p.dial(t))
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	if _, err := client.Check(context.Background(), chatRequest("gpt-4o", 50, map[string]string{
		"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01"})); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		t.Fatal("no exit within 15s of SIGTERM")
	}
	col.mu.Lock()
	defer col.mu.Unlock()
	got := map[string]bool{}
	for _, n := range col.spans[traceID] {
		got[n] = true
	}
	for _, want := range []string{"llm_ratelimit.check", "llm_ratelimit.pricing", "llm_ratelimit.store.take"} {
		if !got[want] {
			t.Errorf("collector has %v in the caller's trace, want %s\n%s", col.spans, want, p.logs.String())
		}
	}
}
