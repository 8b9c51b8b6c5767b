package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *clock) Advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

// env is a reconcile server on a loopback gRPC port over a Memory store on a frozen clock.
type env struct {
	store  *bucket.Memory
	clk    *clock
	client extprocv3.ExternalProcessorClient
	// provider is the reservation's tag, whose dialect reads the response ("openai" unless set).
	provider string
}

func newEnv(t *testing.T) *env { return newEnvWith(t, nil) }

// newEnvWith serves through wrap(store) when wrap is not nil, with the options set by each of
// opts.
func newEnvWith(t *testing.T, wrap func(Store) Store, opts ...func(*Options)) *env {
	t.Helper()
	clk := &clock{t: time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)}
	store := bucket.NewMemory(bucket.MemoryOptions{Now: clk.Now})
	var served Store = store
	if wrap != nil {
		served = wrap(store)
	}
	o := Options{Store: served}
	for _, f := range opts {
		f(&o)
	}
	srv, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(g, srv)
	go g.Serve(lis) //nolint:errcheck // stopped by cleanup
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{store: store, clk: clk, client: extprocv3.NewExternalProcessorClient(conn), provider: "openai"}
}

var (
	tpm  = bucket.Spec{Name: "tpm", Limit: 10000, Period: time.Minute}
	rpm  = bucket.Spec{Name: "rpm", Limit: 100, Period: time.Minute}
	live = bucket.Spec{Name: "live", Algorithm: bucket.Concurrency, Limit: 1, Period: 10 * time.Minute}
)

// reserve takes what Check would (1000 tokens, a request, a lease) and returns the reservation.
func (e *env) reserve(t *testing.T, feedback bool) *reservation.Reservation {
	t.Helper()
	r := &reservation.Reservation{Tag: e.provider, Lease: "L1", Model: "gpt-4o", Prompt: 200, Output: 800, Buckets: []reservation.Bucket{
		{Kind: reservation.KindTokens, Feedback: feedback, Refund: true, Spec: withCost(tpm, 1000)},
		{Kind: reservation.KindRequests, Spec: withCost(rpm, 1)},
		{Kind: reservation.KindConcurrency, Spec: withCost(live, 1)},
	}}
	return e.hold(t, r)
}

// hold debits r's buckets as the check path would have, and keeps where a sliding window
// counted them.
func (e *env) hold(t *testing.T, r *reservation.Reservation) *reservation.Reservation {
	t.Helper()
	req := &bucket.Request{Tag: r.Tag, Lease: r.Lease}
	sliding := false
	for _, b := range r.Buckets {
		req.Buckets = append(req.Buckets, b.Spec)
		sliding = sliding || b.Spec.Algorithm == bucket.SlidingWindow
	}
	res, err := e.store.Take(context.Background(), req)
	if err != nil || res.Outcome != bucket.Allowed {
		t.Fatalf("Take: %+v %v", res, err)
	}
	if sliding {
		r.At = res.At
	}
	return r
}

func withCost(s bucket.Spec, c int64) bucket.Spec { s.Cost = c; return s }

func (e *env) remaining(t *testing.T, s bucket.Spec) int64 {
	t.Helper()
	s.Cost = 0
	res, err := e.store.Take(context.Background(), &bucket.Request{Tag: e.provider, Buckets: []bucket.Spec{s}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Buckets[0].Remaining
}

func metadata(r *reservation.Reservation) *corev3.Metadata {
	if r == nil {
		return nil
	}
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{reservation.MetadataNamespace: {Fields: map[string]*structpb.Value{
		reservation.MetadataKey: structpb.NewStringValue(reservation.Encode(r)),
	}}}}
}

func headers(kv ...string) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{}
	for i := 0; i < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm}}}
}

func body(s string, end bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{Body: []byte(s), EndOfStream: end}}}
}

