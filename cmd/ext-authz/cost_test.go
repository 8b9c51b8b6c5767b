package main

import (
	"context"
	"strings"
	"testing"
)

// estimate shows what a request's money budget reserves: the most it can cost.
func TestEstimateShowsReservedSpend(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "limits.yaml", `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: gpt-4o
    match: {provider: openai, model: "gpt-4o*"}
    tokens: {limit: 30000, period: minute}
  - name: team-budget
    per: [tenant]
    cost: {limit: 250, currency: USD, period: month, timezone: Europe/Paris}
`)
	// 8 prompt tokens at 2.50 and 100 output at 10 USD per million: 0.00102 USD.
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}],"max_tokens":100}`
	var out, errb strings.Builder
	if err := run(context.Background(), []string{"estimate", "-config", cfg, "-H", "x-tenant-id: team-a"}, strings.NewReader(body), &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	for _, want := range []string{"rules           gpt-4o, team-budget",
		"reserved spend  0.00102 USD (input 2.50, cache write 2.50, output 10.00 USD per million tokens)",
		`"team-budget:$|t6:team-a"  -     quota         250000000  month (Europe/Paris)  250000000  1020`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	body = `{"model":"gpt-unlisted","messages":[],"max_tokens":1}`
	if err := run(context.Background(), []string{"estimate", "-config", cfg}, strings.NewReader(body), &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "no price for the model under the cost limit of rule team-budget") ||
		!strings.Contains(out.String(), "refused before any is taken") {
		t.Errorf("unpriced:\n%s", out.String())
	}
}
