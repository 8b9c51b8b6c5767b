package authzwire

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// fixtures are the filter's CheckRequests: the requests the service is tested with.
const fixtures = "../filter/testdata/requests"

func loadRequest(t testing.TB, name string) *authv3.CheckRequest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(data, req); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return req
}

// wantWire is what Decode must read, taken from protobuf's own decoding of the request.
func wantWire(req *authv3.CheckRequest, tenantHeader, priorityHeader string) Request {
	var w Request
	attrs := req.GetAttributes()
	w.Principal = attrs.GetSource().GetPrincipal()
	if ext := attrs.GetContextExtensions(); len(ext) > 0 {
		w.Ext = ext
	}
	h := attrs.GetRequest().GetHttp()
	w.HTTP = h != nil
	w.Path, w.Host, w.Size = h.GetPath(), h.GetHost(), h.GetSize()
	w.RawBody, w.StrBody = h.GetRawBody(), []byte(h.GetBody())
	names := [HeaderCount]string{":path", ":authority", "content-type", "content-encoding", "content-length", "x-envoy-auth-partial-body", tenantHeader, priorityHeader}
	for i, n := range names {
		if n == "" {
			continue
		}
		w.Header[i], w.Has[i] = h.GetHeaders()[n]
	}
	return w
}

func diffWire(t *testing.T, name string, got, want Request) {
	t.Helper()
	if len(got.RawBody) == 0 && len(want.RawBody) == 0 {
		got.RawBody, want.RawBody = nil, nil
	}
	if len(got.StrBody) == 0 && len(want.StrBody) == 0 {
		got.StrBody, want.StrBody = nil, nil
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s: Decode differs from protobuf (-want +got):\n%s", name, d)
	}
}

// Decode reads every fixture as protobuf's decoder does.
func TestDecodeCheckMatchesProto(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(fixtures, "*.json"))
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
			var got Request
			if err := Decode(data, hs[0], hs[1], &got); err != nil {
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
	var got Request
	if err := Decode(data, "x-tenant", "x-priority", &got); err != nil {
		t.Fatal(err)
	}
	want := wantWire(req, "x-tenant", "x-priority")
	diffWire(t, "hand-made", got, want)
	if got.Header[HeaderTenant] != "second" || got.Ext["rule"] != "b" || got.Header[HeaderPriority] != "batch" || len(got.Body()) == 0 {
		t.Errorf("tenant %q, ext %v, priority %q, body %q: want the last occurrences, merged", got.Header[HeaderTenant], got.Ext, got.Header[HeaderPriority], got.Body())
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
		var w Request
		gotErr := Decode(data[:n], "x-tenant", "", &w) != nil
		wantErr := proto.Unmarshal(data[:n], &authv3.CheckRequest{}) != nil
		if gotErr != wantErr {
			t.Fatalf("prefix of %d of %d bytes: Decode error %v, protobuf error %v", n, len(data), gotErr, wantErr)
		}
	}
}

// FuzzDecodeCheck: whatever protobuf's decoder accepts, Decode accepts and reads alike;
// anything else never panics.
//
//	go test -run '^$' -fuzz FuzzDecodeCheck -fuzztime 5m ./internal/authzwire/
func FuzzDecodeCheck(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(fixtures, "*.json"))
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
		var got Request
		err := Decode(data, "x-tenant", "x-priority", &got)
		req := &authv3.CheckRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		if err != nil {
			t.Fatalf("Decode: %v; protobuf accepted %v", err, req)
		}
		diffWire(t, "fuzzed", got, wantWire(req, "x-tenant", "x-priority"))
	})
}

// AppendResponse writes some fields of these messages and declines answers that set the others:
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
			t.Errorf("%s has fields %v, AppendResponse knows %v", k.msg.ProtoReflect().Descriptor().FullName(), got, k.fields)
		}
	}
}
