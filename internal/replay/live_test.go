package replay

import (
	"bytes"
	"container/heap"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reconcile"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// liveLimits hold, refuse and refund: the settlements decide later decisions.
const liveLimits = `
tenant: {source: header, header: x-tenant-id}
priority:
  classes: {default: {floor: 0}, batch: {floor: 0.2}}
rules:
  - name: per-tenant
    per: [tenant]
    tokens: {limit: 6000, period: minute}
    requests: {limit: 40, period: minute}
    max_wait: 2s
    refund: true
  - name: mini
    match: {model: "gpt-4o-mini"}
    tokens: {limit: 9000, period: minute}
`

// liveRun decides traffic live through the filter and the memory store on a fake clock,
// settles each admitted request through the response path (reconcile's Process, fed as Envoy
// would), and logs everything to a decision log; it returns the log's path.
func liveRun(t *testing.T, c *config.Config, n int) string {
	t.Helper()
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	path := filepath.Join(t.TempDir(), "decisions.log")
	log, err := decisionlog.Open(decisionlog.Options{Path: path, Buffer: 4 * n})
	if err != nil {
		t.Fatal(err)
	}
	store := bucket.NewMemory(bucket.MemoryOptions{Now: clock})
	pricer, err := tokens.New(tokens.Options{DefaultOutputTokens: c.File.Pricing.DefaultOutputTokens})
	if err != nil {
		t.Fatal(err)
	}
	f, err := filter.New(&filter.Policy{Config: c, Estimator: pricer}, filter.Options{Limiter: store, Now: clock,
		Jitter: func() float64 { return 0 }, Sleep: func(context.Context, time.Duration) error { return nil }, Recorder: log})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reconcile.New(reconcile.Options{Store: store, Recorder: log, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var due pendingResponses
	settle := func(p pendingResponse) {
		now = p.at
		st := &fakeStream{msgs: []*extprocv3.ProcessingRequest{
			{MetadataContext: p.md, ObservabilityMode: true, Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
				Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"}}}}}},
			{ObservabilityMode: true, Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{EndOfStream: true,
				Body: []byte(`{"usage":{"prompt_tokens":` + strconv.Itoa(p.prompt) + `,"completion_tokens":` + strconv.Itoa(p.output) +
					`,"total_tokens":` + strconv.Itoa(p.prompt+p.output) + `}}`)}}},
		}}
		if err := rec.Process(st); err != nil {
			t.Fatal(err)
		}
	}
	words := strings.Fields("the quick brown fox jumps over a lazy dog while rate limits hold every budget in check")
	at := now
	for range n {
		at = at.Add(time.Duration(rng.ExpFloat64() * float64(300*time.Millisecond)).Truncate(time.Microsecond))
		for due.Len() > 0 && !due[0].at.After(at) {
			settle(heap.Pop(&due).(pendingResponse))
		}
		now = at
		var prompt strings.Builder
		for range 5 + rng.IntN(200) {
			prompt.WriteString(words[rng.IntN(len(words))])
			prompt.WriteByte(' ')
		}
		model := "gpt-4o"
		if rng.IntN(3) == 0 {
			model = "gpt-4o-mini"
		}
		maxTokens := 50 + rng.IntN(800)
		body := `{"model":"` + model + `","messages":[{"role":"user","content":"` + prompt.String() + `"}],"max_tokens":` + strconv.Itoa(maxTokens) + `}`
		h := map[string]string{":path": "/v1/chat/completions", ":method": "POST", ":authority": "api.openai.com",
			"content-type": "application/json", "x-tenant-id": "team-" + strconv.Itoa(rng.IntN(3)), "authorization": "Bearer sk-live-secret"}
		if rng.IntN(4) == 0 {
			h["x-llm-priority"] = "batch"
		}
		resp, err := f.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Method: "POST", Path: "/v1/chat/completions", Host: "api.openai.com", Headers: h, RawBody: []byte(body)}}}})
		if err != nil {
			t.Fatal(err)
		}
		md := resp.GetDynamicMetadata()
		if md.GetFields()[reservation.MetadataKey] == nil {
			continue
		}
		p := pendingResponse{at: at.Add(time.Duration(200+rng.IntN(8000)) * time.Millisecond),
			md:     &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{reservation.MetadataNamespace: md}},
			prompt: int(md.GetFields()["prompt_tokens"].GetNumberValue()), output: maxTokens * (5 + rng.IntN(60)) / 100}
		heap.Push(&due, p)
	}
	for due.Len() > 0 {
		settle(heap.Pop(&due).(pendingResponse))
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	if log.Dropped() != 0 {
		t.Fatalf("%d records dropped", log.Dropped())
	}
	return path
}

type pendingResponse struct {
	at             time.Time
	md             *corev3.Metadata
	prompt, output int
}

