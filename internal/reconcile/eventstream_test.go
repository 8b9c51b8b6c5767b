package reconcile

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llm-ratelimit/llm-ratelimit/internal/reservation"
)

// eventMessage encodes one event stream message with string headers, as the Bedrock runtime
// writes them (the encoding's layout and CRCs: eventstream.go).
func eventMessage(payload string, kv ...string) []byte {
	var h []byte
	for i := 0; i < len(kv); i += 2 {
		h = append(h, byte(len(kv[i])))
		h = append(h, kv[i]...)
		h = append(h, 7)
		h = binary.BigEndian.AppendUint16(h, uint16(len(kv[i+1])))
		h = append(h, kv[i+1]...)
	}
	total := eventOverhead + len(h) + len(payload)
	m := binary.BigEndian.AppendUint32(nil, uint32(total))
	m = binary.BigEndian.AppendUint32(m, uint32(len(h)))
	m = binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
	m = append(append(m, h...), payload...)
	return binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
}

func event(typ, payload string) []byte {
	return eventMessage(payload, ":event-type", typ, ":content-type", "application/json", ":message-type", "event")
}

// chunk is an InvokeModelWithResponseStream chunk event carrying one model event.
func chunk(modelEvent string) []byte {
	return event("chunk", `{"bytes":"`+base64.StdEncoding.EncodeToString([]byte(modelEvent))+`","p":"abc"}`)
}

// converseStream is a ConverseStream reply: its last event, metadata, holds the usage.
var converseStream = bytes.Join([][]byte{
	event("messageStart", `{"role":"assistant","p":"ab"}`),
	event("contentBlockDelta", `{"contentBlockIndex":0,"delta":{"text":"Hello"},"p":"abcdef"}`),
	event("messageStop", `{"stopReason":"end_turn","p":"a"}`),
	event("metadata", `{"usage":{"inputTokens":100,"outputTokens":20,"totalTokens":170,"cacheReadInputTokens":50},"metrics":{"latencyMs":300},"p":"abcd"}`),
}, nil)

// invokeStream is an InvokeModelWithResponseStream reply of a Claude model.
var invokeStream = bytes.Join([][]byte{
	chunk(`{"type":"message_start","message":{"usage":{"input_tokens":18,"output_tokens":1}}}`),
	chunk(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}`),
	chunk(`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":16}}`),
	chunk(`{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":18,"outputTokenCount":16,` +
		`"invocationLatency":900,"firstByteLatency":300,"cacheReadInputTokenCount":100,"cacheWriteInputTokenCount":4}}`),
}, nil)

// read feeds b to an eventStream in chunks of n bytes and returns the payloads emitted.
func read(b []byte, n, limit int) ([]string, *eventStream) {
	e := &eventStream{limit: limit}
	var got []string
	for len(b) > 0 {
		k := min(n, len(b))
		e.write(b[:k], func(p []byte) { got = append(got, string(p)) })
		b = b[k:]
	}
	e.end()
	return got, e
}

