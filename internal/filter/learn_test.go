package filter

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// learner is a Learner with fixed figures, recording the keys asked.
type learner struct {
	mu    sync.Mutex
	by    map[learn.Key]learn.Learned
	asked []learn.Key
}

func (l *learner) Factor(k learn.Key) learn.Learned {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked = append(l.asked, k)
	if v, ok := l.by[k]; ok {
		return v
	}
	return learn.Learned{Factor: 1}
}

const learnLimits = `
pricing: {learn: {enabled: %s}}
rules:
  - name: claude
    match: {provider: anthropic}
    per: [model]
    input_tokens: {limit: 1000000, period: minute}
`

// learnedPrompt decides an Anthropic Messages request and returns its reservation's prompt, the
// input bucket's cost and the metadata's static estimate (0 without it).
func learnedPrompt(t *testing.T, e *env, model string) (prompt, cost, static int64) {
	t.Helper()
	body := `{"model":"` + model + `","max_tokens":50,"messages":[{"role":"user","content":"` + strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40) + `"}]}`
	resp := e.answer(t, context.Background(), messages(body)).Response()
	if d := decisionOf(resp); d != decisionAllowed {
		t.Fatalf("decision %q", d)
	}
	md := resp.GetDynamicMetadata().GetFields()
	r := reservationOf(t, resp)
	for _, b := range r.Buckets {
		if b.Kind == reservation.KindInput {
			cost = b.Spec.Cost
		}
	}
	if v, ok := md[reservation.MetadataStaticKey]; ok {
		static = int64(v.GetNumberValue())
		if got := md[reservation.MetadataReasonKey].GetStringValue(); got != "anthropic_estimate" {
			t.Errorf("estimate_reason %q", got)
		}
	}
	return r.Prompt, cost, static
}

// An estimated prompt is priced at its learned factor once the factor is learned, its static
// estimate in the metadata for the response path; before, at its static estimate with the
// static figure in the metadata all the same; with learning off, nothing changes.
func TestLearnedPricing(t *testing.T) {
	t.Parallel()
	const model = "claude-sonnet-4-5"
	key := learn.Key{Provider: "anthropic", Model: model, Reason: "anthropic_estimate"}

	off := newEnv(t, strings.Replace(learnLimits, "%s", "false", 1), Options{Learner: &learner{}})
	static, cost, st := learnedPrompt(t, off, model)
	if st != 0 || cost != static || static <= 0 {
		t.Fatalf("learning off: prompt %d cost %d static %d; want the static price and no static field", static, cost, st)
	}

	l := &learner{by: map[learn.Key]learn.Learned{}}
	on := newEnv(t, strings.Replace(learnLimits, "%s", "true", 1), Options{Learner: l})
	if p, c, st := learnedPrompt(t, on, model); p != static || c != static || st != static {
		t.Fatalf("not learned yet: prompt %d cost %d static %d; want %d each", p, c, st, static)
	}
	l.mu.Lock()
	if len(l.asked) != 1 || l.asked[0] != key {
		t.Fatalf("asked %+v, want %+v", l.asked, key)
	}
	l.by[key] = learn.Learned{Factor: 0.8, Learned: true, Samples: 100, Quantile: 0.8}
	l.mu.Unlock()
	want := int64(math.Ceil(float64(static) * 0.8))
	if p, c, st := learnedPrompt(t, on, model); p != want || c != want || st != static {
		t.Fatalf("learned 0.8: prompt %d cost %d static %d; want %d %d %d", p, c, st, want, want, static)
	}
	// A model name too long to learn keeps its static price, and is never asked about.
	long := strings.Repeat("m", maxLearnedModel+1)
	if _, _, st := learnedPrompt(t, on, long); st != 0 {
		t.Fatalf("a long model name learned (static %d)", st)
	}
	for _, k := range l.asked {
		if k.Model == long {
			t.Fatal("a long model name was asked about")
		}
	}
}

// An exact count is never learned: OpenAI's chat prompt is counted with its own encoding.
func TestLearnedPricingExact(t *testing.T) {
	t.Parallel()
	l := &learner{}
	e := newEnv(t, `
pricing: {learn: {enabled: true}}
rules:
  - name: gpt
    match: {provider: openai}
    tokens: {limit: 1000000, period: minute}
`, Options{Learner: l})
	resp := e.answer(t, context.Background(), loadRequest(t, "chat")).Response()
	if _, ok := resp.GetDynamicMetadata().GetFields()[reservation.MetadataStaticKey]; ok || len(l.asked) != 0 {
		t.Fatalf("an exact count was learned: %v, asked %+v", resp.GetDynamicMetadata(), l.asked)
	}
}

// downStore is a learn.Store that is away.
type downStore struct{}

