package top

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Snapshot is what one refresh read.
type Snapshot struct {
	At      time.Time
	Buckets []Bucket
	Rates   Rates
	Held    float64
	Leases  float64
	// Provider429s counts the provider's 429s since the replicas started (Sample.Provider429s).
	Provider429s float64
	// Replicas are the admin ports asked; Answered those whose metrics the sums hold.
	Replicas, Answered int
}

// Order is how the frame sorts the buckets.
type Order int

// The orders, in the order the sort key cycles through them.
const (
	ByFill   Order = iota // fullest use first
	ByRule                // rule, then tenant
	ByTenant              // tenant, then rule
	ByModel               // model, then rule
	orders
)

func (o Order) String() string {
	return [...]string{"fill", "rule", "tenant", "model"}[o]
}

// Next is the order the sort key moves to.
func (o Order) Next() Order { return (o + 1) % orders }

// View is everything a frame shows besides the snapshot.
type View struct {
	// Title is the header's first line: the admin URL and the scope.
	Title string
	Order Order
	// Filter keeps the buckets whose rule, tenant or model contains it; empty keeps all.
	Filter string
	// Err is the last refresh's failure, shown under the header; the snapshot is the last good one.
	Err error
	// Help adds the keys' line (the terminal view).
	Help bool
}

// Render draws a frame width columns wide, in plain text: no escape codes.
func Render(s Snapshot, v View, width int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "ext-authz top  %s  sort: %s", v.Title, v.Order)
	if v.Filter != "" {
		fmt.Fprintf(&b, "  filter: %q", v.Filter)
	}
	b.WriteString("\n")
	rates := "admitted -/s  denied -/s"
	if s.Rates.Known {
		rates = fmt.Sprintf("admitted %.1f/s  denied %.1f/s", s.Rates.Admitted, s.Rates.Denied)
	}
	fmt.Fprintf(&b, "%s  held %g  leases %g  provider 429s %g", rates, s.Held, s.Leases, s.Provider429s)
	if s.Replicas > 1 {
		fmt.Fprintf(&b, "  replicas %d/%d", s.Answered, s.Replicas)
	}
	b.WriteString("\n")
	if v.Err != nil {
		fmt.Fprintf(&b, "error: %v\n", v.Err)
	}
	if v.Help {
		b.WriteString("keys: s sort  / filter  esc clear filter  q quit\n")
	}
	b.WriteString("\n")

	rows := Sorted(Filtered(s.Buckets, v.Filter), v.Order)
	head := []string{"RULE", "TENANT", "MODEL", "KIND", "", "USE", "REMAINING", "LIMIT", "PERIOD", "FULL IN", "LEASES"}
	cells := make([][]string, len(rows))
	for i, r := range rows {
		kind := r.Kind
		if r.Shadow {
			kind += " (shadow)"
		}
		cells[i] = []string{r.Rule, r.Tenant, r.Model, kind, "", strconv.Itoa(int(r.Fill()*100+0.5)) + "%",
			amount(r, r.Remaining) + "/" + amount(r, r.Capacity), amount(r, r.Limit), r.Period,
			fullIn(r), strconv.FormatInt(r.Leases, 10)}
	}
	widths := make([]int, len(head))
	for i, h := range head {
		widths[i] = len(h)
		for _, c := range cells {
			widths[i] = max(widths[i], len(c[i]))
		}
	}
	// The level bar takes what the other columns leave, between 10 and 40 columns.
	used := 0
	for i, w := range widths {
		if i != levelCol {
			used += w + 2
		}
	}
	bar := min(max(width-used-2, 10), 40)
	widths[levelCol] = bar + 2
	head[levelCol] = "LEVEL"
	line := func(c []string) {
		var l strings.Builder
		for i, s := range c {
			if i > 0 {
				l.WriteString("  ")
			}
			if i == levelCol+1 || i == levelCol+3 || i == levelCol+6 { // USE, LIMIT, LEASES
				fmt.Fprintf(&l, "%*s", widths[i], s)
			} else {
				fmt.Fprintf(&l, "%-*s", widths[i], s)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " "))
		b.WriteString("\n")
	}
	line(head)
	for i, r := range rows {
		cells[i][levelCol] = level(r, bar)
		line(cells[i])
	}
	if len(rows) == 0 {
		b.WriteString("(no buckets)\n")
	}
	return b.String()
}

// Spend is the kind of a money budget, whose amounts the admin API gives in micro-units of USD.
const Spend = "spend"

// amount is v, one of b's amounts, as the frame shows it: a count, or dollars and cents for a
// money budget.
func amount(b Bucket, v int64) string {
	if b.Kind != Spend {
		return strconv.FormatInt(v, 10)
	}
	sign := ""
	if v < 0 {
		sign, v = "-", -v
	}
	return fmt.Sprintf("%s$%d.%02d", sign, v/1_000_000, v%1_000_000/10_000)
}

// levelCol is the column of the level bar.
const levelCol = 4

// level is the bar of what remains: '#' remaining, '.' used.
func level(b Bucket, width int) string {
	n := width - int(b.Fill()*float64(width)+0.5)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

// fullIn is the time until the bucket is full again; "-" when it is full.
func fullIn(b Bucket) string {
	if b.Remaining >= b.Capacity || b.ResetMS <= 0 {
		return "-"
	}
	d := time.Duration(b.ResetMS) * time.Millisecond
	switch {
	case d < time.Second:
		return d.String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
	default:
		d = d.Round(time.Minute)
	}
	// 10m0s reads 10m, 1h30m0s 1h30m, 2h0m0s 2h.
	s := strings.TrimSuffix(d.String(), "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Filtered returns the buckets whose rule, tenant or model contains sub.
func Filtered(bs []Bucket, sub string) []Bucket {
	if sub == "" {
		return bs
	}
	var out []Bucket
	for _, b := range bs {
		if strings.Contains(b.Rule, sub) || strings.Contains(b.Tenant, sub) || strings.Contains(b.Model, sub) {
			out = append(out, b)
		}
	}
	return out
}

// Sorted returns a sorted copy of bs.
func Sorted(bs []Bucket, o Order) []Bucket {
	out := slices.Clone(bs)
	slices.SortStableFunc(out, func(a, b Bucket) int {
		switch o {
		case ByFill:
			if c := cmp.Compare(b.Fill(), a.Fill()); c != 0 {
				return c
			}
		case ByTenant:
			if c := cmp.Compare(a.Tenant, b.Tenant); c != 0 {
				return c
			}
		case ByModel:
			if c := cmp.Compare(a.Model, b.Model); c != 0 {
				return c
			}
		}
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Model, b.Model), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}
