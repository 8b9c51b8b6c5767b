package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// No prompt, API key or tenant ever reaches a log line (at debug, every line) or the metrics
// page: requests carry marker strings in the prompt, the authorization and x-api-key headers
// and the tenant header, through allowed, denied, too-large, malformed and store-failure paths.
func TestNoSecretsInLogsOrMetrics(t *testing.T) {
	t.Parallel()
	const marker = "Zq7MARKERx"
	redis := redistest.StartServer(t)
	// The operator's key, in a key file as a mounted secret: the service hashes it at load and
	// every request's credentials at check time (a provider_feedback rule), and keeps neither.
	keyFile := writeFile(t, "openai-key", "sk-"+marker+"-key\n")
	cfg := writeFile(t, "limits.yaml", `
tenant: {source: header, header: x-tenant-id}
failure: {mode: local, replicas: 2}
credentials: {files: [`+keyFile+`]}
rules:
  - name: tenants
    per: [tenant, model]
    tokens: {limit: 300, period: minute}
    provider_feedback: true
`)
	p := startProc(t, "-config", cfg, "-redis-url", redis.URL(), "-redis-prefix", "secrets:", "-log-level", "debug",
		"-redis-timeout", faultTimeout.String())
	client := authv3.NewAuthorizationClient(p.dial(t))
	headers := map[string]string{
		"authorization": "Bearer sk-" + marker + "-key",
		"x-api-key":     "sk-ant-" + marker,
		"api-key":       marker + "-azure",
		"x-tenant-id":   "tenant-" + marker + "\n{}",
	}
	send := func() {
		reqs := []*authv3.CheckRequest{
			hostileRequestOf(`{"model":"gpt-4o","messages":[{"role":"user","content":"say `+marker+` please"}],"max_tokens":50}`, headers),
			hostileRequestOf(`{"model":"gpt-4o","messages":[{"role":"user","content":"`+marker, headers),                            // malformed
			hostileRequestOf(`{"model":"gpt-4o","messages":[{"role":"user","content":"`+marker+`"}],"max_tokens":100000}`, headers), // too large
			hostileRequestOf(`{"model":"gpt-4o","messages":[{"role":"user","content":"\xff`+marker+`"}],"max_tokens":1}`, headers),  // invalid UTF-8
		}
		for range 4 { // the first ones pass, later ones are denied
			for _, req := range reqs {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				if _, err := client.Check(ctx, req); err != nil {
					t.Errorf("Check: %v", err)
				}
				cancel()
			}
		}
	}
	send()
	redis.Kill() // store failures: warnings, the breaker, local decisions
	send()
	time.Sleep(600 * time.Millisecond)
	send()
	redis.Restart()
	time.Sleep(1500 * time.Millisecond)
	send()

	resp, err := http.Get("http://" + p.adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	logs := p.logs.String()
	if !strings.Contains(logs, `"msg":"decision"`) || !strings.Contains(logs, "breaker open") {
		t.Fatalf("the logs lack decisions or the breaker: the test exercised nothing:\n%s", logs)
	}
	for name, text := range map[string]string{"logs": logs, "metrics": string(metrics)} {
		if i := strings.Index(text, marker); i >= 0 {
			t.Errorf("a marker is in the %s: ...%s...", name, text[max(0, i-300):min(len(text), i+100)])
		}
	}
}
