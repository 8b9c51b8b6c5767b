package redisstats

import (
	"context"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// TestCallsAndCPU reads a real server's figures: three PINGs are three more pings, and the
// server's CPU time never goes back.
func TestCallsAndCPU(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartServer(t).Client()
	before, err := Calls(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	cpu0, err := CPU(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := c.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	after, err := Calls(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if got := after["ping"] - before["ping"]; got != 3 {
		t.Errorf("3 PINGs counted as %d", got)
	}
	if after["info"] < 2 {
		t.Errorf("info calls %d, want the two INFO commandstats at least", after["info"])
	}
	cpu1, err := CPU(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if cpu0 < 0 || cpu1 < cpu0 {
		t.Errorf("CPU %v then %v: want it never to decrease", cpu0, cpu1)
	}
}
