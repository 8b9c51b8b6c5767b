package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestServeRejectsUnhonourableMaxWait: a limits file whose max_wait cannot end within
// -check-timeout (Envoy's per-try timeout) less the store's timeout and the margin fails
// start-up, naming the rule's key; the same file starts with an attempt long enough.
func TestServeRejectsUnhonourableMaxWait(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "limits.yaml", `
rules:
  - name: held
    requests: {limit: 1, period: second}
    max_wait: 600ms
`)
	args := func(checkTimeout string) []string {
		return []string{"serve", "-config", cfg, "-grpc-addr", "127.0.0.1:0", "-admin-addr", "", "-check-timeout", checkTimeout}
	}
	var out, errb bytes.Buffer
	err := run(context.Background(), args("400ms"), nil, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), "rules[0].max_wait: 600ms cannot be honoured") {
		t.Fatalf("-check-timeout 400ms: err = %v", err)
	}
	// 1s - 2 x 50ms (the store) - 25ms (the margin) = 875ms >= 600ms: it serves.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := run(ctx, args("1s"), nil, &out, &errb); err != nil {
		t.Fatalf("-check-timeout 1s: %v\n%s", err, errb.String())
	}
}