// run sends msgs on one stream (with the reservation's metadata on each, as Envoy does) and
// waits for the server to finish with it. observe selects Envoy's observability mode; otherwise
// every message must be answered.
func (e *env) run(t *testing.T, r *reservation.Reservation, observe bool, msgs ...*extprocv3.ProcessingRequest) {
	t.Helper()
	st, err := e.client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		m = proto.Clone(m).(*extprocv3.ProcessingRequest)
		m.MetadataContext = metadata(r)
		m.ObservabilityMode = observe
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
		if !observe {
			if _, err := st.Recv(); err != nil {
				t.Fatalf("answer: %v", err)
			}
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
}

func TestSettle(t *testing.T) {
	t.Parallel()
	sse := func(events ...string) string { return "data: " + strings.Join(events, "\n\ndata: ") + "\n\n" }
	chunks := func(s string, n int) []*extprocv3.ProcessingRequest {
		var out []*extprocv3.ProcessingRequest
		for len(s) > n {
			out = append(out, body(s[:n], false))
			s = s[n:]
		}
		return append(out, body(s, true))
	}
	openaiSSE := sse(`{"choices":[{"delta":{"content":"hi"}}]}`,
		`{"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":40,"total_tokens":240}}`, `[DONE]`)
	anthropicSSE := "event: message_start\n" + sse(`{"type":"message_start","message":{"usage":{"input_tokens":180,"cache_read_input_tokens":20,"output_tokens":1}}}`) +
		"event: content_block_delta\n" + sse(`{"type":"content_block_delta","delta":{"text":"hi"}}`) +
		"event: message_delta\r\n" + "data: " + `{"type":"message_delta","usage":{"output_tokens":55}}` + "\r\n\r\n"
	for _, tc := range []struct {
		name        string
		msgs        []*extprocv3.ProcessingRequest
		tokens, rpm int64
		leaseFree   bool
		provider    string // the reservation's
	}{
		{"openai_json", []*extprocv3.ProcessingRequest{headers(":status", "200", "content-type", "application/json"),
			body(`{"id":"x","usage":{"prompt_tokens":200,"completion_tokens":100,`, false), body(`"total_tokens":300}}`, true)}, 9700, 99, true, "openai"},
		{"responses_json", []*extprocv3.ProcessingRequest{headers(":status", "200", "content-type", "application/json"),
			body(`{"output":[],"usage":{"input_tokens":150,"output_tokens":50,"total_tokens":200}}`, true)}, 9800, 99, true, "openai"},
		{"openai_sse_split", append([]*extprocv3.ProcessingRequest{headers(":status", "200", "content-type", "text/event-stream; charset=utf-8")},
			chunks(openaiSSE, 7)...), 9760, 99, true, "openai"},
		{"anthropic_sse", append([]*extprocv3.ProcessingRequest{headers(":status", "200", "content-type", "text/event-stream")},
			chunks(anthropicSSE, 13)...), 9745, 99, true, "anthropic"},
		{"overage_charged", []*extprocv3.ProcessingRequest{headers(":status", "200"),
			body(`{"usage":{"prompt_tokens":200,"completion_tokens":1300,"total_tokens":1500}}`, true)}, 8500, 99, true, "openai"},
		{"sse_without_usage_keeps_the_reservation", []*extprocv3.ProcessingRequest{headers(":status", "200", "content-type", "text/event-stream"),
			body(sse(`{"choices":[{"delta":{"content":"hi"}}]}`, `[DONE]`), true)}, 9000, 99, true, "openai"},
		{"upstream_5xx_refunds_the_tokens", []*extprocv3.ProcessingRequest{headers(":status", "500"), body(`{"error":{}}`, true)}, 10000, 99, true, "openai"},
		{"upstream_4xx_keeps_a_quarter", []*extprocv3.ProcessingRequest{headers(":status", "400"), body(`{"error":{}}`, true)}, 9750, 99, true, "openai"},
		{"broken_stream_releases_the_lease", []*extprocv3.ProcessingRequest{headers(":status", "200"), body(`{"usage":`, false)}, 9000, 99, true, "openai"},
		{"headers_only", []*extprocv3.ProcessingRequest{{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", Value: "204"}}}, EndOfStream: true}}}}, 9000, 99, true, "openai"},
	} {
		for _, observe := range []bool{true, false} {
			t.Run(tc.name+map[bool]string{true: "/observability", false: "/streamed"}[observe], func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.provider = tc.provider
				r := e.reserve(t, false)
				e.run(t, r, observe, tc.msgs...)
				if got := e.remaining(t, tpm); got != tc.tokens {
					t.Errorf("tokens remaining %d, want %d", got, tc.tokens)
				}
				if got := e.remaining(t, rpm); got != tc.rpm {
					t.Errorf("requests remaining %d, want %d", got, tc.rpm)
				}
				if got := e.remaining(t, live); got != 1 {
					t.Errorf("in-flight slots %d, want 1: the lease was not released", got)
				}
			})
		}
	}
}

// A sliding window's refund lands in the sub-window its reservation was counted in: once that
// sub-window leaves the window, what the later requests took is still counted, all of it.
func TestSlidingWindowRefundLandsWhereCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	sw := bucket.Spec{Name: "sw", Algorithm: bucket.SlidingWindow, Limit: 10000, Period: time.Minute}
	reserve := func() *reservation.Reservation {
		return e.hold(t, &reservation.Reservation{Tag: "openai", Model: "gpt-4o", Prompt: 200, Output: 800,
			Buckets: []reservation.Bucket{{Kind: reservation.KindTokens, Refund: true, Spec: withCost(sw, 1000)}}})
	}
	first := reserve()
	e.clk.Advance(30 * time.Second)
	reserve()
	// The first request used 300 of its 1000: 700 come back from its own sub-window.
	e.run(t, first, true, headers(":status", "200", "content-type", "application/json"),
		body(`{"usage":{"prompt_tokens":200,"completion_tokens":100,"total_tokens":300}}`, true))
	if got := e.remaining(t, sw); got != 8700 {
		t.Errorf("after the settlement: %d remaining, want 8700", got)
	}
	e.clk.Advance(37 * time.Second)
	if got := e.remaining(t, sw); got != 9000 {
		t.Errorf("once the first request's sub-window has left: %d remaining, want 9000 (the second's 1000 counted)", got)
	}
}

func TestNoReservationIsIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.reserve(t, true)
	e.run(t, nil, false, headers(":status", "429", "retry-after", "30", "x-ratelimit-remaining-tokens", "0"), body(`{}`, true))
	if got := e.remaining(t, tpm); got != 9000 {
		t.Errorf("tokens remaining %d, want 9000 (untouched)", got)
	}
}

// A reservation that cannot be read settles nothing, and says so once, in a metric and a log
// line that carry no text of the metadata (bucket names hold tenant keys).
func TestMalformedReservationIsReported(t *testing.T) {
	t.Parallel()
	m := NewMetrics(prometheus.NewRegistry())
	core, logs := observer.New(zapcore.WarnLevel)
	e := newEnvWith(t, nil, func(o *Options) { o.Metrics, o.Logger = m, zap.New(core) })
	st, err := e.client.Process(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{reservation.MetadataNamespace: {Fields: map[string]*structpb.Value{
		reservation.MetadataKey: structpb.NewStringValue("r1 openai - 1 2 m t t 100 60000 0 1 tenant%zzACME-SECRET"),
	}}}}
	for _, m := range []*extprocv3.ProcessingRequest{headers(":status", "200"), body(`{"usage":{"prompt_tokens":1}}`, true)} {
		m.MetadataContext, m.ObservabilityMode = md, true
		if err := st.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("end of stream: %v", err)
	}
	var c dto.Metric
	if err := m.errors.WithLabelValues(string(reasonMalformed)).Write(&c); err != nil {
		t.Fatal(err)
	}
	if got := c.GetCounter().GetValue(); got != 1 {
		t.Errorf("reservation_malformed errors %v, want 1 (once per stream)", got)
	}
	if logs.Len() != 1 {
		t.Fatalf("%d warn lines, want 1: %v", logs.Len(), logs.All())
	}
	for _, f := range logs.All()[0].Context {
		if strings.Contains(f.String+fmt.Sprint(f.Interface), "ACME") {
			t.Errorf("log field %s carries the metadata's text: %v %v", f.Key, f.String, f.Interface)
		}
	}
}

func TestProviderFeedback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		provider string
		feedback bool
		hdrs     []string
		want     int64
	}{
		// The provider's 12000 limit has 3000 left: 9000 used, so our 10000 keeps 1000; then the
		// usage refunds 1000 - 300.
		{"openai_lowers_keeping_the_margin", "openai", true, []string{":status", "200", "x-ratelimit-limit-tokens", "12000", "x-ratelimit-remaining-tokens", "3000"}, 1700},
		{"never_raises", "openai", true, []string{":status", "200", "x-ratelimit-limit-tokens", "10000", "x-ratelimit-remaining-tokens", "9999"}, 9700},
		// Anthropic rounds to the nearest thousand: 4000 left may be 4499, the level it lowers to.
		{"anthropic_tokens", "anthropic", true, []string{":status", "200", "anthropic-ratelimit-tokens-limit", "10000", "anthropic-ratelimit-tokens-remaining", "4000"}, 5200},
		{"anthropic_input_tokens", "anthropic", true, []string{":status", "200", "anthropic-ratelimit-input-tokens-limit", "10000", "anthropic-ratelimit-input-tokens-remaining", "5000"}, 6200},
		// The reservation's provider decides whose headers are read.
		{"azure_speaks_openai", "azure", true, []string{":status", "200", "x-ratelimit-limit-tokens", "12000", "x-ratelimit-remaining-tokens", "3000"}, 1700},
		{"openai_ignores_anthropic_headers", "openai", true, []string{":status", "200", "anthropic-ratelimit-tokens-limit", "10000", "anthropic-ratelimit-tokens-remaining", "4000"}, 9700},
		{"rule_without_feedback", "openai", false, []string{":status", "200", "x-ratelimit-remaining-tokens", "0"}, 9700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.provider = tc.provider
			r := e.reserve(t, tc.feedback)
			e.run(t, r, true, headers(tc.hdrs...), body(`{"usage":{"total_tokens":300}}`, true))
			if got := e.remaining(t, tpm); got != tc.want {
				t.Errorf("tokens remaining %d, want %d", got, tc.want)
			}
		})
	}
}

