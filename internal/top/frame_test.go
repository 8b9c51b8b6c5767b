package top

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func fixture() Snapshot {
	return Snapshot{
		Buckets: []Bucket{
			{Tenant: "team-a", Model: AllModels, Rule: "per-tenant", Kind: "tokens", Per: []string{"tenant"}, Limit: 100000, Capacity: 100000, Period: "per minute", Remaining: 25000, ResetMS: 45000},
			{Tenant: "team-b", Model: AllModels, Rule: "per-tenant", Kind: "tokens", Per: []string{"tenant"}, Limit: 100000, Capacity: 100000, Period: "per minute", Remaining: 100000},
			{Tenant: "team-a", Model: AllModels, Rule: "per-tenant", Kind: "concurrent requests", Per: []string{"tenant"}, Algorithm: "concurrency", Limit: 3, Capacity: 3, Period: "in flight", Remaining: 1, ResetMS: 600000, Leases: 2},
			{Tenant: AllTenants, Model: "gpt-4o", Rule: "openai-per-model", Kind: "requests", Per: []string{"model"}, Limit: 500, Capacity: 500, Period: "per minute", Remaining: 0, ResetMS: 120},
			{Tenant: AllTenants, Model: "gpt-4o-mini", Rule: "openai-per-model", Kind: "requests", Per: []string{"model"}, Limit: 500, Capacity: 500, Period: "per minute", Remaining: 450, ResetMS: 6000},
			{Tenant: "team-a", Model: AllModels, Rule: "budget", Kind: Spend, Per: []string{"tenant"}, Limit: 250_000_000, Capacity: 250_000_000, Period: "per month (UTC)", Remaining: 61_234_567, ResetMS: 86400000},
			{Tenant: "team-b", Model: AllModels, Rule: "audit", Kind: "tokens", Shadow: true, Per: []string{"tenant"}, Limit: 1000, Capacity: 1000, Period: "per day", Remaining: 900, ResetMS: 5400000},
		},
		Rates:        Rates{Known: true, Admitted: 12.5, Denied: 3},
		Held:         1,
		Leases:       2,
		Provider429s: 4,
	}
}

// Frames of a fixed snapshot at fixed widths, each order and a filter, against
// testdata/*.golden (go test -update rewrites them). Plain frames carry no escape bytes.
func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		view  View
		width int
	}{
		{"fill_100", View{Title: "http://127.0.0.1:9090  openai/gpt-4o  every 1s"}, 100},
		{"fill_80", View{Title: "http://127.0.0.1:9090  openai/gpt-4o  every 1s"}, 80},
		{"fill_160", View{Title: "http://127.0.0.1:9090  openai/gpt-4o  every 1s"}, 160},
		{"rule", View{Title: "t", Order: ByRule}, 100},
		{"tenant_filter", View{Title: "t", Order: ByTenant, Filter: "team-b", Help: true}, 100},
		{"model_filter", View{Title: "t", Order: ByModel, Filter: "gpt-4o"}, 100},
	} {
		got := Render(fixture(), tc.view, tc.width)
		if strings.ContainsRune(got, 0x1b) {
			t.Errorf("%s: frame has an escape byte:\n%q", tc.name, got)
		}
		path := filepath.Join("testdata", tc.name+".golden")
		if *update {
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -update writes it)", err)
		}
		if got != string(want) {
			t.Errorf("%s: frame differs from %s:\n--- got\n%s--- want\n%s", tc.name, path, got, want)
		}
	}
}

// Rates are the counters' differences over the time between the scrapes, the results grouped
// into admitted and denied; the first frame has none; a counter that went down counts from 0.
func TestRates(t *testing.T) {
	t.Parallel()
	text := `# TYPE llm_ratelimit_decisions_total counter
llm_ratelimit_decisions_total{decision="allowed",model="gpt-4o",provider="openai"} 30
llm_ratelimit_decisions_total{decision="allowed",model="gpt-4o-mini",provider="openai"} 10
llm_ratelimit_decisions_total{decision="delayed",model="gpt-4o",provider="openai"} 2
llm_ratelimit_decisions_total{decision="denied",model="gpt-4o",provider="openai"} 8
llm_ratelimit_decisions_total{decision="unavailable",model="gpt-4o",provider="openai"} 100
# TYPE llm_ratelimit_held_requests gauge
llm_ratelimit_held_requests 3
# TYPE llm_ratelimit_leases_held gauge
llm_ratelimit_leases_held 4
# TYPE llm_ratelimit_provider_corrections_total counter
llm_ratelimit_provider_corrections_total{kind="lower",provider="openai"} 50
llm_ratelimit_provider_corrections_total{kind="pause",provider="openai"} 2
llm_ratelimit_provider_corrections_total{kind="pause",provider="anthropic"} 1
llm_ratelimit_provider_corrections_total{kind="spend_cap",provider="anthropic"} 4
`
	cur, err := ParseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if cur.Held != 3 || cur.Leases != 4 || cur.Decisions["allowed"] != 40 || cur.Provider429s != 7 {
		t.Fatalf("sample = %+v", cur)
	}
	t0 := time.Unix(1000, 0)
	cur.At = t0.Add(2 * time.Second)
	if r := RatesBetween(Sample{}, cur); r.Known {
		t.Errorf("rates without an earlier sample = %+v", r)
	}
	prev := Sample{At: t0, Decisions: map[string]float64{"allowed": 20, "delayed": 2, "denied": 10}}
	if r, want := RatesBetween(prev, cur), (Rates{Known: true, Admitted: 10, Denied: 4}); r != want {
		t.Errorf("rates = %+v, want %+v", r, want)
	}
	if _, err := ParseMetrics(strings.NewReader("not metrics {")); err == nil {
		t.Error("a broken scrape parsed")
	}
}

// The keys: s cycles the order, / edits the filter until enter, esc clears it, q quits.
func TestModelKeys(t *testing.T) {
	t.Parallel()
	m := NewModel(&Client{}, nil, time.Second, "t")
	m.Update(polled{snap: fixture()})
	m.Update(tea.WindowSizeMsg{Width: 120})
	key := func(s string) tea.Cmd {
		var k tea.KeyMsg
		switch s {
		case "enter":
			k = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			k = tea.KeyMsg{Type: tea.KeyEsc}
		default:
			k = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}
		}
		_, cmd := m.Update(k)
		return cmd
	}
	key("s")
	if m.view.Order != ByRule || !strings.Contains(m.View(), "sort: rule") {
		t.Errorf("after s: order %v", m.view.Order)
	}
	for _, want := range []Order{ByTenant, ByModel, ByFill, ByRule} {
		if key("s"); m.view.Order != want {
			t.Errorf("s moved to %v, want %v", m.view.Order, want)
		}
	}
	key("/")
	key("au")
	key("q") // typed into the filter, not quitting
	key("enter")
	if m.view.Filter != "auq" {
		t.Errorf("filter = %q", m.view.Filter)
	}
	m.view.Filter = "audit"
	if v := m.View(); !strings.Contains(v, "audit") || strings.Contains(v, "per-tenant") {
		t.Errorf("filtered view:\n%s", v)
	}
	m.Update(tea.WindowSizeMsg{Width: 40})
	for l := range strings.SplitSeq(m.View(), "\n") {
		if len(l) > 40 {
			t.Errorf("line wider than the 40-column terminal: %q", l)
		}
	}
	key("esc")
	if m.view.Filter != "" {
		t.Errorf("esc left filter %q", m.view.Filter)
	}
	if cmd := key("q"); cmd == nil {
		t.Fatal("q returned no command")
	} else if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Error("q does not quit")
	}
}
