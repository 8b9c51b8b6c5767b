package top

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Poll asks /v1/buckets once per scope with its parameters, keeps the tenant and model on each
// bucket, shows a bucket not kept per tenant (or per model) once as "*", and reports an admin
// API error with its message.
func TestPoll(t *testing.T) {
	t.Parallel()
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/metrics":
			_, _ = w.Write([]byte("llm_ratelimit_decisions_total{decision=\"denied\",provider=\"openai\",model=\"gpt-4o\"} 4\n"))
		case "/v1/buckets":
			queries = append(queries, r.URL.RawQuery)
			if r.URL.Query().Get("tenant") == "broken" {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"error": "store: unavailable"}`))
				return
			}
			_, _ = w.Write([]byte(`{"buckets": [
				{"rule": "shared", "kind": "requests", "per": ["model"], "limit": 10, "capacity": 10, "remaining": 4},
				{"rule": "mine", "kind": "tokens", "per": ["tenant"], "limit": 100, "capacity": 100, "remaining": 100},
				{"rule": "global", "kind": "tokens", "per": [], "limit": 100, "capacity": 100, "remaining": 100}]}`))
		}
	}))
	defer srv.Close()
	now := time.Unix(100, 0)
	c := &Client{Bases: []string{srv.URL + "/"}, Now: func() time.Time { now = now.Add(time.Second); return now }}
	scopes := []Scope{{Provider: "openai", Model: "gpt-4o", Tenant: "a", Rule: "r"}, {Provider: "openai", Model: "gpt-4o", Tenant: "b"},
		{Provider: "openai", Model: "o3", Tenant: "b"}}
	snap, cur, err := c.Poll(context.Background(), scopes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"model=gpt-4o&provider=openai&rule=r&tenant=a", "model=gpt-4o&provider=openai&tenant=b",
		"model=o3&provider=openai&tenant=b"}; strings.Join(queries, " ") != strings.Join(want, " ") {
		t.Errorf("queries = %q, want %q", queries, want)
	}
	var got []string
	for _, b := range snap.Buckets {
		got = append(got, b.Rule+"/"+b.Tenant+"/"+b.Model)
	}
	if strings.Join(got, " ") != "shared/*/gpt-4o mine/a/* global/*/* mine/b/* shared/*/o3" {
		t.Errorf("buckets = %q", got)
	}
	if snap.Rates.Known || len(cur) != 1 || cur[0].Decisions["denied"] != 4 {
		t.Errorf("first poll: rates %+v, sample %+v", snap.Rates, cur)
	}
	snap, _, err = c.Poll(context.Background(), scopes, cur)
	if err != nil || !snap.Rates.Known || snap.Rates.Denied != 0 {
		t.Errorf("second poll: %v %+v", err, snap.Rates)
	}
	_, _, err = c.Poll(context.Background(), []Scope{{Provider: "openai", Model: "gpt-4o", Tenant: "broken"}}, cur)
	if err == nil || !strings.Contains(err.Error(), "HTTP 503: store: unavailable") {
		t.Errorf("error = %v", err)
	}
}

// With an admin port per replica, the rates, waits held, leases and provider 429s are the sums
// of the replicas that answered, and the buckets (one store) are read from the first of them.
func TestPollSumsReplicas(t *testing.T) {
	t.Parallel()
	var scrapes [2]int
	replica := func(i int, bucketsAsked *int) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/metrics":
				scrapes[i]++
				// Replica i has admitted 10*(i+1) more and denied (i+1) more at each scrape.
				n := scrapes[i] * (i + 1)
				fmt.Fprintf(w, "llm_ratelimit_decisions_total{decision=\"allowed\",provider=\"openai\",model=\"m\"} %d\n", 10*n)
				fmt.Fprintf(w, "llm_ratelimit_decisions_total{decision=\"denied\",provider=\"openai\",model=\"m\"} %d\n", n)
				fmt.Fprintf(w, "llm_ratelimit_held_requests %d\nllm_ratelimit_leases_held %d\n", i+1, 2*(i+1))
			case "/v1/buckets":
				*bucketsAsked++
				_, _ = w.Write([]byte(`{"buckets": [{"rule": "r", "kind": "tokens", "per": [], "limit": 10, "capacity": 10, "remaining": 4}]}`))
			}
		}))
	}
	var asked [2]int
	a, b := replica(0, &asked[0]), replica(1, &asked[1])
	defer a.Close()
	defer b.Close()
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	now := time.Unix(100, 0)
	c := &Client{Bases: []string{down.URL, a.URL, b.URL}, Now: func() time.Time { return now }}
	scopes := []Scope{{Provider: "openai", Model: "m"}}
	snap, cur, err := c.Poll(context.Background(), scopes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Rates.Known || snap.Replicas != 3 || snap.Answered != 2 || len(cur) != 3 || cur[0].Decisions != nil {
		t.Errorf("first poll: %+v, samples %+v", snap, cur)
	}
	now = now.Add(time.Second)
	snap, _, err = c.Poll(context.Background(), scopes, cur)
	if err != nil {
		t.Fatal(err)
	}
	// One second between the samples of each replica: 10+20 admitted, 1+2 denied.
	if want := (Rates{Known: true, Admitted: 30, Denied: 3}); snap.Rates != want {
		t.Errorf("rates %+v, want %+v", snap.Rates, want)
	}
	if snap.Held != 3 || snap.Leases != 6 || len(snap.Buckets) != 1 || asked != [2]int{2, 0} {
		t.Errorf("held %v, leases %v, buckets %+v, bucket reads per replica %v", snap.Held, snap.Leases, snap.Buckets, asked)
	}
	if frame := Render(snap, View{Title: "t"}, 100); !strings.Contains(frame, "admitted 30.0/s  denied 3.0/s  held 3  leases 6  provider 429s 0  replicas 2/3\n") {
		t.Errorf("frame:\n%s", frame)
	}
	if _, _, err := (&Client{Bases: []string{down.URL}}).Poll(context.Background(), scopes, nil); err == nil || !strings.Contains(err.Error(), down.URL) {
		t.Errorf("no replica answering: error %v", err)
	}
}
