package reconcile

import (
	"bytes"
	"compress/zlib"
	"slices"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
)

// compressor is what a provider's server compresses a reply with.
type compressor interface {
	Write([]byte) (int, error)
	Flush() error
	Close() error
}

// newCompressor writes one coding into buf.
func newCompressor(t testing.TB, coding string, buf *bytes.Buffer) compressor {
	t.Helper()
	switch coding {
	case "gzip":
		return gzip.NewWriter(buf)
	case "deflate":
		return zlib.NewWriter(buf)
	case "deflate-raw":
		fw, _ := flate.NewWriter(buf, flate.DefaultCompression)
		return fw
	case "br":
		return brotli.NewWriter(buf)
	case "zstd":
		zw, err := zstd.NewWriter(buf)
		if err != nil {
			t.Fatal(err)
		}
		return zw
	}
	t.Fatalf("no coding %s", coding)
	return nil
}

// compress encodes b in one coding, as a provider's server would.
func compress(t testing.TB, coding string, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := newCompressor(t, coding, &buf)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// split cuts b into chunks of n bytes, the last one ending the stream.
func split(b []byte, n int) []*extprocv3.ProcessingRequest {
	var out []*extprocv3.ProcessingRequest
	for len(b) > n {
		out = append(out, body(string(b[:n]), false))
		b = b[n:]
	}
	return append(out, body(string(b), true))
}

func errorCount(t *testing.T, m *Metrics, r Reason) float64 {
	t.Helper()
	var c dto.Metric
	if err := m.errors.WithLabelValues(string(r)).Write(&c); err != nil {
		t.Fatal(err)
	}
	return c.GetCounter().GetValue()
}

// A compressed reply settles exactly like the same reply uncompressed, whatever the coding and
// however its chunks fall.
func TestCompressedRepliesSettle(t *testing.T) {
	t.Parallel()
	json := []byte(`{"id":"x","usage":{"prompt_tokens":200,"completion_tokens":100,"total_tokens":300}}`)
	sse := []byte(strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", 200) +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":200,\"completion_tokens\":40,\"total_tokens\":240}}\n\ndata: [DONE]\n\n")
	for _, tc := range []struct {
		coding, header string
	}{
		{"gzip", "gzip"}, {"gzip", "x-gzip"}, {"deflate", "deflate"}, {"deflate-raw", "deflate"},
		{"br", "br"}, {"zstd", "zstd"}, {"gzip", " GZIP , identity"},
	} {
		for _, typ := range []struct {
			ctype string
			body  []byte
			want  int64
		}{{"application/json", json, 9700}, {"text/event-stream", sse, 9760}} {
			for _, n := range []int{1, 7, 1 << 20} {
				t.Run(tc.coding+"/"+tc.header+"/"+typ.ctype, func(t *testing.T) {
					t.Parallel()
					e := newEnv(t)
					r := e.reserve(t, false)
					msgs := append([]*extprocv3.ProcessingRequest{headers(":status", "200", "content-type", typ.ctype,
						"content-encoding", tc.header)}, split(compress(t, tc.coding, typ.body), n)...)
					e.run(t, r, true, msgs...)
					if got := e.remaining(t, tpm); got != typ.want {
						t.Errorf("chunks of %d: tokens remaining %d, want %d", n, got, typ.want)
					}
				})
			}
		}
	}
	// Two codings stacked: br applied first, then gzip.
	t.Run("stacked", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		r := e.reserve(t, false)
		b := compress(t, "gzip", compress(t, "br", json))
		e.run(t, r, true, append([]*extprocv3.ProcessingRequest{headers(":status", "200", "content-encoding", "br, gzip")}, split(b, 5)...)...)
		if got := e.remaining(t, tpm); got != 9700 {
			t.Errorf("tokens remaining %d, want 9700", got)
		}
	})
}

