package replay

import (
	"bufio"
	"container/heap"
	"io"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
)

// Traffic describes generated traffic (Generate): for benchmarks and trials of the replay.
type Traffic struct {
	// Start is the first request's time; Duration how long the traffic lasts; RPS its rate.
	Start    time.Time
	Duration time.Duration
	RPS      float64
	// Tenants is how many tenants send it (t-000...), uniformly. Default 20.
	Tenants int
	// Seed makes the traffic: the same seed, the same lines.
	Seed uint64
}

// generatedModels are the models of generated traffic, with their provider and API.
var generatedModels = [...][3]string{
	{"openai", "chat_completions", "gpt-4o"},
	{"openai", "chat_completions", "gpt-4o-mini"},
	{"openai", "chat_completions", "gpt-4.1-mini"},
	{"anthropic", "messages", "claude-sonnet-4-5"},
}

// Generate writes the decision log of t as the service would have recorded it, every request
// allowed: arrivals at exponential intervals (Poisson at t.RPS), prompts of 100 to 4,000
// tokens, max_tokens of 256 to 2,048, and each response settled 0.5 to 20 s later with an output
// of 5% to 60% of max_tokens. It returns the number of decisions written.
func Generate(w io.Writer, t Traffic) (int64, error) {
	if t.Tenants <= 0 {
		t.Tenants = 20
	}
	rng := rand.New(rand.NewPCG(t.Seed, t.Seed^0x9e3779b97f4a7c15))
	bw := bufio.NewWriterSize(w, 1<<20)
	tenants := make([]string, t.Tenants)
	for i := range tenants {
		tenants[i] = "t-" + pad3(i)
	}
	var buf []byte
	var due settlements
	var n int64
	end := t.Start.Add(t.Duration)
	at := t.Start
	for {
		at = at.Add(time.Duration(rng.ExpFloat64() / t.RPS * float64(time.Second)).Truncate(time.Microsecond))
		if !at.Before(end) {
			break
		}
		for due.Len() > 0 && !due[0].Time.After(at) {
			s := heap.Pop(&due).(decisionlog.Settlement)
			buf = decisionlog.AppendSettlement(buf[:0], &s)
			if _, err := bw.Write(buf); err != nil {
				return n, err
			}
		}
		m := generatedModels[rng.IntN(len(generatedModels))]
		n++
		d := decisionlog.Decision{Time: at, Provider: m[0], API: m[1], Model: m[2], Tenant: tenants[rng.IntN(len(tenants))],
			Priority: "default", Prompt: 100 + rng.Int64N(3900), Output: 256 + rng.Int64N(1793), Exact: m[0] == "openai",
			Decision: "allowed", Outcome: decisionlog.Allowed, ReservationID: "g-" + strconv.FormatInt(n, 16)}
		if m[0] == "openai" {
			d.Path = "/v1/chat/completions"
		} else {
			d.Path, d.Reason = "/v1/messages", "anthropic_estimate"
		}
		buf = decisionlog.AppendDecision(buf[:0], &d)
		if _, err := bw.Write(buf); err != nil {
			return n, err
		}
		out := d.Output * (5 + rng.Int64N(56)) / 100
		heap.Push(&due, decisionlog.Settlement{Time: at.Add(500*time.Millisecond + time.Duration(rng.Int64N(int64(19500*time.Millisecond)))).Truncate(time.Microsecond),
			ReservationID: d.ReservationID, Provider: d.Provider, Model: d.Model, Status: 200, Found: true,
			Input: d.Prompt, Output: out})
	}
	for due.Len() > 0 {
		s := heap.Pop(&due).(decisionlog.Settlement)
		buf = decisionlog.AppendSettlement(buf[:0], &s)
		if _, err := bw.Write(buf); err != nil {
			return n, err
		}
	}
	return n, bw.Flush()
}

func pad3(i int) string {
	s := strconv.Itoa(i)
	for len(s) < 3 {
		s = "0" + s
	}
	return s
}

type settlements []decisionlog.Settlement

func (q settlements) Len() int           { return len(q) }
func (q settlements) Less(i, j int) bool { return q[i].Time.Before(q[j].Time) }
func (q settlements) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *settlements) Push(x any)        { *q = append(*q, x.(decisionlog.Settlement)) }
func (q *settlements) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}
