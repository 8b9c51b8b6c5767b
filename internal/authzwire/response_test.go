package authzwire

import (
	"math"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
)

func option(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: k, Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// AppendResponse's encoding, with metadata written by the Append*Field functions, decodes to
// the message protobuf builds from the same values: lengths of one, two and three varint bytes
// at every level, a negative code (ten bytes), strings that are not valid UTF-8 in the metadata
// (made valid) and in the response (declined).
func TestAppendResponse(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 1, 127, 128, 300, 16383, 16384, 70000} {
		long := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		bad := long + "\xff"
		var md []byte
		md = AppendStringField(md, "s", bad)
		md = AppendASCIIField(md, "a", []byte("r1 openai -"))
		md = AppendNumberField(md, "n", float64(n))
		md = AppendNumberField(md, "inf", math.Inf(1))
		md = AppendBoolField(md, "b", n%2 == 0)
		md = AppendListField(md, "l", []string{long, bad, ""})
		wantMD, err := structpb.NewStruct(map[string]any{
			"s": strings.ToValidUTF8(bad, "\uFFFD"), "a": "r1 openai -", "n": float64(n), "inf": math.Inf(1),
			"b": n%2 == 0, "l": []any{long, strings.ToValidUTF8(bad, "\uFFFD"), ""},
		})
		if err != nil {
			t.Fatal(err)
		}
		hdrs := []*corev3.HeaderValueOption{option("x-long", long), option(long, "v"), {Header: &corev3.HeaderValue{}}}
		for _, resp := range []*authv3.CheckResponse{
			{Status: &rpcstatus.Status{Code: 8}, HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_TooManyRequests}, Headers: hdrs, Body: long}}},
			{Status: &rpcstatus.Status{Code: -1}, HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{ResponseHeadersToAdd: hdrs}}},
			{Status: &rpcstatus.Status{}},
			{},
		} {
			b, ok := AppendResponse([]byte("kept"), resp, md)
			if !ok {
				t.Fatalf("%d: AppendResponse declined %v", n, resp)
			}
			if string(b[:4]) != "kept" {
				t.Fatalf("AppendResponse overwrote what b held: %q", b[:4])
			}
			got := &authv3.CheckResponse{}
			if err := proto.Unmarshal(b[4:], got); err != nil {
				t.Fatalf("%d: AppendResponse's encoding: %v", n, err)
			}
			want := proto.Clone(resp).(*authv3.CheckResponse)
			want.DynamicMetadata = wantMD
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Fatalf("%d: AppendResponse's encoding decodes to another message (-want +got):\n%s", n, d)
			}
		}
	}
	// Fields the answers never use, and strings protobuf refuses, are declined, not dropped.
	for name, resp := range map[string]*authv3.CheckResponse{
		"headers_to_remove": {HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{HeadersToRemove: []string{"x"}}}},
		"status message":    {Status: &rpcstatus.Status{Message: "m"}},
		"invalid body":      {HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{Body: "\xff"}}},
		"invalid header":    {HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{ResponseHeadersToAdd: []*corev3.HeaderValueOption{option("k", "\xff")}}}},
		"raw value":         {HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{ResponseHeadersToAdd: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{RawValue: []byte("v")}}}}}},
		"error response":    {HttpResponse: &authv3.CheckResponse_ErrorResponse{ErrorResponse: &authv3.DeniedHttpResponse{}}},
	} {
		if b, ok := AppendResponse([]byte("kept"), resp, nil); ok || string(b) != "kept" {
			t.Errorf("AppendResponse of %s: %q, %v; want the input and false", name, b, ok)
		}
	}
}
