package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
)

// PlanSpec is one plan as written in the file: the limits of a rule with limits_from: plan, with
// the same keys as a rule's.
type PlanSpec struct {
	Tokens       Amounts `yaml:"tokens"`
	InputTokens  Amounts `yaml:"input_tokens"`
	OutputTokens Amounts `yaml:"output_tokens"`
	Requests     Amounts `yaml:"requests"`
}

// TenantPlans says which plan each tenant is on.
type TenantPlans struct {
	// Source is table (default: Table and File), claim (a claim of the verified JWT names the
	// plan) or context_extension (the route's "plan" key).
	Source string `yaml:"source"`
	// Default is the plan of a tenant that none of the source names (or names an unknown plan).
	Default string `yaml:"default"`
	// Claim is the path of the plan's name in the JWT payload, with source: claim. Default plan.
	Claim ClaimPath `yaml:"claim"`
	// Table maps a tenant to its plan, with source: table.
	Table Assignments `yaml:"table"`
	// File is a YAML file mapping tenants to plans, like Table (relative to the limits file's
	// directory), with source: table. It is reloaded when it changes, without the limits file.
	File string `yaml:"file"`
}

// Assignments map tenants to plan names, in file order, each with its line. Decoding reads the
// mapping's nodes itself: a mapping of tens of thousands of tenants decodes in milliseconds, and
// a tenant listed twice is reported with both lines.
type Assignments []Assignment

// Assignment is one tenant's plan.
type Assignment struct {
	Tenant, Plan string
	Line         int
}

// UnmarshalYAML reads a mapping of tenant to plan name.
func (a *Assignments) UnmarshalYAML(n *yaml.Node) error {
	list, errs := readAssignments(n)
	if len(errs) > 0 {
		return &yaml.TypeError{Errors: errs}
	}
	*a = list
	return nil
}

func readAssignments(n *yaml.Node) (Assignments, []string) {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	if n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
		return nil, nil
	}
	if n.Kind != yaml.MappingNode {
		return nil, []string{fmt.Sprintf("line %d: want a mapping of tenant to plan name", n.Line)}
	}
	var errs []string
	list := make(Assignments, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
			errs = append(errs, fmt.Sprintf("line %d: want tenant: plan, both strings", k.Line))
			continue
		}
		list = append(list, Assignment{Tenant: k.Value, Plan: v.Value, Line: k.Line})
	}
	return list, errs
}

// plainAssignments reads a file of "tenant: plan" lines (and blank lines and comments), each a
// plain YAML scalar of a few safe characters, as YAML reads it, several times faster than the
// YAML decoder; ok is false for anything else, which the decoder then reads.
func plainAssignments(data []byte) (Assignments, bool) {
	list := make(Assignments, 0, bytes.Count(data, []byte{'\n'})+1)
	for line := 1; len(data) > 0; line++ {
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		l = bytes.TrimRight(l, " \r")
		if len(l) == 0 || l[0] == '#' {
			continue
		}
		i := bytes.Index(l, []byte(": "))
		if i <= 0 || !plainKey(l[:i]) || !plainValue(l[i+2:]) {
			return nil, false
		}
		list = append(list, Assignment{Tenant: string(l[:i]), Plan: string(l[i+2:]), Line: line})
	}
	return list, true
}

// plainKey: s starts with a letter or digit and holds only letters, digits and ._/@+=-, so
// that YAML reads it as a plain scalar whose value is s itself.
func plainKey(s []byte) bool {
	for i, b := range s {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case i > 0 && (b == '.' || b == '_' || b == '/' || b == '@' || b == '+' || b == '=' || b == '-'):
		default:
			return false
		}
	}
	return len(s) > 0
}

// plainValue: a plan name, as validName allows.
func plainValue(s []byte) bool {
	return len(s) > 0 && plainKey(s) && validName(string(s))
}

// Plan is a compiled plan: the limits a rule with limits_from: plan applies to its tenants. It is
// immutable and safe for concurrent use.
type Plan struct {
	Name string
	// Limits are as a Rule's: tokens, input_tokens, output_tokens, then requests, each
	// dimension's windows in file order.
	Limits []DimLimit
}

// PlanSource is where a tenant's plan comes from (tenant_plans.source).
type PlanSource uint8

const (
	PlanFromTable            PlanSource = iota // tenant_plans.table and tenant_plans.file
	PlanFromClaim                              // a claim of the verified JWT
	PlanFromContextExtension                   // the route's "plan" key
)

var planSources = map[string]PlanSource{"table": PlanFromTable, "claim": PlanFromClaim, "context_extension": PlanFromContextExtension}