// A compressed reply that cannot be read keeps its reservation (9000 of 10000 left), releases its
// lease, and is counted with its reason.
func TestUndecodableRepliesKeepTheirReservation(t *testing.T) {
	t.Parallel()
	json := []byte(`{"usage":{"prompt_tokens":200,"completion_tokens":100,"total_tokens":300}}`)
	gz := compress(t, "gzip", json)
	bomb := compress(t, "gzip", append(bytes.Repeat([]byte(" "), 3<<20), json...))
	for _, tc := range []struct {
		name     string
		encoding string
		body     []byte
		opts     func(*Options)
		reason   Reason
	}{
		{"unknown_coding", "compress", gz, nil, reasonDecodeUnsupported},
		{"disabled_coding", "gzip", gz, func(o *Options) { o.Settlement = &Settlement{KeepOnClientError: 0.25, MaxUsage: 1e6} }, reasonDecodeUnsupported},
		{"three_stacked", "gzip, gzip, gzip", gz, nil, reasonDecodeUnsupported},
		{"not_gzip", "gzip", json, nil, reasonDecodeCorrupt},
		{"truncated", "gzip", gz[:len(gz)-6], nil, reasonDecodeCorrupt},
		{"corrupt_zstd", "zstd", append([]byte{0x28, 0xb5, 0x2f, 0xfd}, bytes.Repeat([]byte{0xff}, 64)...), nil, reasonDecodeCorrupt},
		{"corrupt_br", "br", bytes.Repeat([]byte{0xff}, 64), nil, reasonDecodeCorrupt},
		{"bomb_over_bound", "gzip", bomb, func(o *Options) { o.MaxDecoded = 1 << 20 }, reasonDecodeOver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMetrics(prometheus.NewRegistry())
			e := newEnvWith(t, nil, func(o *Options) {
				o.Metrics = m
				if tc.opts != nil {
					tc.opts(o)
				}
			})
			r := e.reserve(t, false)
			e.run(t, r, true, append([]*extprocv3.ProcessingRequest{headers(":status", "200", "content-encoding", tc.encoding)},
				split(tc.body, 4096)...)...)
			if got := e.remaining(t, tpm); got != 9000 {
				t.Errorf("tokens remaining %d, want 9000 (the reservation kept)", got)
			}
			if got := e.remaining(t, live); got != 1 {
				t.Errorf("in-flight slots %d, want 1", got)
			}
			if got := errorCount(t, m, tc.reason); got != 1 {
				t.Errorf("%s counted %v times, want 1", tc.reason, got)
			}
		})
	}
}

// Beyond MaxDecoders replies decoding at once, a reply is not decoded (decode_busy) rather than
// waiting or taking more memory; a reply that ends or breaks frees its decoder.
func TestDecodersAreBounded(t *testing.T) {
	t.Parallel()
	s, err := New(Options{Store: bucket.NewMemory(bucket.MemoryOptions{}), MaxDecoders: 1})
	if err != nil {
		t.Fatal(err)
	}
	start := func() *stream {
		st := &stream{set: s.set.Load()}
		st.rep.encoding, st.body.limit = "gzip", 1<<20
		s.startDecoding(st)
		return st
	}
	first := start()
	if first.dec == nil || first.undecodable != "" {
		t.Fatalf("first reply: decoder %v, undecodable %q", first.dec, first.undecodable)
	}
	if second := start(); second.dec != nil || second.undecodable != reasonDecodeBusy {
		t.Fatalf("second reply: decoder %v, undecodable %q, want %q", second.dec, second.undecodable, reasonDecodeBusy)
	}
	first.dec.abort() // the stream broke
	third := start()
	if third.dec == nil {
		t.Fatalf("third reply: not decoded (%q) after the first freed its decoder", third.undecodable)
	}
	third.dec.write(compress(t, "gzip", []byte(`{"usage":{"total_tokens":300}}`)))
	if u, ok := s.end(third); !ok || u.Tokens() != 300 {
		t.Fatalf("third reply: usage %+v %v", u, ok)
	}
	if fourth := start(); fourth.dec == nil {
		t.Fatalf("fourth reply: not decoded (%q) after the third ended", fourth.undecodable)
	}
}

