package top

import (
	"context"
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
	c := &Client{Base: srv.URL + "/", Now: func() time.Time { now = now.Add(time.Second); return now }}
	scopes := []Scope{{Provider: "openai", Model: "gpt-4o", Tenant: "a", Rule: "r"}, {Provider: "openai", Model: "gpt-4o", Tenant: "b"},
		{Provider: "openai", Model: "o3", Tenant: "b"}}
	snap, cur, err := c.Poll(context.Background(), scopes, Sample{})
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
	if snap.Rates.Known || cur.Decisions["denied"] != 4 {
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
