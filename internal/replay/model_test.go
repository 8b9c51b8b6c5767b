package replay

import (
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
)

// A request the live limits refused has no recorded usage; the replayed limits admit it, and
// it settles as the recorded requests of its model did, after their latency. Without that, its
// whole reservation would stay and refuse the next request, which the live limits admitted.
func TestRefusedLiveAdmittedReplayedSettlesAsItsModel(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(`
tenant: {source: header, header: x-tenant-id}
rules:
  - name: per-tenant
    per: [tenant]
    tokens: {limit: 850, period: minute}
    refund: true
`), "model.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	decision := func(ms int, outcome, rid string) *decisionlog.Event {
		return &decisionlog.Event{Decision: decisionlog.Decision{Time: t0.Add(time.Duration(ms) * time.Millisecond),
			Provider: "openai", API: "chat_completions", Model: "gpt-4o-mini", Path: "/v1/chat/completions",
			Tenant: "team-a", Priority: "interactive", Prompt: 16, Output: 400, Exact: true,
			Outcome: outcome, Decision: outcome, ReservationID: rid}}
	}
	settlement := func(ms int, rid string) *decisionlog.Event {
		return &decisionlog.Event{IsSettlement: true, Settlement: decisionlog.Settlement{
			Time: t0.Add(time.Duration(ms) * time.Millisecond), ReservationID: rid, Provider: "openai", Model: "gpt-4o-mini",
			Status: 200, Found: true, Input: 16, Output: 30, Total: 46}}
	}
	var replayed []string
	e, err := New(Options{Config: c, Each: func(_, got *decisionlog.Decision) { replayed = append(replayed, got.Outcome) }})
	if err != nil {
		t.Fatal(err)
	}
	// 850 - 416 = 434; settled to 46: 804. The second, refused live, is admitted (388 left) and
	// modelled back to 46 after 20 ms: 758, so that the third pays 416. Unsettled, 388 would not.
	for _, ev := range []*decisionlog.Event{
		decision(0, decisionlog.Allowed, "a"), settlement(20, "a"),
		decision(21, decisionlog.Denied, ""),
		decision(45, decisionlog.Allowed, "c"), settlement(65, "c"),
	} {
		e.Add(ev)
	}
	rep := e.Finish()
	want := []string{decisionlog.Allowed, decisionlog.Allowed, decisionlog.Allowed}
	if len(replayed) != len(want) || replayed[0] != want[0] || replayed[1] != want[1] || replayed[2] != want[2] {
		t.Fatalf("replayed %v, want %v", replayed, want)
	}
	if rep.Settled != 2 || rep.Modelled != 1 {
		t.Errorf("settled %d, modelled %d; want 2 recorded and 1 modelled", rep.Settled, rep.Modelled)
	}
}
