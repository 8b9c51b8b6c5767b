package main

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redisstats"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// calls reads INFO commandstats through c: calls per command.
func calls(t *testing.T, c redis.UniversalClient) map[string]int64 {
	t.Helper()
	out, err := redisstats.Calls(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A busy replica sends Redis exactly one command per decision: while decisions reach the store
// the health ping is skipped, and outside failure.mode local there is no replica heartbeat. An
// idle one still pings once a second.
func TestOneRedisCommandPerDecision(t *testing.T) {
	t.Parallel()
	srv := redistest.StartServer(t)
	cfg := writeFile(t, "limits.yaml", `
rules:
  - name: chat
    tokens: {limit: 100000000, period: minute}
`)
	p := startProc(t, "-config", cfg, "-redis-url", srv.URL(), "-redis-timeout", "2s", "-check-timeout", "5s")
	client := authv3.NewAuthorizationClient(p.dial(t))
	check := func() {
		if resp, err := client.Check(context.Background(), chatRequest("gpt-4o", 10, nil)); err != nil || resp.GetStatus().GetCode() != 0 {
			t.Fatalf("check: %v %v", resp, err)
		}
	}
	check()               // loads the library
	stats := srv.Client() // one connection, opened (HELLO) by the first INFO
	before := calls(t, stats)
	decisions := int64(0)
	for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); decisions++ {
		check()
		time.Sleep(20 * time.Millisecond)
	}
	after := calls(t, stats)
	for name, n := range after {
		d := n - before[name]
		switch name {
		case "info", "time", "mget", "set", "del":
		case "fcall":
			if d != decisions {
				t.Errorf("%d decisions sent %d FCALL, want one each and no heartbeat", decisions, d)
			}
		default:
			if d != 0 {
				t.Errorf("%d decisions in 3.5 s also sent %d %s", decisions, d, name)
			}
		}
	}

	idle := calls(t, stats)["ping"]
	time.Sleep(2500 * time.Millisecond)
	if got := calls(t, stats)["ping"] - idle; got < 1 {
		t.Errorf("idle for 2.5 s: %d pings, want the health ping back", got)
	}
}