func TestEventStreamFraming(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 16, 1 << 20} {
		got, e := read(converseStream, n, 1<<20)
		if len(got) != 4 || e.broken || got[3][:9] != `{"usage":` {
			t.Errorf("chunks of %d: %d payloads %q, broken %v", n, len(got), got, e.broken)
		}
	}
	big := event("contentBlockDelta", `{"delta":{"text":"`+string(bytes.Repeat([]byte("x"), 2000))+`"}}`)
	exception := eventMessage(`{"message":"slow down"}`, ":exception-type", "throttlingException", ":message-type", "exception")
	for _, c := range []struct {
		name     string
		stream   []byte
		payloads int
		broken   bool
		skipped  int
	}{
		// A message above the bound is read through, checked and skipped; the next one is read.
		{"over the bound", append(bytes.Clone(big), event("metadata", `{"usage":{}}`)...), 1, false, 1},
		// An exception is a message of the stream, not an event: nothing to read in it.
		{"exception", append(bytes.Clone(exception), event("metadata", `{}`)...), 1, false, 0},
		{"prelude CRC", flip(converseStream, 9), 0, true, 0},
		{"total length", flip(converseStream, 3), 0, true, 0},
		{"message CRC", flip(converseStream, 20), 0, true, 0},
		{"headers length above the total", func() []byte {
			m := binary.BigEndian.AppendUint32(nil, 16)
			m = binary.BigEndian.AppendUint32(m, 1)
			return binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
		}(), 0, true, 0},
		{"cut inside a message", converseStream[:len(converseStream)-3], 3, true, 0},
		{"cut inside a prelude", append(bytes.Clone(converseStream), 0, 0), 4, true, 0},
		{"bad header type", func() []byte {
			h := []byte{1, 'x', 42}
			m := binary.BigEndian.AppendUint32(nil, uint32(eventOverhead+len(h)))
			m = binary.BigEndian.AppendUint32(m, uint32(len(h)))
			m = binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
			m = append(m, h...)
			return binary.BigEndian.AppendUint32(m, crc32.ChecksumIEEE(m))
		}(), 0, true, 0},
	} {
		got, e := read(c.stream, 7, 1000)
		if len(got) != c.payloads || e.broken != c.broken || e.skipped != c.skipped {
			t.Errorf("%s: %d payloads, broken %v, skipped %d; want %d, %v, %d", c.name, len(got), e.broken, e.skipped, c.payloads, c.broken, c.skipped)
		}
	}
}

// Bedrock's streams settle by the profile the request was admitted with: Claude Sonnet 4's
// output weighted 5x, cache reads given back. A broken stream keeps its reservation and is
// counted.
func TestBedrockStreamsSettle(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		stream []byte
		want   int64
		broken bool
	}{
		// Input 100 + 50 read, 50 free: 100 + 20 x 5 counted of the 150 + 500 x 5 reserved.
		{"converse stream", converseStream, 10000 - 200, false},
		// Input 18 + 100 read + 4 written, the reads free: 22 + 16 x 5.
		{"invoke stream", invokeStream, 10000 - 102, false},
		{"broken", flip(invokeStream, 40), 10000 - 2650, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(prometheus.NewRegistry())
			e := newEnvWith(t, nil, func(o *Options) { o.Metrics = m })
			e.provider = "bedrock"
			r := e.hold(t, &reservation.Reservation{Tag: "bedrock", Model: "us.anthropic.claude-sonnet-4-20250514-v1:0",
				Prompt: 150, Output: 500, Weight: 5, CacheReadsFree: true, Buckets: []reservation.Bucket{
					{Kind: reservation.KindTokens, Refund: true, Spec: withCost(tpm, 150+500*5)},
				}})
			msgs := append([]*extprocv3.ProcessingRequest{headers(":status", "200", "content-type", "application/vnd.amazon.eventstream")},
				split(c.stream, 13)...)
			e.run(t, r, true, msgs...)
			if got := e.remaining(t, tpm); got != c.want {
				t.Errorf("tokens remaining %d, want %d", got, c.want)
			}
			if got := errorCount(t, m, reasonEventStreamBroken); (got == 1) != c.broken {
				t.Errorf("eventstream_broken counted %v times", got)
			}
		})
	}
}

func flip(b []byte, i int) []byte { c := bytes.Clone(b); c[i] ^= 1; return c }

func FuzzEventStream(f *testing.F) {
	f.Add(converseStream, uint16(5))
	f.Add(invokeStream, uint16(1))
	f.Add(event("x", "{}")[:15], uint16(2))
	f.Fuzz(func(t *testing.T, b []byte, n uint16) {
		const limit = 256
		e := &eventStream{limit: limit}
		step := int(n%64) + 1
		for len(b) > 0 {
			k := min(step, len(b))
			e.write(b[:k], func(p []byte) {
				if len(p) > limit {
					t.Fatalf("payload of %d bytes above the bound", len(p))
				}
			})
			if cap(e.buf) > 2*limit+64 {
				t.Fatalf("kept %d bytes for a bound of %d", cap(e.buf), limit)
			}
			b = b[k:]
		}
		e.end()
	})
}
