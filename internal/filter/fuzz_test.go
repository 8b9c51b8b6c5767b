package filter

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/fuzz/FuzzCheck/seed-* from the request fixtures and hostile cases")

// fuzzSeeds are the committed seeds of FuzzCheck: every request fixture and every hostile case,
// each as (the CheckRequest in protobuf wire format without its body, the body).
func fuzzSeeds(t testing.TB) map[string][2][]byte {
	t.Helper()
	seeds := map[string][2][]byte{}
	add := func(name string, req *authv3.CheckRequest) {
		req = proto.Clone(req).(*authv3.CheckRequest)
		h := req.GetAttributes().GetRequest().GetHttp()
		body := h.GetRawBody()
		if h != nil {
			h.RawBody = nil
		}
		msg, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		seeds[name] = [2][]byte{msg, body}
	}
	entries, err := os.ReadDir("testdata/requests")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".json")
		add(name, loadRequest(t, name))
	}
	for _, hc := range hostileCases() {
		if hc.seed {
			add("hostile-"+hc.name, hc.req())
		}
	}
	return seeds
}

// TestFuzzCorpusIsCurrent keeps the committed seed corpus in step with the fixtures
// (go test -run TestFuzzCorpusIsCurrent -update-corpus ./internal/filter/ rewrites it).
func TestFuzzCorpusIsCurrent(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "fuzz", "FuzzCheck")
	for name, s := range fuzzSeeds(t) {
		want := fmt.Sprintf("go test fuzz v1\n[]byte(%s)\n[]byte(%s)\n", strconv.Quote(string(s[0])), strconv.Quote(string(s[1])))
		path := filepath.Join(dir, "seed-"+name)
		if *updateCorpus {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Errorf("%s is missing or stale (%v): run go test -run TestFuzzCorpusIsCurrent -update-corpus ./internal/filter/", path, err)
		}
	}
}

// FuzzCheck: any encoded CheckRequest (headers, path, context extensions, principal, body), and
// any bytes at all, is answered without a panic, in bounded time, with a well-formed response
// that the service's encoder writes, or with the RPC error of a malformed request or of one
// without HTTP attributes; the price is never negative. The committed seeds are under
// testdata/fuzz/FuzzCheck. Long run (not in CI; see docs/operations.md):
//
//	go test -run '^$' -fuzz FuzzCheck -fuzztime 30m ./internal/filter/
func FuzzCheck(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s[0], s[1])
	}
	// Every rule kind, shadow, priorities, a tenant header and a fallback store.
	e := newEnv(f, "", Options{})
	f.Fuzz(func(t *testing.T, msg, body []byte) {
		// msg is the request as it comes off the wire, valid protobuf or not; a valid one gets
		// body as its raw_body.
		req := &authv3.CheckRequest{}
		if err := proto.Unmarshal(msg, req); err == nil {
			if h := req.GetAttributes().GetRequest().GetHttp(); h != nil && len(body) > 0 {
				h.RawBody = body
				if msg, err = proto.Marshal(req); err != nil {
					return
				}
			}
		}
		// A short deadline: holding for max_wait is bounded by it and never sleeps long.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		start := time.Now()
		resp, err := e.f.CheckBytes(ctx, msg)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Check took %v (body %d bytes)", d, len(body))
		}
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument && c != codes.DeadlineExceeded {
				t.Fatalf("Check error %v", err)
			}
			return
		}
		checkEncoding(t, resp)
		r := resp.Response()
		if r.GetStatus() == nil {
			t.Fatalf("Check answered %v", r)
		}
		if d := decisionOf(r); d == "" || d != resp.Decision() {
			t.Fatalf("answer with decision %q (%q): %v", d, resp.Decision(), r)
		}
		if c := r.GetDynamicMetadata().GetFields()["cost"].GetNumberValue(); c < 0 {
			t.Fatalf("negative cost %v", c)
		}
		e.clock.Add(time.Second) // let the buckets refill so that later inputs reach the store
	})
}
