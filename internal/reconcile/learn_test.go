package reconcile

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

type observation struct {
	k                learn.Key
	actual, estimate int64
}

// learnRecorder is a Learner that records what it is given.
type learnRecorder struct {
	mu  sync.Mutex
	got []observation
}

func (o *learnRecorder) Observe(k learn.Key, actual, estimate int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.got = append(o.got, observation{k, actual, estimate})
}

// A successful response whose metadata carries the static estimate gives the provider's input
// count against it to the Learner, and observes the static estimate's error; a response without
// the field, with a bad one, or a provider error gives nothing.
func TestLearnedObserved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		static, reason *structpb.Value // nil: absent
		status         string
		want           []observation
	}{
		{"learned", structpb.NewNumberValue(250), structpb.NewStringValue("anthropic_estimate"), "200",
			[]observation{{learn.Key{Provider: "openai", Model: "gpt-4o", Reason: "anthropic_estimate"}, 220, 250}}},
		{"not learned", nil, structpb.NewStringValue("anthropic_estimate"), "200", nil},
		{"no reason", structpb.NewNumberValue(250), nil, "200", nil},
		{"negative", structpb.NewNumberValue(-5), structpb.NewStringValue("tools"), "200", nil},
		{"not a number", structpb.NewStringValue("250"), structpb.NewStringValue("tools"), "200", nil},
		{"provider error", structpb.NewNumberValue(250), structpb.NewStringValue("tools"), "500", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			reg := prometheus.NewRegistry()
			obs := &learnRecorder{}
			e := newEnvWith(t, nil, func(o *Options) { o.Metrics, o.Learner = NewMetrics(reg), obs })
			md := metadata(e.reserve(t, false)) // prompt 200, output 800
			f := md.FilterMetadata[reservation.MetadataNamespace].Fields
			if tc.static != nil {
				f[reservation.MetadataStaticKey] = tc.static
			}
			if tc.reason != nil {
				f[reservation.MetadataReasonKey] = tc.reason
			}
			runWith(t, e, md, headers(":status", tc.status),
				body(`{"usage":{"prompt_tokens":220,"completion_tokens":400,"total_tokens":620}}`, true))
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.got) != len(tc.want) || (len(tc.want) > 0 && obs.got[0] != tc.want[0]) {
				t.Fatalf("observed %+v, want %+v", obs.got, tc.want)
			}
			h := histogram(t, reg, "llm_ratelimit_prompt_static_estimate_ratio", nil)
			if len(tc.want) == 0 {
				if h != nil {
					t.Fatalf("static ratio observed %d", h.GetSampleCount())
				}
				return
			}
			if h == nil || h.GetSampleCount() != 1 || h.GetSampleSum() != 220.0/250 {
				t.Fatalf("static ratio %v, want one 0.88", h)
			}
		})
	}
}

// A response to a request whose rule reserves the learned output records the completion's
// tokens for the model (as a ratio to learn.OutputScale); a provider error records nothing.
func TestLearnedOutputObserved(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status string
		want   []observation
	}{
		{"200", []observation{{learn.Key{Provider: "openai", Model: "gpt-4o", Reason: learn.OutputReason}, 400, learn.OutputScale}}},
		{"429", nil},
	} {
		obs := &learnRecorder{}
		e := newEnvWith(t, nil, func(o *Options) { o.Learner = obs })
		md := metadata(e.reserve(t, false))
		md.FilterMetadata[reservation.MetadataNamespace].Fields[reservation.MetadataLearnOutputKey] = structpb.NewBoolValue(true)
		runWith(t, e, md, headers(":status", tc.status),
			body(`{"usage":{"prompt_tokens":220,"completion_tokens":400,"total_tokens":620}}`, true))
		obs.mu.Lock()
		if len(obs.got) != len(tc.want) || (len(tc.want) > 0 && obs.got[0] != tc.want[0]) {
			t.Errorf("%s: observed %+v, want %+v", tc.status, obs.got, tc.want)
		}
		obs.mu.Unlock()
	}
}
