package config

import (
	"os"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// A lease whose release never comes expires after lease_ttl, which must equal the longest a
// response may take: the route timeout. The default is envoy/envoy.yaml's longest route timeout
// (the README says so under Deploying); a change to either must change both.
func TestDefaultLeaseTTLIsTheRouteTimeout(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		t.Fatal(err)
	}
	var longest time.Duration
	routes := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["route"].(map[string]any); ok && v["match"] != nil {
				routes++
				s, _ := r["timeout"].(string)
				d, err := time.ParseDuration(s)
				if err != nil {
					t.Errorf("route to %v: timeout %q: Envoy's default (15s) would cut streams short", r["cluster"], s)
				}
				longest = max(longest, d)
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(tree)
	if routes == 0 {
		t.Fatal("no routes found in envoy/envoy.yaml")
	}
	if longest != DefaultLeaseTTL {
		t.Errorf("DefaultLeaseTTL %v, envoy/envoy.yaml's longest route timeout %v: lease_ttl must equal the route timeout", DefaultLeaseTTL, longest)
	}
}
