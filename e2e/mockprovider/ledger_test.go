package main

import "testing"

// The bill prices each token class at the list price and rounds the request up once.
func TestBill(t *testing.T) {
	for _, tc := range []struct {
		model                             string
		prompt, read, write, output, want int64
	}{
		// 100 x 0.15 + 16 x 0.60 = 15 + 9.6, rounded up.
		{"gpt-4o-mini", 100, 0, 0, 16, 25},
		// 2750 written at 3.75, 50 plain at 3, 16 out at 15: 10312.5 + 150 + 240.
		{"claude-sonnet-4-6", 2800, 0, 2750, 16, 10703},
		// Read instead: 2750 x 0.30 = 825.
		{"claude-sonnet-4-6", 2800, 2750, 0, 16, 1215},
		{"gpt-4o", 10, 0, 0, 0, 25},
	} {
		if got, ok := bill(tc.model, tc.prompt, tc.read, tc.write, tc.output); !ok || got != tc.want {
			t.Errorf("%s %+v: %d, %v; want %d", tc.model, tc, got, ok, tc.want)
		}
	}
	if _, ok := bill("mystery", 1, 0, 0, 1); ok {
		t.Error("an unknown model has a price")
	}
	var l Ledger
	l.Charge("k", "gpt-4o-mini", 100, 0, 0, 16)
	l.Charge("k", "gpt-4o-mini", 100, 0, 0, 16)
	if a := l.byKey["k"]; a.Micros != 50 || a.Requests != 2 {
		t.Errorf("ledger %+v", a)
	}
}
