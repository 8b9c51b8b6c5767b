package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// Three replicas on one real Redis, hammered concurrently over gRPC, never admit more tokens
// than the shared bucket allows, and admit nearly all of it.
func TestReplicasShareOneBudget(t *testing.T) {
	t.Parallel()
	redis := redistest.StartServer(t)
	const (
		capacity = 3000 // tokens; refilled at capacity per second
		runFor   = 3 * time.Second
	)
	cfg := writeFile(t, "limits.yaml", `
rules:
  - name: shared
    tokens: {limit: 3000, period: second}
`)
	var replicas []*proc
	for i := 0; i < 3; i++ {
		replicas = append(replicas, startProc(t, "-config", cfg, "-redis-url", redis.URL(), "-redis-prefix", "replicas:",
			// A generous timeout: this test is about atomicity, not about a loaded machine's latency.
			"-redis-timeout", "2s", "-check-timeout", "5s"))
	}

	var admitted, denied, failed atomic.Int64
	var firstErr atomic.Value
	var cost atomic.Int64
	start := time.Now()
	stop := start.Add(runFor)
	var wg sync.WaitGroup
	for _, p := range replicas {
		client := authv3.NewAuthorizationClient(p.dial(t))
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := chatRequest("gpt-4o", 90, nil)
				for time.Now().Before(stop) {
					resp, err := client.Check(context.Background(), req)
					switch {
					case err != nil:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					case resp.GetStatus().GetCode() == int32(codes.OK):
						admitted.Add(1)
						cost.Store(int64(resp.GetDynamicMetadata().GetFields()["cost"].GetNumberValue()))
					default:
						denied.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	c := cost.Load()
	if c <= 0 {
		t.Fatalf("no request admitted (denied %d, failed %d)", denied.Load(), failed.Load())
	}
	allowance := float64(capacity) + float64(capacity)*elapsed.Seconds()
	got := float64(admitted.Load() * c)
	t.Logf("admitted %d x %d tokens = %.0f of an allowance of %.0f (%.1f%%) in %v; denied %d; failed %d",
		admitted.Load(), c, got, allowance, 100*got/allowance, elapsed.Round(time.Millisecond), denied.Load(), failed.Load())
	if failed.Load() > 0 {
		t.Errorf("%d checks failed, the first with %v", failed.Load(), firstErr.Load())
	}
	if got > allowance {
		t.Errorf("admitted %.0f tokens, above the allowance %.0f", got, allowance)
	}
	// Each request costs ~100 tokens: the last partial request's worth is never admitted.
	if got < 0.9*allowance-float64(c) {
		t.Errorf("admitted %.0f tokens, below 90%% of the allowance %.0f", got, allowance)
	}
	if denied.Load() == 0 {
		t.Error("no request was denied: the demand did not exceed the budget")
	}
}

// SIGTERM turns health NOT_SERVING, lets a held check finish, and exits cleanly.
func TestSIGTERMDrains(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "limits.yaml", `
rules:
  - name: slow
    requests: {limit: 1, period: second}
    max_wait: 2s
`)
	// A hold of about 1s needs an attempt longer than the default 1s -check-timeout.
	p := startProc(t, "-config", cfg, "-check-timeout", "3s")
	client := authv3.NewAuthorizationClient(p.dial(t))
	req := chatRequest("gpt-4o", 10, nil)
	if resp, err := client.Check(context.Background(), req); err != nil || resp.GetStatus().GetCode() != 0 {
		t.Fatalf("first check: %v %v", resp, err)
	}
	// The second check is held ~1s for the bucket; SIGTERM arrives while it is held.
	result := make(chan error, 1)
	go func() {
		resp, err := client.Check(context.Background(), req)
		if err == nil && resp.GetStatus().GetCode() != 0 {
			err = fmt.Errorf("held check denied: %v", resp)
		}
		result <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-result:
		if err != nil {
			t.Errorf("held check during drain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held check did not finish")
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		t.Fatal("process did not exit after SIGTERM")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d", code)
	}
	if !strings.Contains(p.logs.String(), `"msg":"draining"`) || !strings.Contains(p.logs.String(), `"msg":"stopped"`) {
		t.Errorf("logs lack draining/stopped:\n%s", p.logs.String())
	}
}
