package filter

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// wantWire is what decodeCheck must read, taken from protobuf's own decoding of the request.
func wantWire(req *authv3.CheckRequest, tenantHeader, priorityHeader string) wireRequest {
	var w wireRequest
	attrs := req.GetAttributes()
	w.principal = attrs.GetSource().GetPrincipal()
	if ext := attrs.GetContextExtensions(); len(ext) > 0 {
		w.ext = ext
	}
	h := attrs.GetRequest().GetHttp()
	w.http = h != nil
	w.path, w.host, w.size = h.GetPath(), h.GetHost(), h.GetSize()
	w.rawBody, w.strBody = h.GetRawBody(), []byte(h.GetBody())
	names := [hdrCount]string{":path", ":authority", "content-type", "content-encoding", "content-length", "x-envoy-auth-partial-body", tenantHeader, priorityHeader}
	for i, n := range names {
		if n == "" {
			continue
		}
		w.hdr[i], w.has[i] = h.GetHeaders()[n]
	}
	return w
}

func diffWire(t *testing.T, name string, got, want wireRequest) {
	t.Helper()
	if len(got.rawBody) == 0 && len(want.rawBody) == 0 {
		got.rawBody, want.rawBody = nil, nil
	}
	if len(got.strBody) == 0 && len(want.strBody) == 0 {
		got.strBody, want.strBody = nil, nil
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(wireRequest{})); d != "" {
		t.Errorf("%s: decodeCheck differs from protobuf (-want +got):\n%s", name, d)
	}
}

