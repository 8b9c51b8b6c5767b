package config

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// tenant.log and priority.tenants: compiled once, every mistake reported with its key.
func TestIdentityKeys(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`
tenant: {source: header, header: X-Tenant-ID, log: clear}
priority:
  default: interactive
  classes: {interactive: {floor: 0}, batch: {floor: 0.3}}
  tenants:
    - {tenant: "10.1.*", class: batch}
    - {tenant: "*", class: interactive}
`), "ok")
	if err != nil {
		t.Fatal(err)
	}
	if !c.LogClearTenant {
		t.Error("tenant.log: clear not compiled")
	}
	if len(c.TenantClasses) != 2 || c.TenantClasses[0].Class != "batch" || c.TenantClasses[0].Floor != 0.3 ||
		!c.TenantClasses[0].Tenant.Match("10.1.2.3") || c.TenantClasses[0].Tenant.Match("10.2.0.1") {
		t.Errorf("priority.tenants compiled to %+v", c.TenantClasses)
	}
	if d, err := Parse(nil, "default"); err != nil || d.LogClearTenant {
		t.Errorf("the default must log the tenant's hash: %v, %v", d, err)
	}

	_, err = Parse([]byte(`
tenant: {log: plain}
priority:
  tenants:
    - {tenant: "", class: default}
    - {tenant: "a", class: vip}
`), "bad")
	ce, ok := err.(*Error)
	if !ok {
		t.Fatalf("err = %v, want *Error", err)
	}
	want := []string{
		`tenant.log: "plain" is not hash or clear`,
		`priority.tenants[0].tenant: must not be empty`,
		`priority.tenants[1].class: "vip" is not a class under priority.classes`,
	}
	if diff := cmp.Diff(want, ce.Problems); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	if !strings.Contains(err.Error(), "3 problem(s)") {
		t.Errorf("message: %v", err)
	}
}