type pendingResponses []pendingResponse

func (q pendingResponses) Len() int           { return len(q) }
func (q pendingResponses) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q pendingResponses) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *pendingResponses) Push(x any)        { *q = append(*q, x.(pendingResponse)) }
func (q *pendingResponses) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// fakeStream is one ext_proc stream as Envoy sends it, in observability mode.
type fakeStream struct {
	grpc.ServerStream
	msgs []*extprocv3.ProcessingRequest
}

func (s *fakeStream) Context() context.Context { return context.Background() }
func (s *fakeStream) Send(*extprocv3.ProcessingResponse) error {
	return nil
}

func (s *fakeStream) Recv() (*extprocv3.ProcessingRequest, error) {
	if len(s.msgs) == 0 {
		return nil, io.EOF
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

// readLog returns the decisions of a log in its order, and its settlements count.
func readLog(t *testing.T, path string) ([]decisionlog.Decision, int) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ds []decisionlog.Decision
	settled := 0
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var ev decisionlog.Event
		if err := decisionlog.Parse(line, &ev); err != nil {
			t.Fatal(err)
		}
		if ev.IsSettlement {
			settled++
			continue
		}
		ds = append(ds, ev.Decision)
	}
	return ds, settled
}

func replayFile(t *testing.T, path string, opts Options) (*Report, []decisionlog.Decision) {
	t.Helper()
	var got []decisionlog.Decision
	opts.Each = func(_, replayed *decisionlog.Decision) { got = append(got, *replayed) }
	e, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := e.Read(f, path); err != nil {
		t.Fatal(err)
	}
	return e.Finish(), got
}

// Replaying a live run's log against the same limits reproduces its decisions. With a fake
// clock the live run and the replay see the same instants, so the outcomes are all identical
// (the bar for a real clock would be 95%, and tenant totals within 2%), and so are the waits.
func TestReplayReproducesLiveRun(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(liveLimits), "live.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const n = 1500
	path := liveRun(t, c, n)
	live, settlements := readLog(t, path)
	if len(live) != n {
		t.Fatalf("%d decisions logged, want %d", len(live), n)
	}
	counts := map[string]int{}
	for _, d := range live {
		counts[d.Outcome]++
	}
	if counts[decisionlog.Allowed] == 0 || counts[decisionlog.Held] == 0 || counts[decisionlog.Denied] == 0 || settlements == 0 {
		t.Fatalf("live outcomes %v, %d settlements: the test needs every outcome and settlements", counts, settlements)
	}
	t.Logf("live: %v, %d settlements", counts, settlements)
	rep, got := replayFile(t, path, Options{Config: c})
	if len(got) != n {
		t.Fatalf("replayed %d decisions, want %d", len(got), n)
	}
	same := 0
	liveTotals := map[string][3]int{}
	for i := range live {
		l, r := &live[i], &got[i]
		// The log keeps waits to the microsecond.
		if l.Outcome == r.Outcome && (l.Wait-r.Wait).Abs() < time.Microsecond && l.Limit == r.Limit && l.Rules == r.Rules {
			same++
		} else if same+5 > i {
			t.Logf("decision %d at %s: live %s %v %q, replay %s %v %q", i, l.Time.Format(time.StampMicro), l.Outcome, l.Wait, l.Limit, r.Outcome, r.Wait, r.Limit)
		}
		tt := liveTotals[l.Tenant]
		switch l.Outcome {
		case decisionlog.Allowed:
			tt[0]++
		case decisionlog.Held:
			tt[1]++
		default:
			tt[2]++
		}
		liveTotals[l.Tenant] = tt
	}
	if same != n {
		t.Errorf("%d of %d decisions identical (outcome, wait, refusing limit), want all with a fake clock", same, n)
	}
	for tenant, want := range liveTotals {
		r := rep.Tenants[tenant]
		if r == nil || [3]int{int(r.Allowed), int(r.Held), int(r.Denied)} != want {
			t.Errorf("tenant %s: replay %+v, live allowed/held/denied %v", tenant, r, want)
		}
	}
	if rep.Settled != int64(settlements) {
		t.Errorf("%d settlements applied, %d logged", rep.Settled, settlements)
	}
}

