package reconcile

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// compressEvents encodes events in one coding as a provider's server streams them: the
// compressor flushed after each event, and the stream's end (its trailer) not written, as when
// the reply is cut before it.
func compressEvents(t testing.TB, coding string, events []string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := newCompressor(t, coding, &buf)
	for _, ev := range events {
		if _, err := w.Write([]byte(ev)); err != nil {
			t.Fatal(err)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// cutAfter is b in chunks of n bytes, none of them ending the stream: the stream ends without
// end_of_stream, as Envoy ends it when the client goes away before the reply's end.
func cutAfter(b []byte, n int) []*extprocv3.ProcessingRequest {
	var out []*extprocv3.ProcessingRequest
	for len(b) > 0 {
		k := min(n, len(b))
		out = append(out, body(string(b[:k]), false))
		b = b[k:]
	}
	return out
}

// A stream that ends before the reply's end settles from its usage when its event stream had
// said that it was over: the OpenAI SDKs close the connection at data: [DONE], often before
// the reply's last chunk (or a compressed stream's trailer) reaches Envoy, which then ends the
// ext_proc stream without end_of_stream. A reply cut before [DONE] keeps its reservation, and
// so does one in a dialect whose streams never say it (Anthropic: a cut stream's usage may be
// partial).
func TestCutStreamSettles(t *testing.T) {
	t.Parallel()
	content := `data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n"
	usage := `data: {"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":40,"total_tokens":240}}` + "\n\n"
	done := "data: [DONE]\n\n"
	openai := []string{content, content, usage, done}
	anthropic := []string{"event: message_start\ndata: " + `{"type":"message_start","message":{"usage":{"input_tokens":200,"output_tokens":1}}}` + "\n\n",
		"event: message_delta\ndata: " + `{"type":"message_delta","usage":{"output_tokens":40}}` + "\n\n"}
	type tc struct {
		name     string
		provider string
		coding   string // "" for none
		events   []string
		tokens   int64
		result   result
	}
	cases := []tc{
		{"after_done", "openai", "", openai, 9760, resultUsage},
		{"inside_the_done_event", "openai", "", []string{content, usage, "data: [DONE]"}, 9760, resultUsage},
		{"before_done", "openai", "", []string{content, usage}, 9000, resultNoUsage},
		{"done_without_usage", "openai", "", []string{content, done}, 9000, resultNoUsage},
		{"anthropic_never_says_done", "anthropic", "", anthropic, 9000, resultNoUsage},
	}
	for _, c := range []string{"gzip", "deflate", "br", "zstd"} {
		cases = append(cases, tc{c + "/after_done", "openai", c, openai, 9760, resultUsage},
			tc{c + "/before_done", "openai", c, []string{content, usage}, 9000, resultNoUsage})
	}
	for _, c := range cases {
		for _, observe := range []bool{true, false} {
			for _, n := range []int{5, 1 << 20} {
				t.Run(fmt.Sprintf("%s/%s/%d", c.name, map[bool]string{true: "observability", false: "streamed"}[observe], n), func(t *testing.T) {
					t.Parallel()
					m := NewMetrics(prometheus.NewRegistry())
					e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
					e.provider = c.provider
					r := e.reserve(t, false)
					hdrs := []string{":status", "200", "content-type", "text/event-stream"}
					b := []byte(strings.Join(c.events, ""))
					if c.coding != "" {
						hdrs = append(hdrs, "content-encoding", c.coding)
						b = compressEvents(t, c.coding, c.events)
					}
					e.run(t, r, observe, append([]*extprocv3.ProcessingRequest{requestHeaders(), answered(detailsViaUpstream, hdrs...)}, cutAfter(b, n)...)...)
					if got := e.remaining(t, tpm); got != c.tokens {
						t.Errorf("tokens remaining %d, want %d", got, c.tokens)
					}
					if got := e.remaining(t, live); got != 1 {
						t.Errorf("in-flight slots %d, want 1: the lease was not released", got)
					}
					var got dto.Metric
					if err := m.settledTotal.WithLabelValues(string(c.result), c.provider).Write(&got); err != nil {
						t.Fatal(err)
					}
					if got.GetCounter().GetValue() != 1 {
						t.Errorf("settled{result=%q} = %v, want 1", c.result, got.GetCounter().GetValue())
					}
				})
			}
		}
	}
}

// A compressed event stream's decoder stops at data: [DONE], releasing its slot among the
// replica's decoders (Options.MaxDecoders) at once: the reply of a client that hung up at [DONE]
// stays open until Envoy's deferred close, and holding a decoder until then would leave later
// replies undecoded (decode_busy) under load.
func TestDecoderStopsAtDone(t *testing.T) {
	t.Parallel()
	usage := `data: {"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":40,"total_tokens":240}}` + "\n\n"
	for _, coding := range []string{"gzip", "deflate", "br", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			t.Parallel()
			c := parseCodings(coding, AllEncodings)
			if c.n != 1 {
				t.Fatalf("codings %+v", c)
			}
			p := &parser{sse: true, limit: 1 << 20}
			released := make(chan struct{})
			d := startDecoder(c, p, 1<<20, func() { close(released) })
			d.write(compressEvents(t, coding, []string{`data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n", usage, "data: [DONE]\n\n"}))
			select {
			case <-released:
			case <-time.After(10 * time.Second):
				t.Fatal("the decoder is still held after [DONE]")
			}
			d.abort()
			if u, ok := p.cut(); !ok || u.Total != 240 {
				t.Errorf("usage %+v %v, want 240 tokens", u, ok)
			}
		})
	}
}

// A stream settles at data: [DONE], not when Envoy ends it: the lease of a reply whose client
// hung up at [DONE] comes back at once, not at Envoy's deferred close seconds later. A
// compressed reply too: its decoder has decoded each chunk before the next message is read.
func TestSettlesAtDone(t *testing.T) {
	t.Parallel()
	events := []string{`data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":200,"completion_tokens":40,"total_tokens":240}}` + "\n\n", "data: [DONE]\n\n"}
	for _, coding := range []string{"", "gzip", "deflate", "br", "zstd"} {
		t.Run("coding="+coding, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			r := e.reserve(t, false)
			hdrs := []string{":status", "200", "content-type", "text/event-stream"}
			b := []byte(strings.Join(events, ""))
			if coding != "" {
				hdrs = append(hdrs, "content-encoding", coding)
				b = compressEvents(t, coding, events)
			}
			st, err := e.client.Process(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = st.CloseSend() }()
			for _, m := range append([]*extprocv3.ProcessingRequest{requestHeaders(), answered(detailsViaUpstream, hdrs...)}, cutAfter(b, 7)...) {
				m = proto.Clone(m).(*extprocv3.ProcessingRequest)
				m.MetadataContext = metadata(r)
				m.ObservabilityMode = true
				if err := st.Send(m); err != nil {
					t.Fatal(err)
				}
			}
			// The stream stays open and nothing follows [DONE]; the settlement must not wait.
			deadline := time.Now().Add(5 * time.Second)
			for e.remaining(t, live) != 1 || e.remaining(t, tpm) != 9760 {
				if time.Now().After(deadline) {
					t.Fatalf("stream open after [DONE]: in-flight slots %d (want 1), tokens %d (want 9760)", e.remaining(t, live), e.remaining(t, tpm))
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
