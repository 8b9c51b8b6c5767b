package filter

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

var update = flag.Bool("update", false, "rewrite testdata/responses from the current answers")

// clock is a manual clock shared by the store and the filter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	f     *Filter
	clock *clock
	store *bucket.Memory
}

func policyFor(t testing.TB, c *config.Config) *Policy {
	t.Helper()
	p := c.File.Pricing
	opts := tokens.Options{DefaultOutputTokens: p.DefaultOutputTokens, FallbackEncoding: p.FallbackEncoding,
		OpenAI: openai.Settings{AzureDeployments: p.AzureDeployments}, Providers: c.Hosts}
	for _, m := range p.OutputTokens {
		opts.OutputRules = append(opts.OutputRules, tokens.OutputRule{Model: m.Model, Tokens: m.Tokens})
	}
	est, err := tokens.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return &Policy{Config: c, Estimator: est}
}

func newEnv(t testing.TB, yaml string, opts Options) *env {
	t.Helper()
	var c *config.Config
	var err error
	if yaml == "" {
		c, err = config.Load("testdata/limits.yaml")
	} else {
		c, err = config.Parse([]byte(yaml), t.Name())
	}
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	store := bucket.NewMemory(bucket.MemoryOptions{Now: clk.Now})
	if opts.Limiter == nil {
		opts.Limiter = store
	}
	if opts.Now == nil {
		opts.Now = clk.Now
	}
	if opts.Jitter == nil {
		opts.Jitter = func() float64 { return 0 }
	}
	f, err := New(policyFor(t, c), opts)
	if err != nil {
		t.Fatal(err)
	}
	return &env{f: f, clock: clk, store: store}
}

func loadRequest(t testing.TB, name string) *authv3.CheckRequest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata/requests", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(data, req); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return req
}

func (e *env) check(t testing.TB, name string) *authv3.CheckResponse {
	t.Helper()
	return e.answer(t, context.Background(), loadRequest(t, name)).Response()
}

// answer decides req as the service does (CheckBytes of its encoding) and checks the answer's
// encoding (checkEncoding).
func (e *env) answer(t testing.TB, ctx context.Context, req *authv3.CheckRequest) *Answer {
	t.Helper()
	data, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	a, err := e.f.CheckBytes(ctx, data)
	if err != nil {
		t.Fatalf("CheckBytes: %v", err)
	}
	checkEncoding(t, a)
	return a
}

func decision(resp *authv3.CheckResponse) string { return decisionOf(resp) }

// decisionOf reads the decision back from a CheckResponse's metadata.
func decisionOf(resp *authv3.CheckResponse) string {
	if v, ok := resp.GetDynamicMetadata().GetFields()["decision"]; ok {
		return v.GetStringValue()
	}
	return ""
}

