package replay

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// Report is what a replay found. Its rows are sorted by rule, tenant and model.
type Report struct {
	// From and To are the first and the last replayed decision (on the replay's clock).
	From, To time.Time
	// Decisions replayed; Skipped: recorded refusals made before any rule (a bad route or
	// identity); Settled: recorded settlements applied to a replayed reservation; Modelled:
	// settlements the replay made for requests the live limits refused (no usage recorded; see
	// Engine); Errors: decisions the filter failed (none expected).
	Decisions, Skipped, Settled, Modelled, Errors int64
	// Rows count each replayed decision once in each rule it matched ("-": none), by tenant and
	// model.
	Rows []*Row
	// Series are the tokens admitted per second under each rule, with the rule's limit.
	Series []*Series `json:"series,omitempty"`
	// Tenants are each tenant's totals, every decision counted once.
	Tenants map[string]*Total

	rows  map[rowKey]*Row
	rules map[string]*Series
}

// Row is one rule, tenant and model.
type Row struct {
	Rule, Tenant, Model   string
	Allowed, Held, Denied int64
	// WaitP50 and WaitP99 are the holds' (held decisions only).
	WaitP50, WaitP99 time.Duration
	// FirstRefusal is the first denial's time (zero when none).
	FirstRefusal time.Time `json:",omitzero"`
	// Provider429 are the admitted requests the provider's own limits would have refused.
	Provider429 int64
	// Tokens are the tokens reserved by the admitted requests (prompt plus output).
	Tokens int64

	waits []time.Duration
}

// Series is one rule's admitted tokens, second by second from Report.From.
type Series struct {
	Rule string
	// Limit is the rule's first token limit in tokens per second (0: none), PerBucket whether
	// it applies to each of the rule's buckets (per tenant, model...) rather than the sum.
	Limit     float64
	PerBucket bool
	Tokens    []int64
}

// Total is one tenant's decisions and the tokens its admitted requests reserved.
type Total struct {
	Allowed, Held, Denied, Tokens int64
}

type rowKey struct{ rule, tenant, model string }

func newReport(c *config.Config) *Report {
	r := &Report{rows: map[rowKey]*Row{}, rules: map[string]*Series{}, Tenants: map[string]*Total{}}
	for _, rule := range c.Rules {
		s := &Series{Rule: rule.Name, PerBucket: rule.Per != 0 || rule.FromPlan}
		for _, l := range rule.Limits {
			if l.Dim != provider.Requests && l.Window == 0 && l.Algorithm != bucket.Quota && l.Period > 0 {
				s.Limit = float64(l.Limit.Limit) / l.Period.Seconds()
				break
			}
		}
		r.rules[rule.Name] = s
		r.Series = append(r.Series, s)
	}
	return r
}

// add counts one replayed decision: rec is what was recorded, got what the replay decided.
func (r *Report) add(rec, got *decisionlog.Decision, provider429 bool) {
	if r.Decisions == 0 {
		r.From = got.Time
	}
	r.Decisions++
	r.To = got.Time
	admitted := got.Outcome != decisionlog.Denied
	cost := rec.Prompt + rec.Output
	sec := int(got.Time.Sub(r.From) / time.Second)
	t := r.Tenants[rec.Tenant]
	if t == nil {
		t = &Total{}
		r.Tenants[rec.Tenant] = t
	}
	switch got.Outcome {
	case decisionlog.Allowed:
		t.Allowed++
	case decisionlog.Held:
		t.Held++
	default:
		t.Denied++
	}
	if admitted {
		t.Tokens += cost
	}
	rules := got.Rules
	if rules == "" {
		rules = "-"
	}
	for rules != "" {
		name, rest, _ := strings.Cut(rules, ",")
		rules = rest
		k := rowKey{name, rec.Tenant, rec.Model}
		row := r.rows[k]
		if row == nil {
			row = &Row{Rule: name, Tenant: rec.Tenant, Model: rec.Model}
			r.rows[k] = row
		}
		switch got.Outcome {
		case decisionlog.Allowed:
			row.Allowed++
		case decisionlog.Held:
			row.Held++
			row.waits = append(row.waits, got.Wait)
		default:
			row.Denied++
			if row.FirstRefusal.IsZero() {
				row.FirstRefusal = got.Time
			}
		}
		if provider429 {
			row.Provider429++
		}
		if admitted {
			row.Tokens += cost
			if s := r.rules[name]; s != nil {
				for len(s.Tokens) <= sec {
					s.Tokens = append(s.Tokens, 0)
				}
				s.Tokens[sec] += cost
			}
		}
	}
}

