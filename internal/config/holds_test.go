package config

import (
	"strings"
	"testing"
	"time"
)

// TestCheckMaxWait: a max_wait above the limit is reported with its key path; one at or below it,
// and any when no limit is known, passes.
func TestCheckMaxWait(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`rules:
- {name: a, tokens: {limit: 10, period: second}, max_wait: 500ms}
- {name: b, tokens: {limit: 10, period: second}}
- {name: c, tokens: {limit: 10, period: second}, max_wait: 900ms}
`), "limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		limit time.Duration
		want  []string
	}{
		{0, nil},
		{time.Second, nil},
		{900 * time.Millisecond, nil},
		{875 * time.Millisecond, []string{"rules[2].max_wait: 900ms cannot be honoured"}},
		{300 * time.Millisecond, []string{"rules[0].max_wait: 500ms cannot be honoured", "rules[2].max_wait: 900ms cannot be honoured"}},
	} {
		err := c.CheckMaxWait(tc.limit, "limits.yaml")
		if len(tc.want) == 0 {
			if err != nil {
				t.Errorf("limit %v: %v", tc.limit, err)
			}
			continue
		}
		e, ok := err.(*Error)
		if !ok || e.Name != "limits.yaml" || len(e.Problems) != len(tc.want) {
			t.Fatalf("limit %v: got %v", tc.limit, err)
		}
		for i, w := range tc.want {
			if !strings.HasPrefix(e.Problems[i], w) {
				t.Errorf("limit %v: problem %q, want prefix %q", tc.limit, e.Problems[i], w)
			}
		}
	}
}
