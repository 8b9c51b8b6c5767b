package reservation

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/price"
)

// zones compares time zones by name (a *time.Location has unexported fields).
var zones = cmp.Comparer(func(a, b *time.Location) bool { return a.String() == b.String() })

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	r := &Reservation{Tag: "openai", Lease: "0123abcd", Model: "gpt 4o%\x00é", Prompt: 12, Output: 256,
		Weight: 5, CacheReadsFree: true, CharsCounted: true, At: time.UnixMicro(1_796_537_406_123_457),
		Buckets: []Bucket{
			{Kind: KindInput, Refund: true, Spec: bucket.Spec{Name: "in", Limit: 30000, Period: time.Minute, Cost: 12, Slot: 3}},
			{Kind: KindOutput, Refund: true, Feedback: true, Spec: bucket.Spec{Name: "out", Limit: 8000, Period: time.Minute, Cost: 1280}},
			{Kind: KindTokens, Feedback: true, Refund: true, Spec: bucket.Spec{Name: "openai-per-model:t|m6:gpt-4o", Limit: 40000, Period: time.Minute, Burst: 50000, Cost: 268}},
			{Kind: KindRequests, Spec: bucket.Spec{Name: "r", Algorithm: bucket.SlidingWindow, Limit: 5, Period: 1500 * time.Millisecond, Cost: 1}},
			{Kind: KindTokens, Refund: true, Spec: bucket.Spec{Name: "q", Algorithm: bucket.Quota, Calendar: bucket.Month, Limit: 5e7, Cost: 268}},
			{Kind: KindTokens, Spec: bucket.Spec{Name: "d", Algorithm: bucket.Quota, Calendar: bucket.Day, Limit: 5e7, Cost: 268}},
			{Kind: KindConcurrency, Spec: bucket.Spec{Name: "", Algorithm: bucket.Concurrency, Limit: 8, Period: 10 * time.Minute, Cost: 1}},
			{Kind: KindTokens, Feedback: true, Spec: bucket.Spec{Name: "pair", Limit: 1000, Period: time.Minute, Cost: 268, Slot: 1}},
			{Kind: KindRequests, Spec: bucket.Spec{Name: "pair", Limit: 10, Period: time.Minute, Cost: 1, Slot: bucket.MaxSlots}},
			{Kind: KindRequests, Spec: bucket.Spec{Name: "rpd", Algorithm: bucket.Quota, Calendar: bucket.Day, Zone: la, Limit: 1500, Cost: 1}},
		}}
	s := Encode(r)
	if !strings.Contains(s, " zAmerica/Los_Angeles ") || !strings.Contains(s, " 5cm@1796537406123457 ") {
		t.Errorf("the zone is not in %q", s)
	}
	got, err := Decode(s)
	if err != nil {
		t.Fatalf("Decode(%q): %v", s, err)
	}
	if diff := cmp.Diff(r, got, zones); diff != "" {
		t.Errorf("round trip of %q (-want +got):\n%s", s, diff)
	}
	none := &Reservation{Tag: "", Weight: 1, Buckets: []Bucket{}}
	if got, err := Decode(Encode(none)); err != nil || cmp.Diff(none, got) != "" {
		t.Errorf("empty reservation: %+v, %v", got, err)
	}
}

// A reservation with a price is r3, its price and cost buckets read back; one without stays r2.
func TestRoundTripPrice(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	r := &Reservation{Tag: "anthropic", Model: "claude-sonnet-4-5", Prompt: 1000, Output: 500, Weight: 1, CacheReadsFree: true,
		Price: &price.Price{Input: 3_000_000, CachedInput: 300_000, CacheWrite: 3_750_000, CacheWrite1h: 6_000_000, Output: 15_000_000, Request: 7},
		Buckets: []Bucket{
			{Kind: KindCost, Refund: true, Spec: bucket.Spec{Name: "budget:$|t1:a", Algorithm: bucket.Quota, Calendar: bucket.Month, Zone: paris, Limit: 250_000_000, Cost: 11257}},
			{Kind: KindRequests, Spec: bucket.Spec{Name: "r", Limit: 10, Period: time.Minute, Cost: 1}},
		}}
	s := Encode(r)
	if !strings.HasPrefix(s, "r3 anthropic - 1000 500 claude-sonnet-4-5 1c 3000000/300000/3750000/6000000/15000000/7 $ ") {
		t.Errorf("encoding %q", s)
	}
	got, err := Decode(s)
	if err != nil {
		t.Fatalf("Decode(%q): %v", s, err)
	}
	if diff := cmp.Diff(r, got, zones); diff != "" {
		t.Errorf("round trip of %q (-want +got):\n%s", s, diff)
	}
	r.Price, r.Buckets = nil, r.Buckets[1:]
	if s := Encode(r); !strings.HasPrefix(s, "r2 ") {
		t.Errorf("without a price: %q", s)
	}
	for _, bad := range []string{"r3 openai - 1 2 m 1 1/2/3/4/5", "r3 openai - 1 2 m 1 1/2/3/4/5/x", "r3 openai - 1 2 m 1 -1/2/3/4/5/6", "r3 openai - 1 2 m 1"} {
		if _, err := Decode(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%q): %v, want ErrMalformed", bad, err)
		}
	}
}