func (r *Report) finish() {
	r.Rows = r.Rows[:0]
	for _, row := range r.rows {
		if len(row.waits) > 0 {
			slices.Sort(row.waits)
			row.WaitP50 = quantile(row.waits, 0.50)
			row.WaitP99 = quantile(row.waits, 0.99)
		}
		r.Rows = append(r.Rows, row)
	}
	slices.SortFunc(r.Rows, func(a, b *Row) int {
		if c := strings.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
			return c
		}
		return strings.Compare(a.Model, b.Model)
	})
	// The series of rules nothing matched are left out of the chart.
	r.Series = slices.DeleteFunc(r.Series, func(s *Series) bool { return len(s.Tokens) == 0 })
}

// quantile is the q-quantile of sorted (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// WriteTable writes the report as an aligned text table.
func (r *Report) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "replayed %d decisions from %s to %s (%d skipped, %d settlements applied, %d modelled)\n",
		r.Decisions, r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339), r.Skipped, r.Settled, r.Modelled)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rule\ttenant\tmodel\tallowed\theld\twait p50\twait p99\tdenied\tfirst refusal\tprovider 429\ttokens\t")
	for _, row := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%d\t%s\t%d\t%d\t\n", row.Rule, row.Tenant, row.Model,
			row.Allowed, row.Held, ms(row.WaitP50), ms(row.WaitP99), row.Denied, stamp(row.FirstRefusal),
			row.Provider429, row.Tokens)
	}
	return tw.Flush()
}

func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("15:04:05.000")
}

// jsonRow is a Row as JSON: durations in milliseconds.
type jsonRow struct {
	Rule         string     `json:"rule"`
	Tenant       string     `json:"tenant"`
	Model        string     `json:"model"`
	Allowed      int64      `json:"allowed"`
	Held         int64      `json:"held"`
	WaitP50MS    float64    `json:"wait_p50_ms"`
	WaitP99MS    float64    `json:"wait_p99_ms"`
	Denied       int64      `json:"denied"`
	FirstRefusal *time.Time `json:"first_refusal,omitempty"`
	Provider429  int64      `json:"provider_429"`
	Tokens       int64      `json:"tokens"`
}

// JSON returns the report's rows and totals as JSON (the series are the SVG's).
func (r *Report) JSON() ([]byte, error) {
	out := struct {
		From      time.Time `json:"from"`
		To        time.Time `json:"to"`
		Decisions int64     `json:"decisions"`
		Skipped   int64     `json:"skipped"`
		Settled   int64     `json:"settled"`
		Modelled  int64     `json:"modelled"`
		Rows      []jsonRow `json:"rows"`
	}{From: r.From.UTC(), To: r.To.UTC(), Decisions: r.Decisions, Skipped: r.Skipped, Settled: r.Settled,
		Modelled: r.Modelled, Rows: []jsonRow{}}
	for _, row := range r.Rows {
		j := jsonRow{Rule: row.Rule, Tenant: row.Tenant, Model: row.Model, Allowed: row.Allowed, Held: row.Held,
			WaitP50MS: float64(row.WaitP50.Microseconds()) / 1000, WaitP99MS: float64(row.WaitP99.Microseconds()) / 1000,
			Denied: row.Denied, Provider429: row.Provider429, Tokens: row.Tokens}
		if !row.FirstRefusal.IsZero() {
			t := row.FirstRefusal.UTC()
			j.FirstRefusal = &t
		}
		out.Rows = append(out.Rows, j)
	}
	return json.MarshalIndent(out, "", "  ")
}

// WriteDiff writes two reports of the same traffic side by side: each row's allowed, held and
// denied under a and under b.
func WriteDiff(w io.Writer, a, b *Report, nameA, nameB string) error {
	type pair struct{ a, b *Row }
	keys := map[rowKey]*pair{}
	var order []rowKey
	for i, rep := range []*Report{a, b} {
		for _, row := range rep.Rows {
			k := rowKey{row.Rule, row.Tenant, row.Model}
			p := keys[k]
			if p == nil {
				p = &pair{}
				keys[k] = p
				order = append(order, k)
			}
			if i == 0 {
				p.a = row
			} else {
				p.b = row
			}
		}
	}
	slices.SortFunc(order, func(x, y rowKey) int {
		if c := strings.Compare(x.rule, y.rule); c != 0 {
			return c
		}
		if c := strings.Compare(x.tenant, y.tenant); c != 0 {
			return c
		}
		return strings.Compare(x.model, y.model)
	})
	fmt.Fprintf(w, "A: %s\nB: %s\nreplayed %d decisions (A) and %d (B)\n", nameA, nameB, a.Decisions, b.Decisions)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "rule\ttenant\tmodel\tallowed A\tallowed B\theld A\theld B\tdenied A\tdenied B\tprovider 429 A\tprovider 429 B\t")
	var zero Row
	for _, k := range order {
		p := keys[k]
		ra, rb := p.a, p.b
		if ra == nil {
			ra = &zero
		}
		if rb == nil {
			rb = &zero
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", k.rule, k.tenant, k.model,
			ra.Allowed, rb.Allowed, ra.Held, rb.Held, ra.Denied, rb.Denied, ra.Provider429, rb.Provider429)
	}
	return tw.Flush()
}