func headerOf(resp *authv3.CheckResponse, key string) string {
	var hs []*corev3.HeaderValueOption
	if ok := resp.GetOkResponse(); ok != nil {
		hs = ok.GetResponseHeadersToAdd()
	} else {
		hs = resp.GetDeniedResponse().GetHeaders()
	}
	for _, h := range hs {
		if h.GetHeader().GetKey() == key {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}

// TestCheckGolden calls Check with the testdata requests, after some requests that set the
// buckets up, and compares whole answers with testdata/responses.
func TestCheckGolden(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   []string
		request string
		want    string // decision
	}{
		{"chat_allowed", nil, "chat", decisionAllowed},
		{"chat_denied", []string{"chat_big"}, "chat_big", decisionDenied},
		{"chat_too_large", nil, "chat_huge", decisionTooLarge},
		{"chat_string_body", nil, "chat_string_body", decisionAllowed},
		{"tenant_share_denied", []string{"chat_team"}, "chat_team", decisionDenied},
		{"batch_floor_denied", []string{"chat_batch"}, "chat_batch", decisionDenied},
		{"shadow_rule", nil, "chat_trial", decisionAllowed},
		{"completions", nil, "completions", decisionAllowed},
		{"responses", nil, "responses", decisionAllowed},
		{"embeddings", nil, "embeddings", decisionAllowed},
		{"azure", nil, "azure", decisionAllowed},
		{"messages", nil, "messages", decisionAllowed},
		{"messages_denied", []string{"messages_big"}, "messages_big", decisionDenied},
		{"route_limit", nil, "route_limit", decisionAllowed},
		{"route_limit_denied", []string{"route_limit"}, "route_limit", decisionDenied},
		{"route_bad", nil, "route_bad", decisionBadRoute},
		{"not_json", nil, "not_json", decisionTooLarge}, // UTF-16 garbage: the upper bound
		{"models", nil, "models", decisionAllowed},      // an unpriced API: counted by request limits only
		{"spend_allowed", nil, "chat_spend", decisionAllowed},
		{"spend_spent", []string{"chat_spend"}, "chat_spend", decisionSpent}, // a money budget
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "", Options{})
			for _, s := range tc.setup {
				e.check(t, s)
			}
			got := e.check(t, tc.request)
			if d := decision(got); d != tc.want {
				t.Errorf("decision = %q, want %q", d, tc.want)
			}
			path := filepath.Join("testdata/responses", tc.name+".json")
			if *update {
				data, err := protojson.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(got)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/filter -run TestCheckGolden -update, then review the diff)", err)
			}
			want := &authv3.CheckResponse{}
			if err := protojson.Unmarshal(data, want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

// Every header is set with OVERWRITE_IF_EXISTS_OR_ADD, so that no Envoy version appends a copy.
func TestHeadersOverwrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	for _, name := range []string{"chat", "chat_big", "chat_big", "chat_huge", "route_bad"} {
		resp := e.check(t, name)
		hs := resp.GetDeniedResponse().GetHeaders()
		if ok := resp.GetOkResponse(); ok != nil {
			hs = ok.GetResponseHeadersToAdd()
		}
		if len(hs) == 0 {
			t.Errorf("%s: no headers", name)
		}
		for _, h := range hs {
			if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD {
				t.Errorf("%s: header %s has %v", name, h.GetHeader().GetKey(), h.GetAppendAction())
			}
		}
	}
}

// Waiting exactly the advertised Retry-After lets the same request through; waiting 5% less
// does not.
func TestRetryAfterIsExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	e.check(t, "chat_big")
	resp := e.check(t, "chat_big")
	if decision(resp) != decisionDenied {
		t.Fatalf("second request: %s", decision(resp))
	}
	ms, err := strconv.Atoi(headerOf(resp, "retry-after-ms"))
	if err != nil || ms <= 0 {
		t.Fatalf("retry-after-ms = %q", headerOf(resp, "retry-after-ms"))
	}
	secs, _ := strconv.Atoi(headerOf(resp, "retry-after"))
	if want := (ms + 999) / 1000; secs != want {
		t.Errorf("retry-after = %d, want %d (ceil of %d ms)", secs, want, ms)
	}
	wait := time.Duration(ms) * time.Millisecond
	e.clock.Add(wait * 95 / 100)
	if d := decision(e.check(t, "chat_big")); d != decisionDenied {
		t.Fatalf("after 95%% of the wait: %s", d)
	}
	e.clock.Add(wait - wait*95/100)
	if d := decision(e.check(t, "chat_big")); d != decisionAllowed {
		t.Fatalf("after the whole wait: %s", d)
	}
}

// The priority floor keeps the last part of a bucket for interactive traffic.
func TestPriorityFloor(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	e.check(t, "chat_batch")
	if d := decision(e.check(t, "chat_batch")); d != decisionDenied {
		t.Fatalf("second batch request: %s", d)
	}
	if d := decision(e.check(t, "chat_team")); d != decisionAllowed {
		t.Fatalf("interactive request after batch was denied: %s", d)
	}
}

func TestJitterLengthensRetryAfter(t *testing.T) {
	t.Parallel()
	yaml := "response: {retry_jitter: 0.5}\nrules: [{name: r, requests: {limit: 1, period: minute}}]\n"
	e := newEnv(t, yaml, Options{Jitter: func() float64 { return 1 }})
	e.check(t, "chat")
	resp := e.check(t, "chat")
	if got := headerOf(resp, "retry-after-ms"); got != "90000" {
		t.Errorf("retry-after-ms = %s, want 90000 (60s + 50%%)", got)
	}
}

func TestNotHTTPIsAnRPCError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "", Options{})
	_, err := e.f.Check(context.Background(), &authv3.CheckRequest{})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("err = %v", err)
	}
}

