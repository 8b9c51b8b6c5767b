package main

import (
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// The providers' APIs compress their replies when the client accepts it: the official SDKs send
// Accept-Encoding: gzip (Go's net/http), "gzip, deflate" (Python's httpx, with br and zstd when
// their packages are installed). The mock does the same, JSON and event streams alike, so that
// the response path is tested against what it really receives.

// codingOrder is the mock's preference among the codings a client accepts, like a CDN's.
var codingOrder = []string{"br", "zstd", "gzip", "deflate"}

// negotiate picks the reply's coding from an Accept-Encoding value (RFC 9110 section 12.5.3):
// the first of codingOrder the client accepts with a q above 0; "" for none.
func negotiate(accept string) string {
	q := map[string]float64{}
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			continue
		}
		v := 1.0
		if k, val, ok := strings.Cut(strings.TrimSpace(params), "="); ok && strings.TrimSpace(k) == "q" {
			if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				v = f
			}
		}
		q[name] = v
	}
	for _, c := range codingOrder {
		v, ok := q[c]
		if !ok {
			v, ok = q["*"]
		}
		if ok && v > 0 {
			return c
		}
	}
	return ""
}

// flushWriteCloser is a compressor that can push out what it holds (an SSE event) at once.
type flushWriteCloser interface {
	io.WriteCloser
	Flush() error
}

// compressWriter compresses a handler's reply in the negotiated coding. Close ends the stream.
type compressWriter struct {
	http.ResponseWriter
	coding  string
	enc     flushWriteCloser
	started bool
}

func newCompressWriter(w http.ResponseWriter, coding string) *compressWriter {
	return &compressWriter{ResponseWriter: w, coding: coding}
}

func (c *compressWriter) WriteHeader(status int) {
	if c.started {
		return
	}
	c.started = true
	h := c.Header()
	h.Add("vary", "accept-encoding")
	if status != http.StatusNoContent && status != http.StatusNotModified {
		h.Del("content-length")
		h.Set("content-encoding", c.coding)
		switch c.coding {
		case "br":
			c.enc = brotli.NewWriterLevel(c.ResponseWriter, 4)
		case "zstd":
			zw, _ := zstd.NewWriter(c.ResponseWriter, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
			c.enc = zw
		case "gzip":
			c.enc = gzip.NewWriter(c.ResponseWriter)
		case "deflate":
			// RFC 9110 section 8.4.1.2: deflate is the zlib format.
			c.enc = zlib.NewWriter(c.ResponseWriter)
		}
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *compressWriter) Write(b []byte) (int, error) {
	c.WriteHeader(http.StatusOK)
	if c.enc == nil {
		return c.ResponseWriter.Write(b)
	}
	return c.enc.Write(b)
}

// Flush pushes what the compressor holds to the client: each event of a stream arrives when it
// is sent, compressed.
func (c *compressWriter) Flush() {
	if c.enc != nil {
		c.enc.Flush()
	}
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Close ends the compressed stream.
func (c *compressWriter) Close() {
	if c.enc != nil {
		c.enc.Close()
	}
}
