package main

import (
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// localOutage is how long Redis stays down in TestLocalFallbackOvershoot.
const localOutage = 30 * time.Second

// Three replicas in failure.mode local, which discover one another through Redis (failure.replicas
// says 1), lose Redis for 30s under a demand far above the limit. Each enforces a third of the
// limit from memory: the fleet admits about the limit's rate, plus at most one burst (each local
// bucket starts full). The overshoot is measured and reported in docs/operations.md.
func TestLocalFallbackOvershoot(t *testing.T) {
	t.Parallel()
	const (
		rate  = 1000.0 // tokens per second: 60000 per minute
		burst = 6000.0
	)
	redis := redistest.StartServer(t)
	cfg := writeFile(t, "limits.yaml", `
failure: {mode: local, replicas: 1}
rules:
  - name: provider
    tokens: {limit: 60000, period: minute, burst: 6000}
`)
	var replicas []*proc
	var loads []*load
	for range 3 {
		replicas = append(replicas, startProc(t, "-config", cfg, "-redis-url", redis.URL(), "-redis-prefix", "local:",
			"-redis-timeout", faultTimeout.String()))
	}
	for _, p := range replicas {
		waitFor(t, 10*time.Second, "discovery of 3 replicas", func() bool {
			return scrapeMetrics(t, p)["llm_ratelimit_replicas"] == 3
		})
	}
	for _, p := range replicas {
		// ~100 tokens a request, 2 workers a replica: a demand of several times the limit.
		loads = append(loads, startLoadOf(t, p, 2, chatRequest("gpt-4o", 90, nil)))
	}
	time.Sleep(3 * time.Second) // the shared bucket is empty: the fleet runs at the limit
	down := time.Now()
	redis.Kill()
	time.Sleep(localOutage)
	up := time.Now()
	redis.Restart()
	time.Sleep(2 * time.Second)
	var before, during, local, denied float64
	for _, l := range loads {
		l.end()
		for _, s := range l.between(down.Add(-3*time.Second+500*time.Millisecond), down) {
			if s.decision == "allowed" {
				before += s.cost
			}
		}
		for _, s := range l.between(down, up) {
			switch s.decision {
			case "local", "allowed":
				during += s.cost
				if s.decision == "local" {
					local++
				}
			case "denied":
				denied++
			}
		}
	}
	secs := up.Sub(down).Seconds()
	steady := rate * secs
	t.Logf("before the outage (2.5s, shared bucket): %.0f tokens/s for a limit of %.0f/s", before/2.5, rate)
	t.Logf("outage %.1fs, 3 replicas: admitted %.0f tokens (%.0f local decisions, %.0f local denials) for a steady allowance of %.0f: overshoot %+.1f%% (%+.0f tokens; one burst is %.0f)",
		secs, during, local, denied, steady, 100*(during-steady)/steady, during-steady, burst)
	if local == 0 || denied == 0 {
		t.Fatalf("the local fallback did not limit: %v local admissions, %v denials", local, denied)
	}
	// Each replica's local bucket starts full (a third of the burst) and refills at a third of the
	// rate: the fleet admits at most the burst above the steady allowance.
	if during > steady+burst+200 {
		t.Errorf("admitted %.0f tokens in the outage, above rate x time + burst = %.0f", during, steady+burst)
	}
	if during < 0.8*steady {
		t.Errorf("admitted %.0f tokens in the outage, below 80%% of the steady allowance %.0f", during, steady)
	}
}
