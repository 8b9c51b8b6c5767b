package filter

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// A request carrying an API key (the tenant, with tenant.source api_key), other credentials and
// a prompt produces log lines holding none of them: the tenant is the key's salted hash, and
// the reservation id in the answer's metadata is the one the line names.
func TestDecisionLogHoldsNoSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	salt := filepath.Join(dir, "salt")
	if err := os.WriteFile(salt, []byte("a-secret-salt-of-enough-bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse([]byte("tenant: {source: api_key, key_salt_file: "+salt+"}\n"+
		"rules: [{name: per-key, per: [tenant], tokens: {limit: 100000, period: minute}, requests: {limit: 2, period: minute}}]\n"), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "decisions.log")
	log, err := decisionlog.Open(decisionlog.Options{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(policyFor(t, c), Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{}), Recorder: log})
	if err != nil {
		t.Fatal(err)
	}
	const key, prompt, cookie = "sk-proj-AAAAsecretalpha", "my very private prompt about the merger", "session=cookiesecret"
	body := `{"model":"gpt-4o","messages":[{"role":"user","content":"` + prompt + `"}],"max_tokens":5}`
	var rids []string
	for range 3 {
		resp, err := f.Check(context.Background(), hostileRequest("/v1/chat/completions?key=querysecret", []byte(body),
			map[string]string{"authorization": "Bearer " + key, "cookie": cookie, "x-tenant-id": "headersecret"}))
		if err != nil {
			t.Fatal(err)
		}
		if id := resp.GetDynamicMetadata().GetFields()[reservation.MetadataIDKey].GetStringValue(); id != "" {
			rids = append(rids, id)
		}
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), data)
	}
	for _, secret := range []string{key, "secretalpha", "a-secret-salt", "private prompt", "merger", "cookiesecret", "querysecret", "headersecret"} {
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%q in the decision log:\n%s", secret, data)
		}
	}
	var outcomes, logged []string
	for _, l := range lines {
		var ev decisionlog.Event
		if err := decisionlog.Parse([]byte(l), &ev); err != nil {
			t.Fatal(err)
		}
		d := ev.Decision
		if d.Tenant != c.KeyTenant(key) || d.Path != "/v1/chat/completions" || d.Model != "gpt-4o" || d.Output != 5 || d.Prompt == 0 || !d.Exact {
			t.Errorf("line %s", l)
		}
		outcomes = append(outcomes, d.Outcome)
		if d.ReservationID != "" {
			logged = append(logged, d.ReservationID)
		}
	}
	if want := []string{"allowed", "allowed", "denied"}; !equal(outcomes, want) {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
	if len(rids) != 2 || !equal(rids, logged) {
		t.Errorf("metadata ids %v, logged %v: want the two admitted decisions' ids in both", rids, logged)
	}
}

// Without a Recorder no reservation id is made.
func TestNoRecorderNoReservationID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	resp := e.check(t, "chat")
	if resp.GetDynamicMetadata().GetFields()[reservation.MetadataKey] == nil {
		t.Fatal("no reservation: the test must see an admitted, reserved decision")
	}
	if _, ok := resp.GetDynamicMetadata().GetFields()[reservation.MetadataIDKey]; ok {
		t.Error("a reservation id without a decision log")
	}
}

// A bare filter decides as a whole one does, with the same metadata, and answers without the
// rate-limit headers and denial bodies that only a client reads.
func TestBareAnswersDecideTheSame(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte("rules: [{name: r, tokens: {limit: 1000, period: minute}, requests: {limit: 3, period: minute}}]\n"), t.Name())
	if err != nil {
		t.Fatal(err)
	}
	var fs [2]*Filter
	for i := range fs {
		fs[i], err = New(policyFor(t, c), Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{}), Bare: i == 1})
		if err != nil {
			t.Fatal(err)
		}
	}
	body := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}],"max_tokens":100}`)
	denied := 0
	for n := range 5 {
		whole, err := fs[0].Check(context.Background(), hostileRequest("/v1/chat/completions", body, nil))
		if err != nil {
			t.Fatal(err)
		}
		bare, err := fs[1].Check(context.Background(), hostileRequest("/v1/chat/completions", body, nil))
		if err != nil {
			t.Fatal(err)
		}
		if whole.GetStatus().GetCode() != bare.GetStatus().GetCode() {
			t.Fatalf("request %d: whole %v, bare %v", n, whole.GetStatus(), bare.GetStatus())
		}
		wm, bm := whole.GetDynamicMetadata().GetFields(), bare.GetDynamicMetadata().GetFields()
		for _, k := range []string{"decision", "cost", "prompt_tokens", "output_tokens", "rules"} {
			if wm[k].String() != bm[k].String() {
				t.Errorf("request %d: metadata %s whole %v, bare %v", n, k, wm[k], bm[k])
			}
		}
		extra := len(bare.GetOkResponse().GetResponseHeadersToAdd())
		for _, h := range bare.GetDeniedResponse().GetHeaders() {
			if h.GetHeader().GetKey() != "content-type" {
				extra++
			}
		}
		if extra != 0 || bare.GetDeniedResponse().GetBody() != "" {
			t.Errorf("request %d: the bare answer has headers or a body: %v", n, bare)
		}
		if d := whole.GetDeniedResponse(); d != nil {
			denied++
			if len(d.GetHeaders()) == 0 || d.GetBody() == "" {
				t.Errorf("request %d: the whole denial lacks its headers or body", n)
			}
		} else if len(whole.GetOkResponse().GetResponseHeadersToAdd()) == 0 {
			t.Errorf("request %d: the whole answer has no rate-limit headers", n)
		}
	}
	if denied != 2 {
		t.Errorf("%d denied, want 2 (3 requests a minute)", denied)
	}
}
