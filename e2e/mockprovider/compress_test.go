package main

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

func TestNegotiate(t *testing.T) {
	t.Parallel()
	for accept, want := range map[string]string{
		"":                        "",
		"identity":                "",
		"gzip":                    "gzip",
		"gzip, deflate":           "gzip",
		"gzip, deflate, br, zstd": "br",
		"br;q=0, zstd":            "zstd",
		"GZIP;q=0.5":              "gzip",
		"gzip;q=0":                "",
		"*":                       "br",
		"deflate, *;q=0":          "deflate",
		"compress, lzw":           "",
	} {
		if got := negotiate(accept); got != want {
			t.Errorf("negotiate(%q) = %q, want %q", accept, got, want)
		}
	}
}

func decode(t *testing.T, coding string, b []byte) []byte {
	t.Helper()
	var r io.Reader
	var err error
	switch coding {
	case "":
		return b
	case "gzip":
		r, err = gzip.NewReader(bytes.NewReader(b))
	case "deflate":
		r, err = zlib.NewReader(bytes.NewReader(b))
	case "br":
		r = brotli.NewReader(bytes.NewReader(b))
	case "zstd":
		var d *zstd.Decoder
		d, err = zstd.NewReader(bytes.NewReader(b))
		r = d
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("%s: %v", coding, err)
	}
	return out
}

// Replies, JSON and event streams, come compressed in the coding the client accepts, and decode
// to what the uncompressed reply says; the usage header raises the reported usage only.
func TestCompressedReplies(t *testing.T) {
	t.Parallel()
	ts, rec := newTestServer(t, 1e6)
	ts.Config.Handler.(*Server).Compress = true
	chat := `{"model":"gpt-4o","max_tokens":10,"messages":[{"role":"user","content":"hi"}]%s}`
	for _, coding := range []string{"", "gzip", "deflate", "br", "zstd"} {
		for _, stream := range []string{"", `,"stream":true,"stream_options":{"include_usage":true}`} {
			accept := coding
			if accept == "" {
				accept = "identity"
			}
			resp, b := post(t, ts.URL+"/v1/chat/completions", strings.Replace(chat, "%s", stream, 1), "accept-encoding", accept,
				usageHeader, "1000000000000")
			if got := resp.Header.Get("content-encoding"); got != coding {
				t.Errorf("%s: content-encoding %q", coding, got)
			}
			text := string(decode(t, coding, b))
			if !strings.Contains(text, `"total_tokens":1000000000000`) {
				t.Errorf("%s %q: no reported usage of 1e12 in %s", coding, stream, text)
			}
			if stream != "" && !strings.HasSuffix(text, "data: [DONE]\n\n") {
				t.Errorf("%s: stream ends %q", coding, text[max(0, len(text)-40):])
			}
		}
	}
	for _, r := range records(t, rec) {
		if r.Usage != 1e12 || r.Cost > 100 {
			t.Errorf("record: usage %d, cost %d; want usage 1e12 reported and the real cost charged", r.Usage, r.Cost)
		}
	}
}
