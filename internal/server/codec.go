package server

import (
	"context"
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
)

// codec is gRPC's protobuf codec with two shortcuts for the decision path, measured in
// docs/performance.md:
//   - a Check request is not decoded: the handler gets its encoding (checkRequest), which
//     filter.CheckBytes reads in place, instead of a tree of messages, a map of every header and
//     copies of every string and of the body;
//   - an answer (filter.Answer) is encoded by filter.AppendAnswer, written for the fields the
//     answers use, its metadata straight from its values, rather than by reflection over a tree
//     of messages.
//
// Everything else (health, reflection, the response path's ext_proc stream) goes through
// gRPC's own codec. It is safe for concurrent use.
type codec struct {
	proto encoding.CodecV2
}

func newCodec() codec { return codec{proto: encoding.GetCodecV2(protocodec.Name)} }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if a, ok := v.(*filter.Answer); ok {
		if b, ok := filter.AppendAnswer(nil, a); ok {
			return mem.BufferSlice{mem.SliceBuffer(b)}, nil
		}
		v = a.Response()
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*checkRequest); ok {
		// gRPC recycles data's buffers once this returns: the request gets its own copy, which
		// nothing else ever writes.
		r.data = data.Materialize()
		return nil
	}
	return c.proto.Unmarshal(data, v)
}

// Name is that of gRPC's codec, so that the content-subtype of every request is unchanged.
func (c codec) Name() string { return protocodec.Name }

// checkRequest is an encoded envoy.service.auth.v3.CheckRequest.
type checkRequest struct {
	data []byte
}

// authorizationService is envoy.service.auth.v3.Authorization with its Check served by
// filter.CheckBytes: the generated service description with another handler.
var authorizationService = grpc.ServiceDesc{
	ServiceName: authv3.Authorization_ServiceDesc.ServiceName,
	HandlerType: (*interface {
		CheckBytes(context.Context, []byte) (*filter.Answer, error)
	})(nil),
	Methods:  []grpc.MethodDesc{{MethodName: "Check", Handler: checkHandler}},
	Metadata: authv3.Authorization_ServiceDesc.Metadata,
}

func checkHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := &checkRequest{}
	if err := dec(req); err != nil {
		return nil, err
	}
	f := srv.(*filter.Filter)
	if interceptor == nil {
		return f.CheckBytes(ctx, req.data)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: authv3.Authorization_Check_FullMethodName}
	return interceptor(ctx, req, info, func(ctx context.Context, r any) (any, error) {
		cr, ok := r.(*checkRequest)
		if !ok {
			return nil, fmt.Errorf("server: check handler got %T", r)
		}
		return f.CheckBytes(ctx, cr.data)
	})
}