// A provider 429 with retry-after pauses the bucket: refunded first (all but the part a 4xx
// keeps), then lowered so that the same cost fits again exactly after retry-after.
func TestProvider429Pauses(t *testing.T) {
	t.Parallel()
	for _, hdr := range [][]string{{"retry-after", "12"}, {"retry-after-ms", "12000"}} {
		e := newEnv(t)
		r := e.reserve(t, true)
		e.run(t, r, true, headers(":status", "429", hdr[0], hdr[1], "x-ratelimit-remaining-tokens", "5000"), body(`{"error":{}}`, true))
		// 12 s at 10000/min is 2000 tokens: the level is 1000 - 2000.
		if got := e.remaining(t, tpm); got != -1000 {
			t.Errorf("%s: tokens remaining %d, want -1000", hdr[0], got)
		}
		res, err := e.store.Take(context.Background(), &bucket.Request{Tag: "openai", Buckets: []bucket.Spec{withCost(tpm, 1000)}})
		if err != nil || res.Outcome != bucket.Denied || res.Wait != 12*time.Second {
			t.Errorf("%s: a request of the same cost: %+v %v, want denied for 12s", hdr[0], res, err)
		}
	}
}

// A rule without refund keeps its reservation when the answer uses less, and is still charged
// when it uses more.
func TestNoRefundKeepsTheReservation(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		usage  string
		tokens int64
	}{
		{"less", `{"usage":{"prompt_tokens":200,"completion_tokens":100,"total_tokens":300}}`, 9000},
		{"more", `{"usage":{"prompt_tokens":200,"completion_tokens":1300,"total_tokens":1500}}`, 8500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			r := e.reserve(t, false)
			r.Buckets[0].Refund = false
			e.run(t, r, true, headers(":status", "200", "content-type", "application/json"), body(tc.usage, true))
			if got := e.remaining(t, tpm); got != tc.tokens {
				t.Errorf("tokens remaining %d, want %d", got, tc.tokens)
			}
			if got := e.remaining(t, live); got != 1 {
				t.Errorf("in-flight slots %d, want 1", got)
			}
		})
	}
}