// PlanOf returns the plan of tenant under tenant_plans.source: table: its assignment, else the
// default plan. Safe for concurrent use; nil when the file has no plans.
func (c *Config) PlanOf(tenant string) *Plan {
	if p, ok := c.assigned[tenant]; ok {
		return p
	}
	return c.DefaultPlan
}

// AssignedPlan returns the plan assigned to tenant by tenant_plans.table or file, if any.
func (c *Config) AssignedPlan(tenant string) (*Plan, bool) {
	p, ok := c.assigned[tenant]
	return p, ok
}

// PlanNamed returns the plan called name, else the default plan (nil without plans).
func (c *Config) PlanNamed(name string) *Plan {
	if p, ok := c.Plans[name]; ok {
		return p
	}
	return c.DefaultPlan
}

// Assigned is the number of tenants assigned a plan (tenant_plans.table and file).
func (c *Config) Assigned() int { return len(c.assigned) }

// compilePlans compiles plans and tenant_plans into c; dir is the limits file's directory.
func (f *File) compilePlans(c *Config, dir string, bad func(key, format string, args ...any)) []error {
	var errs []error
	c.Plans = make(map[string]*Plan, len(f.Plans))
	names := make([]string, 0, len(f.Plans))
	for name := range f.Plans {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		key := "plans." + name
		if !validName(name) {
			bad(key, "the plan's name must be 1 to 64 of [A-Za-z0-9._-]")
		}
		spec := f.Plans[name]
		lims, lerrs := compileLimits(dimsOf(&spec.Tokens, &spec.InputTokens, &spec.OutputTokens, &spec.Requests), key)
		errs = append(errs, lerrs...)
		if len(lims) == 0 && len(lerrs) == 0 {
			bad(key, "a plan needs tokens, input_tokens, output_tokens or requests")
		}
		c.Plans[name] = &Plan{Name: name, Limits: lims}
	}
	errs = append(errs, samePlanShapes(names, c.Plans)...)

	tp := &f.TenantPlans
	src, ok := planSources[tp.Source]
	if !ok {
		bad("tenant_plans.source", "%q is not one of table, claim, context_extension", tp.Source)
	}
	c.PlanSource = src
	if len(f.Plans) == 0 {
		if tp.Default != "" || len(tp.Table) > 0 || tp.File != "" {
			bad("tenant_plans", "names plans, but there are none under plans")
		}
		return errs
	}
	if tp.Default == "" {
		bad("tenant_plans.default", "required with plans: the plan of a tenant that is assigned none")
	} else if c.DefaultPlan = c.Plans[tp.Default]; c.DefaultPlan == nil {
		bad("tenant_plans.default", "%q is not a plan under plans", tp.Default)
	}
	if src == PlanFromClaim {
		validClaim(tp.Claim, "tenant_plans.claim", bad)
		c.PlanClaim = tp.Claim
	}
	if src != PlanFromTable && (len(tp.Table) > 0 || tp.File != "") {
		bad("tenant_plans.table", "applies with tenant_plans.source: table only")
	}
	var problems []string
	c.assigned, problems = assign(c.Plans, nil, tp.Table, "tenant_plans.table")
	for _, p := range problems {
		errs = append(errs, errors.New(p))
	}
	if tp.File != "" {
		c.PlansFile = tp.File
		if !filepath.IsAbs(c.PlansFile) {
			c.PlansFile = filepath.Join(dir, c.PlansFile)
		}
		data, err := os.ReadFile(c.PlansFile)
		if err != nil {
			bad("tenant_plans.file", "%v", err)
			return errs
		}
		inline := c.assigned
		if _, err := c.loadAssignments(data, inline); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// loadAssignments reads a tenant_plans.file's content into c, on top of the inline table's
// inline; a problem names the file and the line.
func (c *Config) loadAssignments(data []byte, inline map[string]*Plan) (int, error) {
	list, ok := plainAssignments(data)
	var problems []string
	if !ok {
		var n yaml.Node
		if len(bytes.TrimSpace(data)) > 0 {
			if err := yaml.Unmarshal(data, &n); err != nil {
				return 0, fmt.Errorf("tenant_plans.file %s: %w", c.PlansFile, err)
			}
		}
		list, problems = readAssignments(&n)
	}
	m, more := assign(c.Plans, inline, list, c.PlansFile)
	problems = append(problems, more...)
	if len(problems) > 0 {
		for i, p := range problems {
			if !strings.HasPrefix(p, c.PlansFile) {
				problems[i] = c.PlansFile + ": " + p
			}
		}
		if len(problems) > 20 {
			problems = append(problems[:20], fmt.Sprintf("%s: and %d more", c.PlansFile, len(problems)-20))
		}
		return 0, &Error{Name: "tenant_plans.file " + c.PlansFile, Problems: problems}
	}
	c.assigned = m
	return len(list), nil
}

// WithAssignments returns a copy of c whose tenant_plans.file assignments are data, the file's
// new content; c is unchanged. Every problem (an unknown plan, a tenant listed twice) names the
// file and the line, and leaves c in force.
func (c *Config) WithAssignments(data []byte) (*Config, error) {
	if c.PlansFile == "" {
		return nil, errors.New("config: tenant_plans.file is not set")
	}
	inline, problems := assign(c.Plans, nil, c.File.TenantPlans.Table, "tenant_plans.table")
	if len(problems) > 0 {
		return nil, &Error{Name: "tenant_plans.table", Problems: problems}
	}
	d := *c
	if _, err := d.loadAssignments(data, inline); err != nil {
		return nil, err
	}
	return &d, nil
}

// assign builds the tenant -> plan map of list on top of base (which it copies); where names
// where list was read, for messages.
func assign(plans map[string]*Plan, base map[string]*Plan, list Assignments, where string) (map[string]*Plan, []string) {
	m := make(map[string]*Plan, len(base)+len(list))
	for k, v := range base {
		m[k] = v
	}
	var problems []string
	lines := make(map[string]int, len(list))
	for _, a := range list {
		key := fmt.Sprintf("%s[%s]", where, truncate(a.Tenant, 64))
		if a.Line > 0 && !strings.HasPrefix(where, "tenant_plans.") {
			key = fmt.Sprintf("%s:%d: tenant %q", where, a.Line, truncate(a.Tenant, 64))
		}
		p, ok := plans[a.Plan]
		switch {
		case a.Tenant == "":
			problems = append(problems, key+": the tenant must not be empty")
			continue
		case !ok:
			problems = append(problems, fmt.Sprintf("%s: %q is not a plan under plans", key, truncate(a.Plan, 64)))
			continue
		}
		if l, dup := lines[a.Tenant]; dup {
			problems = append(problems, fmt.Sprintf("%s: listed twice (first on line %d)", key, l))
			continue
		}
		if _, dup := base[a.Tenant]; dup {
			problems = append(problems, key+": already assigned by tenant_plans.table")
			continue
		}
		lines[a.Tenant] = a.Line
		m[a.Tenant] = p
	}
	return m, problems
}

// samePlanShapes requires that the plans agree, window by window of each dimension, on the
// algorithm (and a sliding window's period, a quota's calendar): a bucket is the rule's, the
// tenant's, the dimension's and the window's, whatever the plan, so that a tenant moving to
// another plan keeps what it spent; the new plan's amounts then apply to it. A different
// algorithm would be another bucket, a different sub-window length a mix of two.
func samePlanShapes(names []string, plans map[string]*Plan) []error {
	type slot struct {
		d provider.Dimension
		w uint8
	}
	first := map[slot]string{}
	var errs []error
	for _, name := range names {
		for _, l := range plans[name].Limits {
			s := slot{l.Dim, l.Window}
			other, seen := first[s]
			if !seen {
				first[s] = name
				continue
			}
			var o *DimLimit
			for i := range plans[other].Limits {
				if ol := &plans[other].Limits[i]; ol.Dim == l.Dim && ol.Window == l.Window {
					o = ol
				}
			}
			key := fmt.Sprintf("plans.%s.%s", name, l.Dim)
			if l.Window > 0 {
				key = fmt.Sprintf("%s[%d]", key, l.Window)
			}
			switch {
			case o.Algorithm != l.Algorithm || o.Calendar != l.Calendar:
				errs = append(errs, fmt.Errorf("%s: %s differs from plans.%s's %s: plans may differ in amounts, not in algorithms (a tenant moving between them would start a new bucket)",
					key, algorithmName(&l.Limit), other, algorithmName(&o.Limit)))
			case l.Algorithm == bucket.SlidingWindow && o.Period != l.Period:
				errs = append(errs, fmt.Errorf("%s: a sliding window of %v, plans.%s's is of %v: a tenant moving between them would mix sub-windows of two lengths",
					key, l.Period, other, o.Period))
			}
		}
	}
	return errs
}

func algorithmName(l *Limit) string {
	switch l.Algorithm {
	case bucket.SlidingWindow:
		return "sliding_window"
	case bucket.Quota:
		if l.Calendar == bucket.Month {
			return "a monthly quota"
		}
		return "a daily quota"
	}
	return "token_bucket"
}
