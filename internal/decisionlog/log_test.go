package decisionlog

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

func sampleDecision() Decision {
	return Decision{
		Time: time.Date(2026, 12, 3, 13, 0, 0, 123456000, time.UTC), Provider: "openai", API: "chat_completions",
		Model: `gpt-4o"\` + "\x01é", Path: "/v1/chat/completions", Tenant: "team-a", Priority: "batch",
		Prompt: 12, Output: 100, OutputUnset: true, Context: 128000, Chars: 80, CacheRead: 3, Exact: false,
		Reason: "content_parts", Decision: "delayed", Outcome: Held, Wait: 12345 * time.Microsecond,
		Rules: "gpt-4o,tenants", Limit: "tenants tokens", ReservationID: "abc-1",
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	d := sampleDecision()
	var ev Event
	if err := Parse(AppendDecision(nil, &d), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.IsSettlement {
		t.Fatal("a decision read as a settlement")
	}
	d.Model = `gpt-4o"\` + "\x01é"
	if diff := cmp.Diff(d, ev.Decision); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
	s := Settlement{Time: d.Time.Add(time.Second), ReservationID: "abc-1", Provider: "openai", Model: "gpt-4o",
		Status: 200, Local: true, Found: true, Input: 12, Output: 40, CacheRead: 2, CacheWrite: 1, Total: 52}
	if err := Parse(AppendSettlement(nil, &s), &ev); err != nil {
		t.Fatal(err)
	}
	if !ev.IsSettlement {
		t.Fatal("a settlement read as a decision")
	}
	if diff := cmp.Diff(s, ev.Settlement); diff != "" {
		t.Errorf("settlement (-want +got):\n%s", diff)
	}
}

func TestParseRejects(t *testing.T) {
	t.Parallel()
	for _, line := range []string{
		``, `[]`, `{"ev":"decision"}`, `{"ev":"other","ts":"2026-12-03T13:00:00Z"}`,
		`{"ev":"decision","ts":"2026-12-03T13:00:00Z","prompt":"x"}`, `{"ev":"decision" "ts":"x"}`,
	} {
		var ev Event
		if err := Parse([]byte(line), &ev); err == nil {
			t.Errorf("Parse(%q): no error", line)
		}
	}
}

func TestEncodingIsValidJSONWithInvalidUTF8(t *testing.T) {
	t.Parallel()
	d := sampleDecision()
	d.Tenant = "t\xffx"
	line := AppendDecision(nil, &d)
	if !bytes.Contains(line, []byte(`"tenant":"t\ufffdx"`)) {
		t.Errorf("invalid UTF-8 not replaced: %s", line)
	}
}

// TestDropAndCount fills a writer whose goroutine cannot write (its output blocks) and checks
// that recording neither blocks nor loses count.
func TestDropAndCount(t *testing.T) {
	t.Parallel()
	blocked := &blockingWriter{release: make(chan struct{})}
	reg := prometheus.NewRegistry()
	l, err := Open(Options{Path: "-", Stdout: blocked, Buffer: 4, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	d := sampleDecision()
	// The writer takes at most one record out of the channel and blocks writing it (after its
	// 64 KiB buffer fills: a record of about 400 bytes each); the buffer holds 4 more.
	const n = 1000
	done := make(chan struct{})
	go func() {
		for range n {
			l.Decision(&d)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Decision blocked with the writer stuck")
	}
	dropped := l.Dropped()
	if dropped == 0 || dropped >= n {
		t.Fatalf("dropped %d of %d", dropped, n)
	}
	close(blocked.release)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	lines := bytes.Count(blocked.buf.Bytes(), []byte("\n"))
	if uint64(lines)+dropped != n {
		t.Errorf("%d lines written + %d dropped != %d recorded", lines, dropped, n)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "llm_ratelimit_decision_log_dropped_total" {
		t.Fatalf("registered metrics %v, %v", mfs, err)
	}
	if got := mfs[0].GetMetric()[0].GetCounter().GetValue(); got != float64(dropped) {
		t.Errorf("metric %v, Dropped %d", got, dropped)
	}
}

// blockingWriter blocks every Write until release is closed.
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

func TestRotation(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "decisions.log")
	d := sampleDecision()
	size := int64(len(AppendDecision(nil, &d)))
	// Three lines a file, two rotated files kept: 10 lines leave 1 in the file, 3 in each of
	// .1 and .2, and drop the 3 oldest.
	l, err := Open(Options{Path: path, MaxBytes: 3 * size, Keep: 2, Buffer: 100})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		d.Prompt = int64(i)
		l.Decision(&d)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{path: {9}, path + ".1": {6, 7, 8}, path + ".2": {3, 4, 5}}
	for f, prompts := range want {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var got []int64
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var ev Event
			if err := Parse([]byte(line), &ev); err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.Decision.Prompt)
		}
		if diff := cmp.Diff(prompts, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", f, diff)
		}
	}
	if _, err := os.Stat(path + ".3"); !os.IsNotExist(err) {
		t.Errorf("a third rotated file: %v", err)
	}
}

func TestRotationKeepNone(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "decisions.log")
	d := sampleDecision()
	size := int64(len(AppendDecision(nil, &d)))
	l, err := Open(Options{Path: path, MaxBytes: 2 * size, Keep: 0, Buffer: 100})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		l.Decision(&d)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n != 1 {
		t.Errorf("%d lines after rotations keeping none, want 1", n)
	}
	if _, err := os.Stat(path + ".1"); !os.IsNotExist(err) {
		t.Errorf("a rotated file with Keep 0: %v", err)
	}
}

func BenchmarkDecision(b *testing.B) {
	b.ReportAllocs()
	l, err := Open(Options{Path: filepath.Join(b.TempDir(), "d.log"), Buffer: 1 << 16})
	if err != nil {
		b.Fatal(err)
	}
	d := sampleDecision()
	for b.Loop() {
		l.Decision(&d)
	}
	if err := l.Close(); err != nil {
		b.Fatal(err)
	}
}
