package main

import (
	"context"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// rawCodec sends a request's bytes as they are and decodes answers with protobuf: a client that
// can send what no generated client would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	return proto.Unmarshal(data.Materialize(), v.(proto.Message))
}

func (rawCodec) Name() string { return "proto" }

// The service reads the CheckRequest's encoding itself: bytes that are not protobuf are an
// InvalidArgument error, and a request that protobuf's Go decoder would refuse for a header
// holding bytes that are not UTF-8 (Envoy sends header bytes as they came) is decided like any
// other. The service stays serving.
func TestCheckReadsTheWireEncoding(t *testing.T) {
	t.Parallel()
	cfg := writeFile(t, "limits.yaml", `
rules:
  - name: chat
    tokens: {limit: 100000, period: minute}
`)
	p := startProc(t, "-config", cfg)
	conn := p.dial(t)
	call := func(data []byte) (*authv3.CheckResponse, error) {
		resp := &authv3.CheckResponse{}
		err := conn.Invoke(context.Background(), authv3.Authorization_Check_FullMethodName, &data, resp, grpc.ForceCodecV2(rawCodec{}))
		return resp, err
	}

	for _, bad := range [][]byte{{0x0a, 0x05, 0x01}, {0xff, 0xff, 0xff}, []byte("not protobuf at all")} {
		if _, err := call(bad); status.Code(err) != codes.InvalidArgument {
			t.Errorf("Check(%q): %v, want InvalidArgument", bad, err)
		}
	}

	good, err := proto.Marshal(chatRequest("gpt-4o", 10, nil))
	if err != nil {
		t.Fatal(err)
	}
	// One more header, "user-agent: caf\xe9" (Latin-1), appended to the HttpRequest by hand:
	// attributes(1) > request(4) > http(2) > headers(3), each a length-delimited field; protobuf
	// merges repeated message fields, so appending whole outer fields adds the entry.
	entry := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "user-agent")
	entry = protowire.AppendString(protowire.AppendTag(entry, 2, protowire.BytesType), "caf\xe9")
	wrap := func(num protowire.Number, b []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), b)
	}
	latin1 := append(good, wrap(1, wrap(4, wrap(2, wrap(3, entry))))...)
	if err := proto.Unmarshal(latin1, &authv3.CheckRequest{}); err == nil {
		t.Fatal("protobuf accepted the Latin-1 header: the case tests nothing")
	}
	for name, data := range map[string][]byte{"valid": good, "latin-1 header": latin1} {
		resp, err := call(data)
		if err != nil || resp.GetStatus().GetCode() != 0 || resp.GetOkResponse() == nil {
			t.Errorf("%s: %v %v, want allowed", name, resp, err)
		}
	}

	hc := healthpb.NewHealthClient(conn)
	st, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: authv3.Authorization_ServiceDesc.ServiceName})
	if err != nil || st.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health after bad requests: %v %v", st, err)
	}
}