// flaky fails its first Adjust, like a Redis timeout, and records every call.
type flaky struct {
	Store
	mu    sync.Mutex
	calls [][]bucket.Adjustment
}

func (f *flaky) Adjust(ctx context.Context, tag string, adj []bucket.Adjustment) error {
	f.mu.Lock()
	f.calls = append(f.calls, adj)
	n := len(f.calls)
	f.mu.Unlock()
	if n == 1 {
		return errors.New("i/o timeout")
	}
	return f.Store.Adjust(ctx, tag, adj)
}

// A failed settlement retries the lease release alone: the slot is freed, the refund is not
// retried (it may have been applied).
func TestFailedSettlementStillReleasesTheLease(t *testing.T) {
	t.Parallel()
	var f *flaky
	e := newEnvWith(t, func(s Store) Store { f = &flaky{Store: s}; return f })
	r := e.reserve(t, false)
	e.run(t, r, true, headers(":status", "200", "content-type", "application/json"),
		body(`{"usage":{"prompt_tokens":200,"completion_tokens":100,"total_tokens":300}}`, true))
	if got := e.remaining(t, live); got != 1 {
		t.Errorf("in-flight slots %d, want 1: the lease was not released", got)
	}
	if got := e.remaining(t, tpm); got != 9000 {
		t.Errorf("tokens remaining %d, want 9000: the failed refund must not be retried", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) != 2 || len(f.calls[1]) != 1 || f.calls[1][0].Spec.Algorithm != bucket.Concurrency {
		t.Errorf("calls = %+v, want the full adjustment then the lease alone", f.calls)
	}
}

func requestHeaders() *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: "x-request-id", RawValue: []byte("r1")}}}}}}
}

