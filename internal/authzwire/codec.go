package authzwire

import (
	"context"
	"fmt"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// Answer is a decision's CheckResponse as the codec sends it.
type Answer interface {
	// AppendTo appends the answer's protobuf encoding to b (AppendResponse); false: the answer
	// uses a field that AppendResponse does not write, and b is returned unchanged.
	AppendTo(b []byte) ([]byte, bool)
	// Response is the answer as a message, for proto.Marshal when AppendTo declines.
	Response() *authv3.CheckResponse
}

// Codec returns gRPC's protobuf codec with two shortcuts for the decision path:
//   - a Check request is not decoded: the handler that Register installs gets its encoding,
//     which Decode reads in place, instead of a tree of messages, a map of every header and
//     copies of every string and of the body;
//   - an Answer is encoded by its AppendTo, written for the fields the answers use, its
//     metadata straight from its values, rather than by reflection over a tree of messages.
//
// Everything else (health, reflection, the response path's ext_proc stream) goes through
// gRPC's own codec. Its name is that of gRPC's codec, so that the content-subtype of every
// request is unchanged. It is safe for concurrent use.
func Codec() encoding.CodecV2 { return codec{proto: encoding.GetCodecV2(protocodec.Name)} }

type codec struct {
	proto encoding.CodecV2
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if a, ok := v.(Answer); ok {
		if b, ok := a.AppendTo(nil); ok {
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

func (c codec) Name() string { return protocodec.Name }

// checkRequest is an encoded envoy.service.auth.v3.CheckRequest.
type checkRequest struct {
	data []byte
}

// Register serves envoy.service.auth.v3.Authorization on s, each Check answered by check with
// the request's encoding, which stays unchanged (check may keep reading it after it returns).
// The server must use Codec: another codec cannot hand over the encoding. check must be safe
// for concurrent use.
func Register[A Answer](s grpc.ServiceRegistrar, check func(ctx context.Context, data []byte) (A, error)) {
	s.RegisterService(&authorizationService, &service{check: func(ctx context.Context, data []byte) (Answer, error) {
		a, err := check(ctx, data)
		if err != nil {
			return nil, err // never a typed nil in the interface
		}
		return a, nil
	}})
}

// service is the handler of authorizationService.
type service struct {
	check func(ctx context.Context, data []byte) (Answer, error)
}

// authorizationService is envoy.service.auth.v3.Authorization with its Check served from the
// request's encoding: the generated service description with another handler.
var authorizationService = grpc.ServiceDesc{
	ServiceName: authv3.Authorization_ServiceDesc.ServiceName,
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Check", Handler: checkHandler}},
	Metadata:    authv3.Authorization_ServiceDesc.Metadata,
}

func checkHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	req := &checkRequest{}
	if err := dec(req); err != nil {
		return nil, err
	}
	svc := srv.(*service)
	if interceptor == nil {
		return svc.check(ctx, req.data)
	}
	info := &grpc.UnaryServerInfo{Server: srv, FullMethod: authv3.Authorization_Check_FullMethodName}
	return interceptor(ctx, req, info, func(ctx context.Context, r any) (any, error) {
		cr, ok := r.(*checkRequest)
		if !ok {
			return nil, fmt.Errorf("authzwire: check handler got %T", r)
		}
		return svc.check(ctx, cr.data)
	})
}
