package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// SIGTERM: health turns NOT_SERVING at once (gRPC health and /readyz), a check in flight still
// gets its answer, and the process exits 0 within a bound.
func TestSIGTERMTurnsNotServingThenExits(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "limits.yaml", `
rules:
  - name: slow
    requests: {limit: 1, period: second}
    max_wait: 2s
`)
	// A hold of about 1s needs an attempt longer than the default 1s -check-timeout.
	p := startProc(t, "-config", cfg, "-check-timeout", "3s")
	conn := p.dial(t)
	client := authv3.NewAuthorizationClient(conn)
	req := chatRequest("gpt-4o", 10, nil)
	if _, err := client.Check(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	wctx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	watch, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{Service: authv3.Authorization_ServiceDesc.ServiceName})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := watch.Recv(); err != nil || st.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v %v", st, err)
	}
	held := make(chan error, 1)
	go func() { // held about 1s for the bucket
		resp, err := client.Check(context.Background(), req)
		if err == nil && resp.GetStatus().GetCode() != 0 {
			t.Errorf("held check denied: %v", resp)
		}
		held <- err
	}()
	time.Sleep(200 * time.Millisecond)
	term := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := watch.Recv()
	if err != nil || st.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after SIGTERM, watch: %v %v", st, err)
	}
	notServing := time.Since(term)
	if resp, err := http.Get("http://" + p.adminAddr + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/readyz while draining: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	stopWatch() // a health watch is an RPC in flight too: the drain would wait for it
	if err := <-held; err != nil {
		t.Errorf("held check during the drain: %v", err)
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("no exit within 5s of SIGTERM")
	}
	t.Logf("NOT_SERVING %v after SIGTERM, exit %v after SIGTERM (a check held ~1s in flight)",
		notServing.Round(time.Millisecond), time.Since(term).Round(time.Millisecond))
	if notServing > 500*time.Millisecond {
		t.Errorf("NOT_SERVING took %v", notServing)
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d", code)
	}
}