// answered is response headers with Envoy's response.code_details attribute, as the shipped
// envoy.yaml's response_attributes send it.
func answered(details string, kv ...string) *extprocv3.ProcessingRequest {
	m := headers(kv...)
	m.Attributes = map[string]*structpb.Struct{"envoy.filters.http.ext_proc": {Fields: map[string]*structpb.Value{
		AttrCodeDetails: structpb.NewStringValue(details)}}}
	return m
}

// Who answered decides: a provider's 5xx gives the tokens back (the request stays counted); Envoy's own reply (a route or idle
// timeout, a reset) is not, since the provider may have finished and billed the request; a stream
// that ends before any response (the client aborted) refunds nothing either. Every case releases
// the lease, and a local reply's headers never pause a feedback bucket.
func TestWhoAnswered(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		msgs        []*extprocv3.ProcessingRequest
		tokens, rpm int64
		result      result
	}{
		{"provider_error_refunded", []*extprocv3.ProcessingRequest{requestHeaders(),
			answered("via_upstream", ":status", "504"), body(`{"error":{}}`, true)}, 10000, 99, resultUpstreamError},
		{"route_timeout_kept", []*extprocv3.ProcessingRequest{requestHeaders(),
			answered("response_timeout", ":status", "504"), body(`upstream request timeout`, true)}, 9000, 99, resultLocalReply},
		{"stream_idle_timeout_kept", []*extprocv3.ProcessingRequest{requestHeaders(),
			answered("stream_idle_timeout", ":status", "408"), body(`stream timeout`, true)}, 9000, 99, resultLocalReply},
		{"reset_kept", []*extprocv3.ProcessingRequest{requestHeaders(),
			answered("upstream_reset_before_response_started{remote_reset}", ":status", "503")}, 9000, 99, resultLocalReply},
		{"local_429_does_not_pause", []*extprocv3.ProcessingRequest{requestHeaders(),
			answered("some_local_limit", ":status", "429", "retry-after", "30", "x-ratelimit-remaining-tokens", "0"), body(`{}`, true)}, 9000, 99, resultLocalReply},
		{"aborted_before_the_response", []*extprocv3.ProcessingRequest{requestHeaders()}, 9000, 99, resultNoResponse},
		// An Envoy that sends no attribute: the status alone decides, as the provider's.
		{"no_attribute_provider_error", []*extprocv3.ProcessingRequest{headers(":status", "504"), body(`{}`, true)}, 10000, 99, resultUpstreamError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(prometheus.NewRegistry())
			e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
			r := e.reserve(t, true)
			e.run(t, r, true, tc.msgs...)
			if got := e.remaining(t, tpm); got != tc.tokens {
				t.Errorf("tokens remaining %d, want %d", got, tc.tokens)
			}
			if got := e.remaining(t, rpm); got != tc.rpm {
				t.Errorf("requests remaining %d, want %d", got, tc.rpm)
			}
			if got := e.remaining(t, live); got != 1 {
				t.Errorf("in-flight slots %d, want 1: the lease was not released", got)
			}
			var c dto.Metric
			if err := m.settledTotal.WithLabelValues(string(tc.result), "openai").Write(&c); err != nil {
				t.Fatal(err)
			}
			if got := c.GetCounter().GetValue(); got != 1 {
				t.Errorf("settled{result=%q} = %v, want 1", tc.result, got)
			}
		})
	}
}

