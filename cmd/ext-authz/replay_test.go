package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

const replayLimits = `
tenant: {source: header, header: x-tenant-id}
rules:
  - name: per-tenant
    per: [tenant]
    tokens: {limit: 30000, period: minute}
    max_wait: 300ms
`

// serve -decision-log writes a line per decision (flushed while the service runs, and on
// SIGTERM), which replay reads back with the same outcomes.
func TestServeDecisionLogThenReplay(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "limits.yaml", replayLimits)
	logPath := filepath.Join(t.TempDir(), "decisions.log")
	p := startProc(t, "-config", cfg, "-decision-log", logPath, "-decision-log-max-bytes", "1000000")
	client := authv3.NewAuthorizationClient(p.dial(t))
	var statuses []int32
	for range 6 {
		resp, err := client.Check(context.Background(), chatRequest("gpt-4o", 9000, map[string]string{"x-tenant-id": "team-a", "authorization": "Bearer sk-serve-secret"}))
		if err != nil {
			t.Fatal(err)
		}
		statuses = append(statuses, resp.GetStatus().GetCode())
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10s of SIGTERM")
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte(`"ev":"decision"`)); n != 6 {
		t.Fatalf("%d decision lines, want 6:\n%s", n, data)
	}
	if bytes.Contains(data, []byte("sk-serve-secret")) || bytes.Contains(data, []byte("Hello there")) {
		t.Errorf("a key or the prompt in the decision log:\n%s", data)
	}
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"replay", "-config", cfg, "-json", logPath}, nil, &out, &errb); err != nil {
		t.Fatalf("replay: %v\n%s", err, errb.String())
	}
	var rep struct {
		Decisions int64 `json:"decisions"`
		Rows      []struct {
			Rule, Tenant          string
			Allowed, Held, Denied int64
		} `json:"rows"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	var admitted, denied int64
	for _, c := range statuses {
		if c == 0 {
			admitted++
		} else {
			denied++
		}
	}
	if rep.Decisions != 6 || len(rep.Rows) != 1 || rep.Rows[0].Allowed+rep.Rows[0].Held != admitted || rep.Rows[0].Denied != denied || denied == 0 {
		t.Errorf("replay %+v; live: %d admitted, %d denied", rep, admitted, denied)
	}
}

// replay's outputs: the table, JSON, an SVG chart and two limits files side by side, on
// generated traffic.
func TestReplayCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gen := filepath.Join(dir, "gen.log")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"replay", "-generate", gen, "-rps", "20", "-duration", "2m", "-tenants-n", "3"}, nil, &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	cfg := writeFile(t, "limits.yaml", replayLimits)
	loose := writeFile(t, "loose.yaml", strings.Replace(replayLimits, "limit: 30000", "limit: 3000000", 1))
	out.Reset()
	svg := filepath.Join(dir, "chart.svg")
	if err := run(context.Background(), []string{"replay", "-config", cfg, "-svg", svg, "-tenants", "t-000,t-001", gen}, nil, &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	table := out.String()
	if !strings.Contains(table, "first refusal") || !strings.Contains(table, "t-001") || strings.Contains(table, "t-002") {
		t.Errorf("table:\n%s", table)
	}
	chart, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(chart, []byte("<svg")) || !bytes.Contains(chart, []byte("<polyline")) || !bytes.Contains(chart, []byte("limit per bucket 500.0/s")) {
		t.Errorf("svg:\n%.600s", chart)
	}
	out.Reset()
	if err := run(context.Background(), []string{"replay", "-config", cfg, "-diff", loose, gen}, nil, &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	if !strings.Contains(out.String(), "denied B") || !strings.Contains(out.String(), "loose.yaml") {
		t.Errorf("diff:\n%s", out.String())
	}
	if err := run(context.Background(), []string{"replay", gen}, nil, &out, &errb); err == nil {
		t.Error("replay without -config: no error")
	}
}

// The README's replay example: its commands, run here, print the rows the README shows and
// draw its chart.
func TestReadmeReplay(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	i := strings.Index(text, "ext-authz replay -generate ten.log")
	if i < 0 {
		t.Fatal("the README's replay example is gone")
	}
	block := text[i:]
	start := strings.Index(block, "```\nreplayed ")
	end := strings.Index(block[start+4:], "```")
	if start < 0 || end < 0 {
		t.Fatal("the README's replay report is gone")
	}
	var want []string
	for _, l := range strings.Split(block[start+4:start+4+end], "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "..." {
			want = append(want, l)
		}
	}
	gen := filepath.Join(t.TempDir(), "ten.log")
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"replay", "-generate", gen, "-rps", "20", "-duration", "10m", "-tenants-n", "4"}, nil, &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	out.Reset()
	svg := filepath.Join(t.TempDir(), "replay.svg")
	if err := run(context.Background(), []string{"replay", "-config", "../../internal/replay/testdata/readme.yaml",
		"-provider-limits", "../../internal/replay/testdata/readme-provider.yaml", "-svg", svg, gen}, nil, &out, &errb); err != nil {
		t.Fatalf("%v %s", err, errb.String())
	}
	chart, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if shown, err := os.ReadFile("../../docs/img/replay.svg"); err != nil || !bytes.Equal(shown, chart) {
		t.Errorf("docs/img/replay.svg is not the chart the README's commands draw (%v): run them again", err)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(out.String(), "\n") {
		got[strings.TrimSpace(l)] = true
	}
	if len(want) < 4 {
		t.Fatalf("the README shows %d lines of the report", len(want))
	}
	for _, l := range want {
		if !got[l] {
			t.Errorf("the README shows %q; the replay printed:\n%s", l, out.String())
		}
	}
}
