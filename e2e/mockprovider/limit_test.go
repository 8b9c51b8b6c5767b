package main

import (
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_800_000_000, 0)} }
func limits(tokens, requests int64) map[string]Limits {
	return map[string]Limits{"openai": {Tokens: tokens, Requests: requests}}
}

func TestTokenBucketRefillsContinuously(t *testing.T) {
	t.Parallel()
	c := newClock()
	e := NewEnforcer(TokenBucket, time.Minute, limits(6000, 0), c.now)
	if v := e.Admit("openai", "m", 6000); !v.Admitted {
		t.Fatalf("a full bucket refused its capacity: %+v", v)
	}
	v := e.Admit("openai", "m", 100)
	if v.Admitted || v.Which != "tokens" {
		t.Fatalf("an empty bucket admitted: %+v", v)
	}
	// 100 tokens/s refill: 100 tokens need one second.
	if v.Wait != time.Second {
		t.Fatalf("wait = %v, want 1s", v.Wait)
	}
	c.advance(999 * time.Millisecond)
	if v := e.Admit("openai", "m", 100); v.Admitted {
		t.Fatalf("admitted before the refill: %+v", v)
	}
	c.advance(time.Millisecond)
	if v := e.Admit("openai", "m", 100); !v.Admitted {
		t.Fatalf("refused after the refill: %+v", v)
	}
	if v := e.Admit("openai", "other-model", 6000); !v.Admitted {
		t.Fatalf("models must have their own budgets: %+v", v)
	}
}

func TestTooLargeNeverFits(t *testing.T) {
	t.Parallel()
	for _, mode := range []Mode{TokenBucket, RollingWindow} {
		c := newClock()
		e := NewEnforcer(mode, time.Minute, limits(1000, 0), c.now)
		v := e.Admit("openai", "m", 1001)
		if v.Admitted || !v.TooLarge || v.Wait != 0 {
			t.Errorf("%s: cost over the limit: %+v", mode, v)
		}
		if v := e.Admit("openai", "m", 1000); !v.Admitted {
			t.Errorf("%s: a refused request must not be debited: %+v", mode, v)
		}
	}
}

func TestRollingWindowAdmitsAtMostTheLimitInAnyWindow(t *testing.T) {
	t.Parallel()
	c := newClock()
	e := NewEnforcer(RollingWindow, time.Minute, limits(1000, 0), c.now)
	for i := 0; i < 4; i++ {
		if v := e.Admit("openai", "m", 250); !v.Admitted {
			t.Fatalf("admission %d refused: %+v", i, v)
		}
		c.advance(10 * time.Second)
	}
	// t=40s: 1000 used; the first 250 leaves the window at t=60s.
	v := e.Admit("openai", "m", 200)
	if v.Admitted || v.Wait != 20*time.Second {
		t.Fatalf("want refusal for 20s, got %+v", v)
	}
	// A token bucket would have refilled 666 tokens by now; the window has not.
	c.advance(19 * time.Second)
	if v := e.Admit("openai", "m", 1); v.Admitted {
		t.Fatalf("admitted inside the window: %+v", v)
	}
	c.advance(time.Second)
	if v := e.Admit("openai", "m", 250); !v.Admitted {
		t.Fatalf("refused once the oldest left the window: %+v", v)
	}
	// Needing 400 at t=60: the entries of t=10 and t=20 must leave: wait until t=80.
	if v := e.Admit("openai", "m", 400); v.Admitted || v.Wait != 20*time.Second {
		t.Fatalf("want refusal for 20s, got %+v", v)
	}
	st := e.Admit("openai", "m", 0).Tokens
	if st.Limit != 1000 || st.Remaining != 0 {
		t.Fatalf("state = %+v", st)
	}
}

func TestRequestsLimit(t *testing.T) {
	t.Parallel()
	c := newClock()
	e := NewEnforcer(TokenBucket, time.Minute, limits(0, 2), c.now)
	for i := 0; i < 2; i++ {
		if v := e.Admit("openai", "m", 1_000_000); !v.Admitted || v.HasTokens {
			t.Fatalf("request %d: %+v", i, v)
		}
	}
	v := e.Admit("openai", "m", 1)
	if v.Admitted || v.Which != "requests" || v.Wait != 30*time.Second {
		t.Fatalf("third request: %+v", v)
	}
}

func TestRollingWindowOutOfOrderAdmissions(t *testing.T) {
	t.Parallel()
	c := newClock()
	e := NewEnforcer(RollingWindow, time.Minute, limits(1000, 0), c.now)
	t0 := c.t
	if v := e.AdmitAt("openai", "m", 400, t0.Add(2*time.Second)); !v.Admitted {
		t.Fatal(v)
	}
	if v := e.AdmitAt("openai", "m", 400, t0); !v.Admitted {
		t.Fatal(v)
	}
	// At t0+60s the earlier (t0) admission has left; the later one has not.
	if v := e.AdmitAt("openai", "m", 600, t0.Add(time.Minute)); !v.Admitted {
		t.Fatalf("the admission of t0 must have left the window: %+v", v)
	}
	if v := e.AdmitAt("openai", "m", 1, t0.Add(61*time.Second)); v.Admitted || v.Wait != time.Second {
		t.Fatalf("want a wait of 1s for the t0+2s admission to leave, got %+v", v)
	}
}
