package top

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scope names the buckets of one query of GET /v1/buckets.
type Scope struct {
	Provider, Model, Tenant, Rule string
}

// Bucket is one bucket as the admin API reports it, with the tenant and model of the query that
// found it (AllTenants, AllModels for a bucket not kept per tenant, per model).
type Bucket struct {
	Tenant string `json:"-"`
	Model  string `json:"-"`
	Rule   string `json:"rule"`
	Kind   string `json:"kind"`
	Window uint8  `json:"window"`
	// Per are the scopes the bucket is kept per.
	Per       []string `json:"per"`
	Shadow    bool     `json:"shadow"`
	Algorithm string   `json:"algorithm"`
	Limit     int64    `json:"limit"`
	Capacity  int64    `json:"capacity"`
	Period    string   `json:"period"`
	Remaining int64    `json:"remaining"`
	ResetMS   int64    `json:"reset_ms"`
	Leases    int64    `json:"leases"`
}

// Fill is the share of the bucket in use, 0 (full) to 1 (spent).
func (b Bucket) Fill() float64 {
	if b.Capacity <= 0 {
		return 0
	}
	f := 1 - float64(b.Remaining)/float64(b.Capacity)
	return min(max(f, 0), 1)
}

// Sample is one scrape of /metrics: decision counters summed by result over providers and
// models, and the gauges top shows.
type Sample struct {
	At        time.Time
	Decisions map[string]float64
	Held      float64
	Leases    float64
	// Provider429s are the provider 429s the replica's response path saw: those that paused
	// buckets (kind pause) and those without a wait (spend_cap), since it started.
	Provider429s float64
}

// Client reads a service's admin ports. It is safe for concurrent use.
type Client struct {
	// Bases are the admin ports' URLs, such as http://127.0.0.1:9090: one, or one per replica of
	// the service. The metrics of every replica are summed; the buckets, kept in the store the
	// replicas share, are read from the first replica that answers.
	Bases []string
	HTTP  *http.Client
	// Now is the clock of the samples; nil is time.Now.
	Now func() time.Time
}

func (c *Client) get(ctx context.Context, base, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, e.Error)
		}
		return nil, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return body, nil
}

// AllTenants is the tenant of a bucket not kept per tenant: one bucket for every tenant asked
// for; AllModels likewise the model of a bucket not kept per model.
const (
	AllTenants = "*"
	AllModels  = "*"
)

