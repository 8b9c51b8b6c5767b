package filter

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tokens"
)

// checkEncoding: a.AppendTo appends a's encoding, which decodes to a.Response().
func checkEncoding(t testing.TB, a *Answer) {
	t.Helper()
	b, ok := a.AppendTo([]byte("kept"))
	if !ok {
		t.Fatalf("AppendTo declined %v", a.Response())
	}
	if string(b[:4]) != "kept" {
		t.Fatalf("AppendTo overwrote what b held: %q", b[:4])
	}
	got := &authv3.CheckResponse{}
	if err := proto.Unmarshal(b[4:], got); err != nil {
		t.Fatalf("AppendTo's encoding: %v\n%v", err, a.Response())
	}
	if d := cmp.Diff(a.Response(), got, protocmp.Transform()); d != "" {
		t.Fatalf("AppendTo's encoding decodes to another message (-want +got):\n%s", d)
	}
}

// Every answer of the tests goes through the encoder the service uses (env.answer), and the
// golden answers (TestCheckGolden) pin the metadata. These add lengths of one, two and three
// varint bytes at every level, a negative code (ten bytes), strings that are not valid UTF-8
// and names shared by neighbours; fields the answers never use are declined, not dropped.
func TestAnswerAppendTo(t *testing.T) {
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
		pl.cost = charge(&provider.Profile{}, &est)
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
	unused := okResponse(nil, (*plan)(nil).metadata(&tokens.Estimate{}, decisionUnlimited, 0))
	unused.resp.GetOkResponse().HeadersToRemove = []string{"x"}
	if b, ok := unused.AppendTo([]byte("kept")); ok || string(b) != "kept" {
		t.Errorf("AppendTo of an unused field: %q, %v; want the input and false", b, ok)
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
