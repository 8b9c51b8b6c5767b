package tokens

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tiktoken"
)

// conversation returns a chat body (OpenAI or Anthropic) with a system prompt, turns earlier
// messages and a last user message.
func conversation(anthropic bool, system string, earlier []string, last string) []byte {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	var msgs []msg
	if !anthropic {
		msgs = append(msgs, msg{"system", system})
	}
	for i, m := range earlier {
		msgs = append(msgs, msg{[]string{"user", "assistant"}[i%2], m})
	}
	msgs = append(msgs, msg{"user", last})
	var v any = map[string]any{"model": "gpt-4o", "messages": msgs, "max_tokens": 100}
	if anthropic {
		v = map[string]any{"model": "claude-sonnet-4-5", "system": system, "messages": msgs, "max_tokens": 100}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// The cache serves what clients resend (system prompt, earlier messages) and never the last
// message: a slot poisoned with a wrong count shows which texts were looked up.
func TestCountCacheServesResentTextsOnly(t *testing.T) {
	for _, anthropic := range []bool{false, true} {
		path := "/v1/chat/completions"
		if anthropic {
			path = "/v1/messages"
		}
		p := newPricer(t, Options{})
		plain := newPricer(t, Options{CountCache: -1})
		system := strings.Repeat("You are a careful assistant. ", 12)
		earlier := []string{strings.Repeat("What does the shared budget cover? ", 10), strings.Repeat("Every replica's requests. ", 12)}
		last := strings.Repeat("And the last question of this turn? ", 10)
		body := conversation(anthropic, system, earlier, last)
		in := &Input{Path: path, Body: body}
		want := plain.Estimate(in)
		if got := p.Estimate(in); got != want {
			t.Fatalf("anthropic=%v: first %+v, uncached %+v", anthropic, got, want)
		}
		if got := p.Estimate(in); got != want {
			t.Fatalf("anthropic=%v: cached %+v, uncached %+v", anthropic, got, want)
		}
		poison := func(text string) {
			enc := tiktoken.O200K
			if anthropic {
				enc = tiktoken.CL100K
			}
			p.cfg.Cache.Store([]byte(text), enc, 0)
		}
		poison(last)
		if got := p.Estimate(in); got != want {
			t.Fatalf("anthropic=%v: the last message was looked up: %+v, want %+v", anthropic, got, want)
		}
		poison(earlier[0])
		poison(system)
		if got := p.Estimate(in); got.PromptTokens >= want.PromptTokens {
			t.Fatalf("anthropic=%v: earlier messages and system prompt not looked up: %d >= %d", anthropic, got.PromptTokens, want.PromptTokens)
		}
	}
}

// Approximation flags survive the cache: invalid UTF-8 and long uncuttable runs in resent text.
func TestCountCacheKeepsReasons(t *testing.T) {
	p := newPricer(t, Options{})
	plain := newPricer(t, Options{CountCache: -1})
	for _, earlier := range []string{
		strings.Repeat("bad \xff bytes ", 40),
		strings.Repeat("ab", pricing.MaxPiece/2+10), // one uncuttable piece, not one byte repeated
	} {
		body := conversation(false, "sys", []string{earlier, "ok"}, "last")
		if strings.Contains(earlier, "\xff") {
			body = []byte(strings.Replace(string(body), `\ufffd`, "\xff", -1)) // json.Marshal replaced it
		}
		in := &Input{Path: "/v1/chat/completions", Body: body}
		want := plain.Estimate(in)
		if want.Reason == "" {
			t.Fatalf("test body priced exact: %+v", want)
		}
		for i := 0; i < 2; i++ {
			if got := p.Estimate(in); got != want {
				t.Fatalf("call %d: %+v, uncached %+v", i, got, want)
			}
		}
	}
}

// conversationBodies are 8 turns of each of 64 conversations: a system prompt, 10 earlier
// messages as every turn sends them, and a new last question (8.6 KB each).
func conversationBodies() [][]byte {
	const convs = 64
	system := strings.Repeat("You are a helpful assistant for the team's internal tools. ", 20)
	bodies := make([][]byte, 0, convs*8)
	for c := 0; c < convs; c++ {
		var earlier []string
		for len(earlier) < 10 {
			earlier = append(earlier, fmt.Sprintf("Conversation %d, turn %d: %s", c, len(earlier), strings.Repeat("please summarize the shared budget and its replicas. ", 12)))
		}
		for turn := 0; turn < 8; turn++ {
			bodies = append(bodies, conversation(false, system, earlier, fmt.Sprintf("New question %d in conversation %d: %s", turn, c, strings.Repeat("what changes next? ", 20))))
		}
	}
	return bodies
}

// TestConversationBenchmarkSmoke keeps BenchmarkConversation's workload valid in go test: every
// body prices the same with and without the count cache, exactly, and the cache serves the
// resent messages (a later turn of a conversation finds them).
func TestConversationBenchmarkSmoke(t *testing.T) {
	t.Parallel()
	p, plain := newPricer(t, Options{}), newPricer(t, Options{CountCache: -1})
	for i, body := range conversationBodies() {
		in := &Input{Path: "/v1/chat/completions", Body: body}
		got, want := p.Estimate(in), plain.Estimate(in)
		if got != want || !got.Exact || got.PromptTokens < 1500 {
			t.Fatalf("body %d: cached %+v, uncached %+v", i, got, want)
		}
	}
	filled := p.cfg.Cache.Filled()
	// 641 resent texts (one system prompt, 10 earlier messages per conversation); a few share a
	// slot of the direct-mapped table (about 3 expected in 65,536 slots).
	if filled < 620 || filled > 641 {
		t.Fatalf("%d cache slots filled, want about 641", filled)
	}
}

// BenchmarkConversation prices 8 KB chat bodies of ongoing conversations, each with a new last
// message, with and without the count cache: what a chat client's requests cost.
func BenchmarkConversation(b *testing.B) {
	bodies := conversationBodies()
	for _, tc := range []struct {
		name  string
		cache int
	}{{"uncached", -1}, {"cached", 0}} {
		b.Run(tc.name, func(b *testing.B) {
			p := newPricer(b, Options{CountCache: tc.cache})
			var n int64
			for _, body := range bodies {
				n += int64(len(body))
				p.Estimate(&Input{Path: "/v1/chat/completions", Body: body}) // warm, as a running service is
			}
			b.SetBytes(n / int64(len(bodies)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				p.Estimate(&Input{Path: "/v1/chat/completions", Body: bodies[i%len(bodies)]})
			}
		})
	}
}
