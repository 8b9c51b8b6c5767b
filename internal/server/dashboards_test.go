package server

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
)

// The shipped dashboard and alert rules query only metrics the service exports: a renamed or
// misspelt metric leaves a panel empty and an alert silent, which nothing else would show.
func TestDeployQueriesExportedMetrics(t *testing.T) {
	t.Parallel()
	reg := serviceRegistry(t)
	if exported(t, reg, "llm_ratelimit_no_such_metric_total") {
		t.Fatal("the probe finds a metric the service does not export")
	}
	for _, tc := range []struct {
		file  string
		exprs func(*testing.T, []byte) []string
		min   int // the file's distinct metric names at least: the extraction found them
	}{
		{"../../deploy/grafana/llm-ratelimit.json", dashboardExprs, 15},
		{"../../deploy/prometheus/alerts.yaml", alertExprs, 8},
	} {
		data, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, e := range tc.exprs(t, data) {
			for _, n := range metricNames(e) {
				names[n] = true
			}
		}
		if len(names) < tc.min {
			t.Errorf("%s: %d metric names found, want at least %d: %v", tc.file, len(names), tc.min, sorted(names))
		}
		for _, n := range sorted(names) {
			if !exported(t, reg, n) && !exported(t, reg, histogramBase(n)) {
				t.Errorf("%s queries %s, which the service does not export", tc.file, n)
			}
		}
	}
}

// serviceRegistry is the registry of a service built by New as the command builds it, with the
// decision log on and a Redis URL, so that the metrics of every part are registered (New does
// not dial Redis).
func serviceRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	s, err := New(Options{GRPCAddr: "127.0.0.1:0", MaxRecvBytes: 1 << 20, DrainTimeout: time.Second,
		RedisURL: "redis://127.0.0.1:1", RedisTimeout: time.Second,
		DecisionLog: filepath.Join(t.TempDir(), "decisions.jsonl")}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s.reg
}

// exported reports whether reg holds a collector of a metric named name: the registry refuses
// another under a name it holds, whatever the labels, and whether or not the metric has a
// sample yet (a vector without children is absent from Gather).
func exported(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "probe"})
	if err := reg.Register(probe); err != nil {
		return true
	}
	reg.Unregister(probe)
	return false
}

// histogramBase is name without a histogram's or summary's series suffix.
func histogramBase(name string) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, s); ok {
			return b
		}
	}
	return name
}

// dashboardExprs are the PromQL expressions of a Grafana dashboard: every "expr", and the
// metric of each label_values variable query.
func dashboardExprs(t *testing.T, data []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	labelValues := regexp.MustCompile(`label_values\(\s*([^,)]+)`)
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				s, ok := x.(string)
				switch {
				case ok && k == "expr":
					out = append(out, s)
				case ok && k == "definition":
					if m := labelValues.FindStringSubmatch(s); m != nil {
						out = append(out, m[1])
					}
				default:
					walk(x)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	return out
}

// alertExprs are the expressions of a Prometheus rules file.
func alertExprs(t *testing.T, data []byte) []string {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, r.Expr)
		}
	}
	return out
}

var (
	// promQuoted are string literals; promMatchers label matchers and promRanges range and
	// subquery durations; promGrouping the label lists of by, without, on, ignoring and the
	// group modifiers.
	promQuoted   = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// promIdent is an identifier; one followed by "(" is a function or an aggregation.
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promKeywords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}
)

// metricNames are the metric names a PromQL expression selects.
func metricNames(expr string) []string {
	e := promQuoted.ReplaceAllString(expr, `""`)
	e = promMatchers.ReplaceAllString(e, " ")
	e = promRanges.ReplaceAllString(e, " ")
	e = promGrouping.ReplaceAllString(e, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatchIndex(e, -1) {
		if m[2] >= 0 { // a call
			continue
		}
		// An identifier inside a number (1e3) is none.
		if m[0] > 0 && (e[m[0]-1] >= '0' && e[m[0]-1] <= '9' || e[m[0]-1] == '.') {
			continue
		}
		id := e[m[0]:m[1]]
		if !promKeywords[strings.ToLower(id)] {
			out = append(out, id)
		}
	}
	return out
}

// metricNames finds the selectors of an expression and nothing else: not the labels of a
// grouping or a matcher, not functions, keywords, durations or numbers.
func TestMetricNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want string
	}{
		{`sum by (rule) (rate(a_total{job=~"$job", x="by (y)"}[$__rate_interval])) / sum by (rule) (rate(b_total[5m])) > 0.2`, "a_total b_total"},
		{`histogram_quantile(0.5, sum by (le, provider) (rate(h_bucket{job=~"$job"}[10m]))) < 1e3`, "h_bucket"},
		{`(x > 1.1) or on (instance) (max without (job) (y) == bool 1) unless z offset 5m`, "x y z"},
		{`increase(d_total[10m]) > 0`, "d_total"},
	} {
		if got := strings.Join(metricNames(tc.expr), " "); got != tc.want {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// The dashboard names no data source of its own: every panel and query uses the data source
// variable, a Prometheus one, so that it imports into any Grafana.
func TestDashboardDataSourceVariable(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/grafana/llm-ratelimit.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range d.Templating.List {
		found = found || (v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !found {
		t.Error("no Prometheus data source variable named datasource")
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	n := 0
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "datasource" {
					n++
					ds, _ := x.(map[string]any)
					if ds["type"] != "prometheus" || ds["uid"] != "${datasource}" {
						t.Errorf("data source %v, want {prometheus ${datasource}}", x)
					}
					continue
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(v)
	if n == 0 {
		t.Error("no panel names a data source")
	}
}

// Every alert waits before it fires and says what it is and what to do.
func TestAlertsAnnotated(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../deploy/prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" {
				t.Errorf("rule %d is not an alert", n)
			}
			if d, err := time.ParseDuration(r.For); err != nil || d < time.Minute {
				t.Errorf("%s: for %q, want a minute or more", r.Alert, r.For)
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s: no severity", r.Alert)
			}
			for _, a := range []string{"summary", "description"} {
				if r.Annotations[a] == "" {
					t.Errorf("%s: no %s", r.Alert, a)
				}
			}
		}
	}
	if n < 8 {
		t.Errorf("%d alerts, want at least 8", n)
	}
}