func (downStore) Add(context.Context, []learn.Delta, time.Duration) error { return errors.New("down") }
func (downStore) Load(context.Context, []learn.Key) ([]learn.Dist, error) {
	return nil, errors.New("down")
}

// With the real Shared: a ratio learned is priced at; the store away, the static estimate.
func TestLearnedPricingStoreAway(t *testing.T) {
	t.Parallel()
	const model = "claude-sonnet-4-5"
	key := learn.Key{Provider: "anthropic", Model: model, Reason: "anthropic_estimate"}
	pol := learn.Policy{Quantile: 0.99, MinSamples: 10, Min: 0.5, Max: 1.5, HalfLife: time.Hour}
	var mu sync.Mutex
	var store learn.Store = learn.NewMemory(nil)
	sh := learn.NewShared(&swapStore{mu: &mu, s: &store}, learn.SharedOptions{Policy: pol})
	e := newEnv(t, strings.Replace(learnLimits, "%s", "true", 1), Options{Learner: sh})
	static, _, _ := learnedPrompt(t, e, model)
	for range 20 {
		sh.Observe(key, static*3/4, static)
	}
	if err := sh.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p, _, _ := learnedPrompt(t, e, model); p >= static || p < static*3/4 {
		t.Fatalf("learned 0.75: prompt %d of static %d", p, static)
	}
	mu.Lock()
	store = downStore{}
	mu.Unlock()
	if err := sh.Sync(context.Background()); err == nil {
		t.Fatal("Sync on a store that is away: no error")
	}
	if p, _, _ := learnedPrompt(t, e, model); p != static {
		t.Fatalf("store away: prompt %d, want the static %d", p, static)
	}
}

type swapStore struct {
	mu *sync.Mutex
	s  *learn.Store
}

func (w *swapStore) get() learn.Store { w.mu.Lock(); defer w.mu.Unlock(); return *w.s }
func (w *swapStore) Add(ctx context.Context, d []learn.Delta, h time.Duration) error {
	return w.get().Add(ctx, d, h)
}
func (w *swapStore) Load(ctx context.Context, k []learn.Key) ([]learn.Dist, error) {
	return w.get().Load(ctx, k)
}

// A tenant budget with reserve_output: learned reserves the learned quantile of the model's
// completions (never above the request's max_tokens, and instead of the default when it names
// none), and the provider-mirroring rule next to it reserves max_tokens; before the sample floor
// both reserve max_tokens. The metadata asks the response path to record the completion.
func TestLearnedOutput(t *testing.T) {
	t.Parallel()
	const model = "claude-sonnet-4-5"
	l := &learner{by: map[learn.Key]learn.Learned{}}
	e := newEnv(t, `
pricing: {default_output_tokens: 4096}
rules:
  - name: team
    match: {provider: anthropic}
    per: [tenant]
    output_tokens: {limit: 1000000, period: minute}
    reserve_output: learned
  - name: claude
    match: {provider: anthropic}
    per: [model]
    output_tokens: {limit: 1000000, period: minute}
`, Options{Learner: l})
	costs := func(maxTokens string) (team, claude int64, flagged bool) {
		t.Helper()
		body := `{"model":"` + model + `",` + maxTokens + `"messages":[{"role":"user","content":"Hi"}]}`
		resp := e.answer(t, context.Background(), messages(body)).Response()
		if d := decisionOf(resp); d != decisionAllowed {
			t.Fatalf("decision %q", d)
		}
		md := resp.GetDynamicMetadata().GetFields()
		r := reservationOf(t, resp)
		for _, b := range r.Buckets {
			switch {
			case b.Kind != reservation.KindOutput:
			case strings.Contains(b.Spec.Name, "team"):
				team = b.Spec.Cost
			default:
				claude = b.Spec.Cost
			}
		}
		return team, claude, md[reservation.MetadataLearnOutputKey].GetBoolValue()
	}
	if team, claude, flagged := costs(`"max_tokens":1000,`); team != 1000 || claude != 1000 || !flagged {
		t.Fatalf("before learning: team %d claude %d flagged %v; want 1000 1000 true", team, claude, flagged)
	}
	l.mu.Lock()
	l.by[learn.Key{Provider: "anthropic", Model: model, Reason: learn.OutputReason}] = learn.Learned{Factor: 1.5, Learned: true, Samples: 100, Quantile: 200.0 / learn.OutputScale}
	l.mu.Unlock()
	for _, tc := range []struct {
		max          string
		team, claude int64
	}{
		{`"max_tokens":1000,`, 200, 1000},
		{`"max_tokens":50,`, 50, 50},
		{``, 200, 4096}, // no maximum: the learned quantile instead of the default
	} {
		if team, claude, _ := costs(tc.max); team != tc.team || claude != tc.claude {
			t.Errorf("%s: team %d claude %d; want %d %d", tc.max, team, claude, tc.team, tc.claude)
		}
	}
}