// Decoders are kept between replies (gzip, br, zstd): one that stopped on a corrupt, truncated
// or cut reply decodes the next reply whole. A chunk written after the input ended is dropped.
func TestDecodersReused(t *testing.T) {
	t.Parallel()
	json := []byte(`{"usage":{"total_tokens":300}}`)
	for _, coding := range []string{"gzip", "br", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			t.Parallel()
			good := compress(t, coding, json)
			corrupt := append([]byte(nil), good...)
			corrupt[len(corrupt)/2] ^= 0xff
			c := parseCodings(coding, AllEncodings)
			for i := range 30 {
				p := &parser{limit: 1 << 16}
				d := startDecoder(c, p, 1<<20, func() {})
				switch i % 4 {
				case 1:
					d.write(corrupt)
					_ = d.finish()
					continue
				case 2:
					d.write(good[:len(good)-5])
					_ = d.finish()
					continue
				case 3:
					d.write(good[:len(good)/2])
					d.abort()
					d.write(good) // after the end: dropped
					continue
				}
				d.write(good)
				if err := d.finish(); err != nil {
					t.Fatalf("reply %d: %v", i, err)
				}
				if u, ok := p.end(); !ok || u.Total != 300 {
					t.Fatalf("reply %d: usage %+v %v, want 300 tokens", i, u, ok)
				}
			}
		})
	}
}

// FuzzDecode feeds arbitrary bytes to every decoder: never a panic, never more than the bound
// handed to the parser.
func FuzzDecode(f *testing.F) {
	json := []byte(`{"usage":{"total_tokens":300}}`)
	for _, c := range []string{"gzip", "deflate", "deflate-raw", "br", "zstd"} {
		f.Add(uint8(0), compress(f, c, json))
	}
	f.Add(uint8(3), []byte{0x28, 0xb5, 0x2f, 0xfd, 0x04, 0x00})
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		e := []Encodings{Gzip, Deflate, Brotli, Zstd}[int(which)%4]
		p := &parser{limit: 1 << 16}
		const max = 1 << 20
		err := decodeInto(bytes.NewReader(data), codings{list: [maxCodings]Encodings{e}, n: 1}, p, max)
		if err == nil && len(p.buf) > p.limit {
			t.Fatalf("parser kept %d bytes over its limit", len(p.buf))
		}
	})
}

// BenchmarkDecoderSSE decodes, in each coding, a compressed OpenAI stream of 500 content events (each flushed, as
// a streaming server flushes them), its usage and [DONE], handed over in chunks of 256 bytes as
// the response path hands over every compressed reply.
func BenchmarkDecoderSSE(b *testing.B) {
	content := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":" word"},"finish_reason":null}]}` + "\n\n"
	usage := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":200,"completion_tokens":500,"total_tokens":700}}` + "\n\n"
	events := append(slices.Repeat([]string{content}, 500), usage, "data: [DONE]\n\n")
	for _, coding := range []string{"gzip", "deflate", "br", "zstd"} {
		stream := compressEvents(b, coding, events)
		c := parseCodings(coding, AllEncodings)
		b.Run(coding, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(stream)))
			for b.Loop() {
				p := &parser{sse: true, limit: 4 << 20}
				d := startDecoder(c, p, 4<<20, func() {})
				for s := stream; len(s) > 0; {
					n := min(256, len(s))
					d.write(s[:n])
					s = s[n:]
				}
				if err := d.finish(); err != nil {
					b.Fatal(err)
				}
				if u, ok := p.end(); !ok || u.Total != 700 {
					b.Fatalf("usage %+v %v", u, ok)
				}
			}
		})
	}
}
