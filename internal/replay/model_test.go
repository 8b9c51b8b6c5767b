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

// The provider simulation counts as each provider counts: Anthropic settles its output tokens
// to the usage, so a second request fits once the first settled; OpenAI keeps its TPM's count
// of max_tokens, so the same two requests meet its limit; Bedrock's output weight counts each
// output token five times.
func TestProviderSimulationCountsAsTheProviderCounts(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(`
tenant: {source: header, header: x-tenant-id}
rules:
  - name: per-tenant
    per: [tenant]
    tokens: {limit: 10000000, period: minute}
    refund: true
`), "sim.yaml")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	run := func(prov, api, model, limits string, maxTokens int64) int64 {
		t.Helper()
		p, err := ParseProviderLimits([]byte(limits), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		e, err := New(Options{Config: c, Provider: p})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			at := t0.Add(time.Duration(i) * 30 * time.Millisecond)
			rid := "r" + string(rune('a'+i))
			e.Add(&decisionlog.Event{Decision: decisionlog.Decision{Time: at, Provider: prov, API: api, Model: model,
				Path: "/v1/x", Tenant: "team-a", Priority: "interactive", Prompt: 20, Output: maxTokens, Exact: true,
				Outcome: decisionlog.Allowed, Decision: decisionlog.Allowed, ReservationID: rid}})
			e.Add(&decisionlog.Event{IsSettlement: true, Settlement: decisionlog.Settlement{Time: at.Add(20 * time.Millisecond),
				ReservationID: rid, Provider: prov, Model: model, Status: 200, Found: true, Input: 20, Output: 30, Total: 50}})
		}
		var n int64
		for _, row := range e.Finish().Rows {
			n += row.Provider429
		}
		return n
	}
	if n := run("anthropic", "messages", "claude-sonnet-4-5", "limits: [{provider: anthropic, output_tokens_per_minute: 1000}]", 600); n != 0 {
		t.Errorf("anthropic OTPM settled to the usage: %d 429s, want 0", n)
	}
	if n := run("openai", "chat_completions", "gpt-4o", "limits: [{provider: openai, tokens_per_minute: 1000}]", 600); n != 1 {
		t.Errorf("openai TPM keeps max_tokens: %d 429s, want 1", n)
	}
	// Bedrock: 20 + 5 x 190 = 970 of 1000 at admission, settled to 20 + 5 x 30 = 170: 830 left
	// for the second's 970. Unweighted, 210 twice fits.
	if n := run("bedrock", "converse", "anthropic.claude-sonnet-4-5", "limits: [{provider: bedrock, tokens_per_minute: 1000}]", 190); n != 1 {
		t.Errorf("bedrock weighted output: %d 429s, want 1", n)
	}
	if n := run("bedrock", "converse", "anthropic.claude-sonnet-4-5", "limits: [{provider: bedrock, tokens_per_minute: 1000, output_weight: 1}]", 190); n != 0 {
		t.Errorf("bedrock with output_weight 1: %d 429s, want 0", n)
	}
}