// A reservation of the version before profiles reads as an unweighted profile counting cache
// reads.
func TestDecodeVersion1(t *testing.T) {
	t.Parallel()
	got, err := Decode("r1 openai - 12 256 gpt-4o t t 1000 60000 0 268 n")
	want := &Reservation{Tag: "openai", Model: "gpt-4o", Prompt: 12, Output: 256, Weight: 1,
		Buckets: []Bucket{{Kind: KindTokens, Spec: bucket.Spec{Name: "n", Limit: 1000, Period: time.Minute, Cost: 268}}}}
	if err != nil || cmp.Diff(want, got) != "" {
		t.Errorf("r1: %+v, %v; diff %s", got, err, cmp.Diff(want, got))
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "r2 openai - 1 2 m", "r2 openai - 1 2 m 0", "r2 openai - 1 2 m x", "r2 openai - 1 2 m 1001c",
		"r2 openai - 1 2 m c", "r2 openai - 1 2 m 1 t t 1 1 0 1", "r3 openai - 1 2 m 1", "r1 openai - x 2 m", "r1 openai - 1 2 m t", "r1 openai - 1 2 m x t 1 1 0 1 n",
		"r1 openai - 1 2 m t q 1 1 0 1 n", "r1 openai - 1 2 m t t 1 1 0 z n", "r2 openai - 1 2 m 1 r d 1 zMars/X 0 1 n", "r2 openai - 1 2 m 1 r t 1 zUTC 0 1 n", "r2 openai - 1 2 m 1 r d 1 z 0 1 n", "r1 op%zz - 1 2 m", "r1 op% - 1 2 m%4",
		"r1 openai - 1 2 m t t0 1 1 0 1 n", "r2 openai - 1 2 m 1@", "r2 openai - 1 2 m 1@x", "r2 openai - 1 2 m 1@-5", "r2 openai - 1 2 m 1@0", "r2 openai - 1 2 m @5", "r1 openai - 1 2 m t t5 1 1 0 1 n", "r1 openai - 1 2 m t s1 1 1 0 1 n", "r1 openai - 1 2 m t t12 1 1 0 1 n"} {
		if _, err := Decode(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Decode(%q): %v, want ErrMalformed", s, err)
		}
	}
}

// Decode's errors name the malformed field, never its text.
func TestDecodeErrorsCarryNoText(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"r1 openai - 12SECRET 2 m", "r1 openai - 1 SECRET m", "r1 op%zzSECRET - 1 2 m",
		"r1 openai - 1 2 m%4SECRET", "r1 openai - 1 2 m SECRET t 1 1 0 1 n", "r1 openai - 1 2 m t SECRET 1 1 0 1 n",
		"r1 openai - 1 2 m t t SECRET 1 0 1 n", "r1 openai - 1 2 m t t 1 1 0 1 tenant%SECRET", "r1 openai - 99999999999999999999SECRET 2 m"} {
		_, err := Decode(s)
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("Decode(%q): %v, want ErrMalformed", s, err)
		}
		if strings.Contains(err.Error(), "SECRET") {
			t.Errorf("Decode(%q): %v: the error repeats the field", s, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("r1 openai abc 1 2 gpt-4o t tf 100 60000 0 5 name c c 3 600000 0 1 x")
	f.Add("r2 anthropic abc 1 2 claude 5c i t3u 100 60000 0 5 name o t4uf 10 60000 0 50 name")
	f.Add("r2 openai - 1 2 gpt-4o 1@1796537406123457 t su 100 60000 0 5 name")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Decode(s)
		if err != nil {
			return
		}
		// Whatever decodes encodes to something that decodes to the same.
		again, err := Decode(Encode(r))
		if err != nil {
			t.Fatalf("re-decoding %q: %v", Encode(r), err)
		}
		if diff := cmp.Diff(r, again); diff != "" {
			t.Fatalf("%q: (-first +again)\n%s", s, diff)
		}
	})
}