// A client that aborts before the provider's first byte cancels Envoy's stream: the lease is
// released then, not after lease_ttl.
func TestAbortBeforeTheResponseReleasesTheLease(t *testing.T) {
	t.Parallel()
	mt := NewMetrics(prometheus.NewRegistry())
	e := newEnvWith(t, nil, func(o *Options) { o.Metrics = mt })
	r := e.reserve(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	st, err := e.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m := requestHeaders()
	m.MetadataContext, m.ObservabilityMode = metadata(r), true
	if err := st.Send(m); err != nil {
		t.Fatal(err)
	}
	// Envoy's abort comes after the request headers reached the service: cancel once the server
	// holds the lease (a cancel racing the first message would end a stream it never read).
	for wait := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		var g dto.Metric
		if err := mt.held.Write(&g); err != nil {
			t.Fatal(err)
		}
		if g.GetGauge().GetValue() == 1 {
			break
		}
		if time.Now().After(wait) {
			t.Fatal("the server never read the request headers")
		}
	}
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for e.remaining(t, live) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the lease was not released after the stream was cancelled")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := e.remaining(t, tpm); got != 9000 {
		t.Errorf("tokens remaining %d, want 9000: an abort refunds nothing", got)
	}
}

// A Gemini 429 says how long to wait in its body (google.rpc.RetryInfo), not in a header: the
// body is read, across chunks, and pauses the bucket as retry-after does. Vertex AI's capacity
// 429 names no wait and pauses for the dialect's short backoff; a Gemini 429 that names none
// (a spending limit) pauses nothing.
func TestProvider429BodyPauses(t *testing.T) {
	t.Parallel()
	retry := `{"error":{"code":429,"message":"Quota exceeded.","status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"m"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"12s"}]}}`
	dsq := `{"error":{"code":429,"message":"Resource exhausted. Please try again later.","status":"RESOURCE_EXHAUSTED"}}`
	for _, tc := range []struct {
		name, provider, body string
		observe              bool
		want                 int64
	}{
		// 12 s at 10000/min is 2000 tokens: the level is 1000 - 2000.
		{"gemini_retry_info", "gemini", retry, true, -1000},
		{"gemini_retry_info_answered", "gemini", retry, false, -1000},
		{"vertex_retry_info", "vertex", retry, true, -1000},
		// 1 s at 10000/min is 167 tokens.
		{"vertex_capacity", "vertex", dsq, true, 1000 - 167},
		// Refunded but the 25% a 4xx keeps: 10000 - 1000 + 750.
		{"gemini_no_wait", "gemini", dsq, true, 9750},
		{"openai_reads_no_body", "openai", retry, true, 9750},
	} {
		if tc.name == "gemini_retry_info" {
			// The same body compressed, as Google's front ends send it to a client accepting gzip.
			t.Run("gemini_gzip", func(t *testing.T) {
				t.Parallel()
				e := newEnv(t)
				e.provider = "gemini"
				r := e.reserve(t, true)
				z := string(compress(t, "gzip", []byte(retry)))
				e.run(t, r, true, headers(":status", "429", "content-encoding", "gzip"), body(z[:10], false), body(z[10:], true))
				if got := e.remaining(t, tpm); got != -1000 {
					t.Errorf("tokens remaining %d, want -1000", got)
				}
			})
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.provider = tc.provider
			r := e.reserve(t, true)
			half := len(tc.body) / 2
			e.run(t, r, tc.observe, headers(":status", "429", "content-type", "application/json"), body(tc.body[:half], false), body(tc.body[half:], true))
			if got := e.remaining(t, tpm); got != tc.want {
				t.Errorf("tokens remaining %d, want %d", got, tc.want)
			}
		})
	}
}