// A request within max_wait is held for the advertised wait, then allowed; one whose wait does
// not fit in the ext_authz deadline is denied at once.
func TestMaxWaitHolds(t *testing.T) {
	t.Parallel()
	yaml := "rules: [{name: r, requests: {limit: 2, period: second}, max_wait: 1s}]\n"
	c, err := config.Parse([]byte(yaml), "hold")
	if err != nil {
		t.Fatal(err)
	}
	// Real time: the hold is a real timer.
	f, err := New(policyFor(t, c), Options{Limiter: bucket.NewMemory(bucket.MemoryOptions{})})
	if err != nil {
		t.Fatal(err)
	}
	req := loadRequest(t, "chat")
	for i := 0; i < 2; i++ {
		if resp, err := f.Check(context.Background(), req); err != nil || decisionOf(resp) != decisionAllowed {
			t.Fatalf("request %d: %v %v", i, decisionOf(resp), err)
		}
	}
	start := time.Now()
	resp, err := f.Check(context.Background(), req)
	took := time.Since(start)
	if err != nil || decisionOf(resp) != decisionDelayed {
		t.Fatalf("third request: %v %v", decisionOf(resp), err)
	}
	if took < 400*time.Millisecond {
		t.Errorf("held only %v; the bucket needed ~500ms to pay", took)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	resp, err = f.Check(ctx, req)
	if err != nil || decisionOf(resp) != decisionDenied {
		t.Fatalf("with a 300ms deadline: %v %v", decisionOf(resp), err)
	}
	if took := time.Since(start); took > 250*time.Millisecond {
		t.Errorf("answer took %v, past the deadline less the margin", took)
	}
	if f.held.Load() != 0 {
		t.Errorf("held count = %d after all requests ended", f.held.Load())
	}
}

// failing is a store that cannot be reached.
type failing struct{}

var errDown = errors.New("dial tcp 127.0.0.1:1: connection refused")

func (failing) Take(context.Context, *bucket.Request) (bucket.Result, error) {
	return bucket.Result{}, errDown
}
func (failing) Adjust(context.Context, string, []bucket.Adjustment) error { return errDown }

func TestStoreFailurePolicies(t *testing.T) {
	t.Parallel()
	rules := "rules: [{name: r, requests: {limit: 4, period: minute}}]\n"
	for _, tc := range []struct {
		mode string
		want []string
	}{
		{"deny", []string{decisionUnavailable, decisionUnavailable, decisionUnavailable}},
		{"allow", []string{decisionFailOpen, decisionFailOpen, decisionFailOpen}},
		// Local share with 2 replicas: 4 / 2 = 2 requests, then denied.
		{"local", []string{decisionLocal, decisionLocal, decisionDenied}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			clk := &clock{t: time.Unix(1e9, 0)}
			e := newEnv(t, "failure: {mode: "+tc.mode+", replicas: 2}\n"+rules, Options{
				Limiter:  failing{},
				Fallback: bucket.NewMemory(bucket.MemoryOptions{Now: clk.Now}),
			})
			for i, want := range tc.want {
				resp := e.check(t, "chat")
				if got := decision(resp); got != want {
					t.Errorf("request %d: %s, want %s", i, got, want)
				}
				if tc.mode == "deny" && resp.GetDeniedResponse().GetStatus().GetCode() != 503 {
					t.Errorf("deny mode status = %v", resp.GetDeniedResponse().GetStatus())
				}
			}
		})
	}
}

// The reset format is OpenAI's, and never shorter than the wait it describes.
func TestResetString(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                     "0s",
		-time.Second:                          "0s",
		28*time.Millisecond + 100:             "29ms",
		time.Second:                           "1s",
		6 * time.Minute:                       "6m0s",
		54*time.Second + 480*time.Millisecond: "54.48s",
	} {
		if got := resetString(d); got != want {
			t.Errorf("resetString(%v) = %q, want %q", d, got, want)
		}
	}
}

// reservationOf decodes the reservation an admitted response carries in its metadata.
func reservationOf(t testing.TB, resp *authv3.CheckResponse) *reservation.Reservation {
	t.Helper()
	r, err := reservation.Decode(resp.GetDynamicMetadata().GetFields()[reservation.MetadataKey].GetStringValue())
	if err != nil {
		t.Fatal(err)
	}
	return r
}