// Buckets reads GET /v1/buckets for one scope from the admin port base.
func (c *Client) Buckets(ctx context.Context, base string, s Scope) ([]Bucket, error) {
	q := url.Values{"provider": {s.Provider}, "model": {s.Model}}
	if s.Tenant != "" {
		q.Set("tenant", s.Tenant)
	}
	if s.Rule != "" {
		q.Set("rule", s.Rule)
	}
	body, err := c.get(ctx, base, "/v1/buckets?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("top: buckets of tenant %q: %w", s.Tenant, err)
	}
	var r struct {
		Buckets []Bucket `json:"buckets"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("top: buckets: %w", err)
	}
	for i := range r.Buckets {
		r.Buckets[i].Tenant, r.Buckets[i].Model = s.Tenant, s.Model
		if !slices.Contains(r.Buckets[i].Per, "tenant") {
			r.Buckets[i].Tenant = AllTenants
		}
		if !slices.Contains(r.Buckets[i].Per, "model") {
			r.Buckets[i].Model = AllModels
		}
	}
	return r.Buckets, nil
}

// Scrape reads GET /metrics from the admin port base.
func (c *Client) Scrape(ctx context.Context, base string) (Sample, error) {
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	at := now()
	body, err := c.get(ctx, base, "/metrics")
	if err != nil {
		return Sample{}, fmt.Errorf("top: metrics: %w", err)
	}
	s, err := ParseMetrics(strings.NewReader(string(body)))
	s.At = at
	return s, err
}

// ParseMetrics reads the Prometheus text format.
func ParseMetrics(r io.Reader) (Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, fmt.Errorf("top: metrics: %w", err)
	}
	s := Sample{Decisions: map[string]float64{}}
	if f := fams["llm_ratelimit_decisions_total"]; f != nil {
		for _, m := range f.GetMetric() {
			s.Decisions[label(m, "decision")] += value(m)
		}
	}
	s.Held = gauge(fams["llm_ratelimit_held_requests"])
	s.Leases = gauge(fams["llm_ratelimit_leases_held"])
	if f := fams["llm_ratelimit_provider_corrections_total"]; f != nil {
		for _, m := range f.GetMetric() {
			if k := label(m, "kind"); k == "pause" || k == "spend_cap" {
				s.Provider429s += value(m)
			}
		}
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// gauge sums a family's values.
func gauge(f *dto.MetricFamily) float64 {
	var v float64
	for _, m := range f.GetMetric() {
		v += value(m)
	}
	return v
}

// value is a sample's value, whichever type the scrape declared (untyped without a TYPE line).
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}

// Admitted are the decision results that let a request through; Denied those that answer it
// with a denial. Any other result (unavailable) is neither.
var (
	admitted = []string{"allowed", "delayed", "shadow", "unlimited", "fail_open", "local"}
	denied   = []string{"denied", "too_large", "unknown_denied", "bad_route", "bad_identity", "spent", "unpriced"}
)

// Rates are decisions per second between two samples.
type Rates struct {
	Known            bool
	Admitted, Denied float64
}

// RatesBetween returns the rates of decisions from prev to cur; Known is false when there is
// no earlier sample or no time between them. A counter that went down (a restart) counts from 0.
func RatesBetween(prev, cur Sample) Rates {
	dt := cur.At.Sub(prev.At).Seconds()
	if prev.Decisions == nil || dt <= 0 {
		return Rates{}
	}
	sum := func(results []string) float64 {
		var d float64
		for _, r := range results {
			v := cur.Decisions[r] - prev.Decisions[r]
			if v < 0 {
				v = cur.Decisions[r]
			}
			d += v
		}
		return d / dt
	}
	return Rates{Known: true, Admitted: sum(admitted), Denied: sum(denied)}
}

// Poll scrapes every replica's metrics and reads every scope's buckets from the first replica
// that answered, and returns the snapshot with the rates since prev (one sample per replica, in
// the order of Bases; a zero sample: unknown rates) and the new samples. A replica that does not
// answer is left out of the sums (Snapshot.Answered); none answering is an error.
func (c *Client) Poll(ctx context.Context, scopes []Scope, prev []Sample) (Snapshot, []Sample, error) {
	snap := Snapshot{Replicas: len(c.Bases)}
	cur := make([]Sample, len(c.Bases))
	var first string
	var errs []error
	for i, base := range c.Bases {
		s, err := c.Scrape(ctx, base)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", base, err))
			continue
		}
		cur[i] = s
		if snap.Answered++; first == "" {
			first, snap.At = base, s.At
		}
	}
	if first == "" {
		return Snapshot{}, prev, errors.Join(errs...)
	}
	for _, s := range scopes {
		b, err := c.Buckets(ctx, first, s)
		if err != nil {
			return Snapshot{}, cur, err
		}
		for _, x := range b {
			// A bucket not kept per tenant (or per model) is the same one for every tenant (or
			// model) asked for: shown once.
			if slices.ContainsFunc(snap.Buckets, func(y Bucket) bool {
				return y.Tenant == x.Tenant && y.Model == x.Model && y.Rule == x.Rule && y.Kind == x.Kind && y.Window == x.Window
			}) {
				continue
			}
			snap.Buckets = append(snap.Buckets, x)
		}
	}
	// The rates are known once every replica that answered now had answered before too.
	snap.Rates.Known = true
	for i, s := range cur {
		if s.Decisions == nil {
			continue
		}
		var p Sample
		if i < len(prev) {
			p = prev[i]
		}
		r := RatesBetween(p, s)
		snap.Rates.Known = snap.Rates.Known && r.Known
		snap.Rates.Admitted += r.Admitted
		snap.Rates.Denied += r.Denied
		snap.Held += s.Held
		snap.Leases += s.Leases
		snap.Provider429s += s.Provider429s
	}
	if !snap.Rates.Known {
		snap.Rates = Rates{}
	}
	return snap, cur, nil
}