// decodeCheck reads every fixture as protobuf's decoder does.
func TestDecodeCheckMatchesProto(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/requests/*.json")
	if err != nil || len(files) < 10 {
		t.Fatalf("fixtures: %v (%d)", err, len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		req := loadRequest(t, name)
		// The tenant header is one of the fixed ones in one case: both must be read.
		for _, hs := range [][2]string{{"x-tenant", "x-priority"}, {"content-type", ""}, {"", ""}} {
			data, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			var got wireRequest
			if err := decodeCheck(data, hs[0], hs[1], &got); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			diffWire(t, name, got, wantWire(req, hs[0], hs[1]))
		}
	}
}

// Repeated map keys (the last wins), unknown fields and known fields of another wire type are
// read as protobuf reads them.
func TestDecodeCheckProtobufRules(t *testing.T) {
	t.Parallel()
	entry := func(num protowire.Number, k, v string) []byte {
		var e []byte
		e = protowire.AppendTag(e, fieldMapKey, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, fieldMapValue, protowire.BytesType)
		e = protowire.AppendString(e, v)
		b := protowire.AppendTag(nil, num, protowire.BytesType)
		return protowire.AppendBytes(b, e)
	}
	var h []byte
	h = append(h, entry(fieldHTTPHeaders, "x-tenant", "first")...)
	h = append(h, entry(fieldHTTPHeaders, "content-type", "text/plain")...)
	h = append(h, entry(fieldHTTPHeaders, "x-tenant", "second")...)
	h = protowire.AppendTag(h, fieldHTTPPath, protowire.VarintType) // path with a wrong wire type
	h = protowire.AppendVarint(h, 7)
	h = protowire.AppendTag(h, fieldHTTPPath, protowire.BytesType)
	h = protowire.AppendString(h, "/v1/chat/completions")
	h = protowire.AppendTag(h, 99, protowire.Fixed32Type) // unknown
	h = protowire.AppendFixed32(h, 1)
	h = protowire.AppendTag(h, fieldHTTPRawBody, protowire.BytesType)
	h = protowire.AppendString(h, `{"model":"gpt-4o"}`)
	h = protowire.AppendTag(h, fieldHTTPSize, protowire.VarintType)
	h = protowire.AppendVarint(h, 18)
	r := protowire.AppendTag(nil, fieldRequestHTTP, protowire.BytesType)
	r = protowire.AppendBytes(r, h)
	a := protowire.AppendTag(nil, fieldAttrRequest, protowire.BytesType)
	a = protowire.AppendBytes(a, r)
	a = append(a, entry(fieldAttrExtensions, "rule", "a")...)
	a = append(a, entry(fieldAttrExtensions, "rule", "b")...)
	data := protowire.AppendTag(nil, fieldCheckAttributes, protowire.BytesType)
	data = protowire.AppendBytes(data, a)
	// A second occurrence of attributes with one more header and no body: protobuf merges it
	// into the first, so the body, path and size stay.
	h2 := entry(fieldHTTPHeaders, "x-priority", "batch")
	r2 := protowire.AppendBytes(protowire.AppendTag(nil, fieldRequestHTTP, protowire.BytesType), h2)
	a2 := protowire.AppendBytes(protowire.AppendTag(nil, fieldAttrRequest, protowire.BytesType), r2)
	data = protowire.AppendBytes(protowire.AppendTag(data, fieldCheckAttributes, protowire.BytesType), a2)

	req := &authv3.CheckRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		t.Fatal(err)
	}
	var got wireRequest
	if err := decodeCheck(data, "x-tenant", "x-priority", &got); err != nil {
		t.Fatal(err)
	}
	want := wantWire(req, "x-tenant", "x-priority")
	diffWire(t, "hand-made", got, want)
	if got.hdr[hdrTenant] != "second" || got.ext["rule"] != "b" || got.hdr[hdrPriority] != "batch" || len(got.body()) == 0 {
		t.Errorf("tenant %q, ext %v, priority %q, body %q: want the last occurrences, merged", got.hdr[hdrTenant], got.ext, got.hdr[hdrPriority], got.body())
	}
}

// Every truncation of an encoded request fails exactly when protobuf's decoder fails.
func TestDecodeCheckTruncated(t *testing.T) {
	t.Parallel()
	data, err := proto.Marshal(loadRequest(t, "route_limit"))
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(data) {
		var w wireRequest
		gotErr := decodeCheck(data[:n], "x-tenant", "", &w) != nil
		wantErr := proto.Unmarshal(data[:n], &authv3.CheckRequest{}) != nil
		if gotErr != wantErr {
			t.Fatalf("prefix of %d of %d bytes: decodeCheck error %v, protobuf error %v", n, len(data), gotErr, wantErr)
		}
	}
}

// checkEncoding: AppendAnswer appends a's encoding, which decodes to a.Response().
func checkEncoding(t testing.TB, a *Answer) {
	t.Helper()
	b, ok := AppendAnswer([]byte("kept"), a)
	if !ok {
		t.Fatalf("AppendAnswer declined %v", a.Response())
	}
	if string(b[:4]) != "kept" {
		t.Fatalf("AppendAnswer overwrote what b held: %q", b[:4])
	}
	got := &authv3.CheckResponse{}
	if err := proto.Unmarshal(b[4:], got); err != nil {
		t.Fatalf("AppendAnswer's encoding: %v\n%v", err, a.Response())
	}
	if d := cmp.Diff(a.Response(), got, protocmp.Transform()); d != "" {
		t.Fatalf("AppendAnswer's encoding decodes to another message (-want +got):\n%s", d)
	}
}

// Every answer of the tests goes through the encoder the service uses (env.answer), and the
// golden answers (TestCheckGolden) pin the metadata. These add lengths of one, two and three
// varint bytes at every level, a negative code (ten bytes), strings that are not valid UTF-8
// and names shared by neighbours; fields the answers never use are declined, not dropped.
func TestAppendAnswer(t *testing.T) {
	t.Parallel()
	for _, n := range []int{127, 128, 300, 16383, 16384, 70000} {
		long := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		bad := long + "\xff"
		rules := []*config.Rule{{Name: "rule"}}
		pl := &plan{rules: rules, debited: true, enforced: bucket.Request{Tag: "openai", Buckets: []bucket.Spec{
			{Name: long, Limit: 10, Period: time.Minute, Cost: 1, Slot: 1},
			{Name: long, Limit: 10, Period: time.Minute, Cost: 1, Slot: 2},
			{Name: bad, Limit: 10, Period: time.Minute, Cost: 1},
		}}}
		est := tokens.Estimate{Provider: tokens.Anthropic, API: tokens.Messages, Model: bad,
			PromptTokens: int64(n), OutputTokens: 7, Reason: tokens.ReasonUnknownAPI}
		hdr := []*corev3.HeaderValueOption{header("x-long", long), header(long, "v")}
		for _, a := range []*Answer{
			deniedResponse(codes.ResourceExhausted, typev3.StatusCode_TooManyRequests, hdr, []byte(long),
				pl.metadata(&est, decisionDenied, time.Duration(n)*time.Millisecond)),
			okResponse(hdr, pl.metadata(&est, decisionAllowed, 0)),
		} {
			if a.Decision() == decisionAllowed {
				a.resp.Status.Code = -1
			}
			checkEncoding(t, a)
			md := a.Response().GetDynamicMetadata().GetFields()
			want := map[string]any{"decision": a.Decision(), "provider": "anthropic", "api": est.API.String(),
				"model": safeLabel(bad), "prompt_tokens": float64(n), "output_tokens": 7.0, "cost": float64(n + 7),
				"exact": false, "estimate_reason": string(tokens.ReasonUnknownAPI), "rules": "rule", "tag": "openai",
				"tenant": tenantHash(""), "priority": "",
				"reservation": string(pl.appendReservation(nil, &est))}
			if a.Decision() == decisionAllowed {
				want["buckets"] = []any{long, strings.ToValidUTF8(bad, "\uFFFD")}
			} else {
				want["wait_ms"] = float64(n)
			}
			wantMD, err := structpb.NewStruct(want)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(wantMD.GetFields(), md, protocmp.Transform()); d != "" {
				t.Errorf("%d: metadata (-want +got):\n%s", n, d)
			}
		}
	}
	// Every string is made valid UTF-8, which protobuf (and Envoy) require.
	md := &structpb.Struct{}
	if err := proto.Unmarshal(appendStrEntry(nil, "k", "a\xffb"), md); err != nil || md.GetFields()["k"].GetStringValue() != "a\uFFFDb" {
		t.Errorf("a string that is not UTF-8: %v, %v; want a\uFFFDb", md, err)
	}
	unused := okResponse(nil, (*plan)(nil).metadata(&tokens.Estimate{}, decisionUnlimited, 0))
	unused.resp.GetOkResponse().HeadersToRemove = []string{"x"}
	if b, ok := AppendAnswer([]byte("kept"), unused); ok || string(b) != "kept" {
		t.Errorf("AppendAnswer of an unused field: %q, %v; want the input and false", b, ok)
	}
}

// FuzzDecodeCheck: whatever protobuf's decoder accepts, decodeCheck accepts and reads alike;
// anything else never panics.
//
//	go test -run '^$' -fuzz FuzzDecodeCheck -fuzztime 5m ./internal/filter/
func FuzzDecodeCheck(f *testing.F) {
	files, err := filepath.Glob("testdata/requests/*.json")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := proto.Marshal(loadRequest(f, strings.TrimSuffix(filepath.Base(file), ".json")))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got wireRequest
		err := decodeCheck(data, "x-tenant", "x-priority", &got)
		req := &authv3.CheckRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		if err != nil {
			t.Fatalf("decodeCheck: %v; protobuf accepted %v", err, req)
		}
		diffWire(t, "fuzzed", got, wantWire(req, "x-tenant", "x-priority"))
	})
}

// AppendAnswer writes some fields of these messages and declines answers that set the others:
// a field added by a newer go-control-plane must be added to one list or the other, or it could
// be dropped silently. Field numbers per message, as the descriptors give them.
func TestAppendResponseKnowsEveryField(t *testing.T) {
	t.Parallel()
	known := []struct {
		msg    proto.Message
		fields []int
	}{
		{&authv3.CheckResponse{}, []int{1, 2, 3, 4, 5}},     // status, denied, ok, metadata written; error_response declined
		{&authv3.DeniedHttpResponse{}, []int{1, 2, 3}},      // all written
		{&authv3.OkHttpResponse{}, []int{2, 3, 5, 6, 7, 8}}, // response_headers_to_add written; the rest declined
		{&corev3.HeaderValueOption{}, []int{1, 2, 3, 4}},    // header, append_action written; append, keep_empty_value declined
		{&corev3.HeaderValue{}, []int{1, 2, 3}},             // key, value written; raw_value declined
		{&rpcstatus.Status{}, []int{1, 2, 3}},               // code written; message, details declined
		{&typev3.HttpStatus{}, []int{1}},                    // code written
		{&structpb.Value{}, []int{1, 2, 3, 4, 5, 6}},
		{&structpb.Struct{}, []int{1}},    // fields written
		{&structpb.ListValue{}, []int{1}}, // values written        // number, string, bool, list written; null, struct declined
	}
	for _, k := range known {
		fds := k.msg.ProtoReflect().Descriptor().Fields()
		var got []int
		for i := range fds.Len() {
			got = append(got, int(fds.Get(i).Number()))
		}
		slices.Sort(got)
		if !slices.Equal(got, k.fields) {
			t.Errorf("%s has fields %v, AppendAnswer knows %v", k.msg.ProtoReflect().Descriptor().FullName(), got, k.fields)
		}
	}
}

// appendReset writes what Duration.String does for the duration rounded up to the millisecond.
func TestAppendReset(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{-time.Hour, -1, 0, 1, time.Millisecond - 1, time.Millisecond, 999 * time.Millisecond,
		time.Second, time.Second + 1, 1680 * time.Millisecond, 1005 * time.Millisecond, time.Minute - time.Millisecond,
		time.Minute, 6 * time.Minute, time.Hour, time.Hour + time.Millisecond, 100*time.Hour + 59*time.Minute + 59*time.Second + 999*time.Millisecond,
		31 * 24 * time.Hour}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100000 {
		ds = append(ds, time.Duration(rng.Int64N(int64(200*time.Hour))), time.Duration(rng.Int64N(int64(2*time.Second))))
	}
	for _, d := range ds {
		want := "0s"
		if d > 0 {
			want = ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
		}
		if got := string(appendReset([]byte("x"), d)); got != "x"+want {
			t.Fatalf("appendReset(%d) = %q, want %q", d, got[1:], want)
		}
	}
}
