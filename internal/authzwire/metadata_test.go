package authzwire

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

const jwtNS = "envoy.filters.http.jwt_authn"

// jwtRequest is a CheckRequest whose metadata_context carries payload as jwt_authn's
// payload_in_metadata: jwt_payload would.
func jwtRequest(t testing.TB, payload map[string]any) []byte {
	t.Helper()
	st, err := structpb.NewStruct(map[string]any{"jwt_payload": payload})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := structpb.NewStruct(map[string]any{"jwt_payload": map[string]any{"org_id": "from-another-namespace"}})
	req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Path: "/v1/chat/completions"}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			jwtNS: st, "envoy.filters.http.other": other,
		}},
	}}
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// MetadataString reads a claim by its path of whole keys (dots and slashes are part of a key),
// strings as they are and numbers as integers when whole; anything else is not found.
func TestMetadataString(t *testing.T) {
	t.Parallel()
	data := jwtRequest(t, map[string]any{
		"org_id":                     "acme",
		"https://example.com/tenant": "globex",
		"a.b":                        "dotted",
		"org":                        map[string]any{"id": "nested", "n": 42.0, "f": 1.5},
		"plan":                       "pro",
		"admin":                      true,
		"groups":                     []any{"x", "y"},
		"empty":                      "",
	})
	var w Request
	if err := Decode(data, "", "", &w); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path []string
		want string
		ok   bool
	}{
		{[]string{"org_id"}, "acme", true},
		{[]string{"https://example.com/tenant"}, "globex", true},
		{[]string{"a.b"}, "dotted", true},
		{[]string{"a", "b"}, "", false},
		{[]string{"org", "id"}, "nested", true},
		{[]string{"org", "n"}, "42", true},
		{[]string{"org", "f"}, "1.5", true},
		{[]string{"org"}, "", false},
		{[]string{"admin"}, "", false},
		{[]string{"groups"}, "", false},
		{[]string{"empty"}, "", true},
		{[]string{"missing"}, "", false},
		{[]string{"org_id", "deeper"}, "", false},
	} {
		got, ok := w.MetadataString(jwtNS, "jwt_payload", tc.path)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%q: %q %v, want %q %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := w.MetadataString(jwtNS, "other_payload", []string{"org_id"}); ok {
		t.Error("another payload field was read")
	}
	if _, ok := w.MetadataString("envoy.filters.http.missing", "jwt_payload", []string{"org_id"}); ok {
		t.Error("a missing namespace was read")
	}
	var none Request
	if err := Decode(jwtRequestWithout(t), "", "", &none); err != nil || none.Metadata != nil {
		t.Fatalf("a request without metadata: %v %v", err, none.Metadata)
	}
	if _, ok := none.MetadataString(jwtNS, "jwt_payload", []string{"org_id"}); ok {
		t.Error("a request without metadata has a claim")
	}
	// A truncated metadata encoding reads as absent, never as a claim.
	w.Metadata = w.Metadata[:len(w.Metadata)/2]
	if v, ok := w.MetadataString(jwtNS, "jwt_payload", []string{"org_id"}); ok && v != "acme" {
		t.Errorf("truncated metadata read %q", v)
	}
}

func jwtRequestWithout(t testing.TB) []byte {
	data, err := proto.Marshal(&authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{Path: "/v1/chat/completions"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Reading a request with or without metadata, and a string claim in it, allocates nothing.
func TestMetadataAllocs(t *testing.T) {
	data := jwtRequest(t, map[string]any{"org_id": "acme", "plan": "pro"})
	plain := jwtRequestWithout(t)
	path := []string{"org_id"}
	if n := testing.AllocsPerRun(100, func() {
		var w Request
		if err := Decode(plain, "x-tenant-id", "", &w); err != nil {
			t.Fatal(err)
		}
		if _, ok := w.MetadataString(jwtNS, "jwt_payload", path); ok {
			t.Fatal("claim without metadata")
		}
	}); n != 0 {
		t.Errorf("a request without metadata: %v allocations", n)
	}
	if n := testing.AllocsPerRun(100, func() {
		var w Request
		if err := Decode(data, "x-tenant-id", "", &w); err != nil {
			t.Fatal(err)
		}
		if v, ok := w.MetadataString(jwtNS, "jwt_payload", path); !ok || v != "acme" {
			t.Fatal("claim not found")
		}
	}); n != 0 {
		t.Errorf("a claim: %v allocations", n)
	}
}