// The same log and limits give the same report, byte for byte, whatever the options; other
// limits give another.
func TestReplayIsDeterministic(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(liveLimits), "live.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := liveRun(t, c, 600)
	prov, err := ParseProviderLimits([]byte("limits: [{provider: openai, model: 'gpt-4o*', tokens_per_minute: 5000}]"), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, opts := range []Options{
		{Config: c},
		{Config: c, Speed: 2},
		{Config: c, Tenants: map[string]bool{"team-1": true}},
		{Config: c, Provider: prov, Speed: 3},
	} {
		var out [2][]byte
		for i := range out {
			rep, _ := replayFile(t, path, opts)
			j, err := rep.JSON()
			if err != nil {
				t.Fatal(err)
			}
			var tbl, svg bytes.Buffer
			if err := rep.WriteTable(&tbl); err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteSVG(&svg); err != nil {
				t.Fatal(err)
			}
			out[i] = append(append(j, tbl.Bytes()...), svg.Bytes()...)
		}
		if !bytes.Equal(out[0], out[1]) {
			t.Errorf("speed %v tenants %v: two replays differ", opts.Speed, opts.Tenants)
		}
	}
	base, _ := replayFile(t, path, Options{Config: c})
	fast, _ := replayFile(t, path, Options{Config: c, Speed: 4})
	if fast.Tenants["team-0"].Denied <= base.Tenants["team-0"].Denied {
		t.Errorf("4x the rate: %d denials, at 1x %d: compressing the traffic must refuse more",
			fast.Tenants["team-0"].Denied, base.Tenants["team-0"].Denied)
	}
	only, _ := replayFile(t, path, Options{Config: c, Tenants: map[string]bool{"team-1": true}})
	if len(only.Tenants) != 1 || only.Tenants["team-1"] == nil {
		t.Errorf("tenants %v, want team-1 alone", only.Tenants)
	}
	loose, err := config.Parse([]byte(strings.ReplaceAll(liveLimits, "limit: 6000", "limit: 600000")), "loose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lrep, _ := replayFile(t, path, Options{Config: loose})
	if lrep.Tenants["team-0"].Denied >= base.Tenants["team-0"].Denied {
		t.Errorf("100x the tenant budget: %d denials, with the recorded limits %d", lrep.Tenants["team-0"].Denied, base.Tenants["team-0"].Denied)
	}
}

// A provider whose own limit is below what the limits let through would have sent 429s; one
// above it none.
func TestProviderLimits(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(liveLimits), "live.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := liveRun(t, c, 600)
	count := func(tpm int) int64 {
		p, err := ParseProviderLimits([]byte("limits: [{provider: openai, tokens_per_minute: "+strconv.Itoa(tpm)+"}]"), "p.yaml")
		if err != nil {
			t.Fatal(err)
		}
		rep, _ := replayFile(t, path, Options{Config: c, Provider: p})
		var n int64
		for _, row := range rep.Rows {
			if row.Rule == "per-tenant" {
				n += row.Provider429
			}
		}
		return n
	}
	if n := count(4000); n == 0 {
		t.Error("a provider limit of 4000 tokens a minute, under the tenants' 3 x 6000: no 429")
	}
	if n := count(1_000_000); n != 0 {
		t.Errorf("a provider limit far above the limits: %d 429s", n)
	}
	if _, err := ParseProviderLimits([]byte("limits: [{provider: openai, tpm: 5}]"), "bad.yaml"); err == nil {
		t.Error("an unknown key accepted")
	}
	if _, err := ParseProviderLimits([]byte("limits: [{provider: openai}]"), "bad.yaml"); err == nil {
		t.Error("an entry without limits accepted")
	}
}

// The logs of two replicas, merged by time, replay as the one log they were cut from.
func TestReplayMergesReplicas(t *testing.T) {
	t.Parallel()
	c, err := config.Parse([]byte(liveLimits), "live.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := liveRun(t, c, 600)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Replica A made team-0's decisions, B the others'; each settled its own.
	var a, b bytes.Buffer
	onA := map[string]bool{}
	for _, line := range bytes.SplitAfter(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var ev decisionlog.Event
		if err := decisionlog.Parse(line, &ev); err != nil {
			t.Fatal(err)
		}
		toA := ev.Decision.Tenant == "team-0"
		if ev.IsSettlement {
			toA = onA[ev.Settlement.ReservationID]
		} else if toA {
			onA[ev.Decision.ReservationID] = true
		}
		if toA {
			a.Write(line)
		} else {
			b.Write(line)
		}
	}
	if a.Len() == 0 || b.Len() == 0 {
		t.Fatal("a replica without lines: the test must merge two")
	}
	whole, _ := replayFile(t, path, Options{Config: c})
	e, err := New(Options{Config: c})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Merge([]io.Reader{&b, &a}, []string{"b", "a"}); err != nil {
		t.Fatal(err)
	}
	merged := e.Finish()
	for tenant, w := range whole.Tenants {
		if g := merged.Tenants[tenant]; g == nil || *g != *w {
			t.Errorf("tenant %s: merged %+v, whole %+v", tenant, g, w)
		}
	}
	if merged.Settled != whole.Settled || merged.Decisions != whole.Decisions {
		t.Errorf("merged %d decisions and %d settlements, whole %d and %d", merged.Decisions, merged.Settled, whole.Decisions, whole.Settled)
	}
}
