package replay

import (
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
)

// Lines out of time order within the window (a held decision is written when its hold ends) are
// replayed in time order, recorded order breaking ties; beyond the window, in recorded order.
func TestReplayOrdersWithinWindow(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte("rules: [{name: all, tokens: {limit: 1000000, period: minute}}]"), "all.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	e, err := New(Options{Config: c, Window: 2 * time.Second, Each: func(rec, _ *decisionlog.Decision) { got = append(got, rec.Tenant) }})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	for _, x := range []struct {
		ms     int
		tenant string
	}{{0, "a"}, {1500, "d"}, {500, "b"}, {500, "c"}, {9000, "f"}, {6000, "e"}, {3000, "late"}} {
		ev := decisionlog.Event{Decision: decisionlog.Decision{Time: t0.Add(time.Duration(x.ms) * time.Millisecond), Provider: "openai",
			API: "chat_completions", Model: "gpt-4o", Tenant: x.tenant, Prompt: 10, Output: 10, Decision: "allowed", Outcome: "allowed"}}
		e.Add(&ev)
	}
	e.Finish()
	// b and c (0.5 s) are moved before d (1.5 s), in their recorded order. Once 9 s was seen,
	// everything before 7 s is replayed at once: e (6 s) on arrival, then "late" (3 s), which is
	// beyond the window, in recorded order; f last.
	want := []string{"a", "b", "c", "d", "e", "late", "f"}
	if len(got) != len(want) {
		t.Fatalf("replayed %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("replayed %v, want %v", got, want)
		}
	}
}
