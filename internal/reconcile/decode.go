package reconcile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// Encodings is a set of HTTP content-codings the response path decodes.
type Encodings uint8

// The content-codings of RFC 9110 section 8.4.1 (and RFC 8878's zstd) that providers use on
// replies: a client's Accept-Encoding decides which one comes back.
const (
	Gzip    Encodings = 1 << iota // gzip and x-gzip
	Deflate                       // deflate: zlib-wrapped, or raw deflate as some servers send it
	Brotli                        // br
	Zstd                          // zstd
)

// AllEncodings is every coding the response path can decode.
const AllEncodings = Gzip | Deflate | Brotli | Zstd

// ParseEncoding names one coding: gzip, deflate, br or zstd.
func ParseEncoding(name string) (Encodings, error) {
	switch name {
	case "gzip":
		return Gzip, nil
	case "deflate":
		return Deflate, nil
	case "br":
		return Brotli, nil
	case "zstd":
		return Zstd, nil
	}
	return 0, fmt.Errorf("reconcile: %q is not one of gzip, deflate, br, zstd", name)
}

// maxCodings bounds the codings stacked on one reply (Content-Encoding: gzip, br): each is a
// decoder with its own window.
const maxCodings = 2

// codings is a reply's Content-Encoding in the order the codings were applied, identity left out.
type codings struct {
	list [maxCodings]Encodings
	n    int
	// bad is why the reply cannot be decoded (an unknown, disabled or over-stacked coding); "" if
	// it can.
	bad Reason
}

// parseCodings reads a Content-Encoding value against the enabled set.
func parseCodings(v string, enabled Encodings) codings {
	var c codings
	for v != "" {
		var tok string
		tok, v, _ = strings.Cut(v, ",")
		tok = strings.ToLower(strings.TrimSpace(tok))
		var e Encodings
		switch tok {
		case "", "identity":
			continue
		case "gzip", "x-gzip":
			e = Gzip
		case "deflate":
			e = Deflate
		case "br":
			e = Brotli
		case "zstd":
			e = Zstd
		}
		switch {
		case e == 0 || enabled&e == 0:
			c.bad = reasonDecodeUnsupported
		case c.n == maxCodings:
			c.bad = reasonDecodeUnsupported
		default:
			c.list[c.n] = e
			c.n++
		}
	}
	return c
}

// Errors that end a decoding early; each maps to a reason.
var (
	errDecodeOver   = errors.New("reconcile: decoded reply over its bound")
	errStreamBroken = errors.New("reconcile: stream ended before the reply")
)

// zstdMaxWindow is the largest zstd window accepted: 8 MiB, what RFC 8878 section 3.1.1.1.2
// recommends every decoder support. A frame declaring more is refused (decode_corrupt).
const zstdMaxWindow = 8 << 20

// The decoders kept between replies, with the windows and tables a new one allocates again for
// every reply: zstd's history (up to zstdMaxWindow), gzip's 32 KiB window, brotli's ring buffer.
// A reply uses one at a time, so each pool holds at most Options.MaxDecoders of them. Deflate,
// rare in replies, gets a new one each time.
var zstdDecoders, gzipDecoders, brotliDecoders sync.Pool

// copyBufs holds the buffers decoders copy through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// decoder decodes a compressed reply as its chunks arrive: a goroutine of its own reads the
// chunks through the decoders (which pull their input) and hands the decoded bytes to the
// parser. write returns once the decoders have decoded all they could of the chunk and ask for
// the next one (or have stopped): the parser is then as far as the reply allows, and an event
// stream's data: [DONE] is seen with the chunk that carries it. The goroutine touches the parser
// only between a write's hand-over and its return, and until done is closed.
type decoder struct {
	in      chan []byte   // the chunks, handed over one at a time
	asked   chan struct{} // the decoders took the last chunk whole and ask for the next
	done    chan struct{}
	stopped bool // the goroutine has ended: later chunks are dropped
	closed  bool // the input was ended
	// end is what the decoders read after the last chunk: io.EOF at the reply's end,
	// errStreamBroken when it was cut; set before in is closed.
	end error
	// err is why decoding stopped early (nil: the reply decoded to its end); read after done.
	err error
}

// startDecoder starts decoding c into p, at most max decoded bytes; release is called when the
// goroutine ends.
func startDecoder(c codings, p *parser, max int64, release func()) *decoder {
	d := &decoder{in: make(chan []byte), asked: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		defer release()
		d.err = decodeInto(&feed{d: d}, c, p, max)
	}()
	return d
}

// feed is the decoders' input: the chunks handed to the decoder, one after the other.
type feed struct {
	d      *decoder
	cur    []byte
	handed bool // a chunk was handed over: asking for the next one tells write it is decoded
}

func (f *feed) Read(b []byte) (int, error) {
	for len(f.cur) == 0 {
		if f.handed {
			f.d.asked <- struct{}{}
		}
		c, ok := <-f.d.in
		if !ok {
			return 0, f.d.end
		}
		f.cur, f.handed = c, true
	}
	n := copy(b, f.cur)
	if f.cur = f.cur[n:]; len(f.cur) == 0 {
		f.cur = nil // a kept decoder's reader must not hold the message's bytes
	}
	return n, nil
}

// decodeInto reads r through the codings, last applied first, into p.
func decodeInto(r io.Reader, c codings, p *parser, max int64) error {
	var closers []func()
	defer func() {
		for _, f := range closers {
			f()
		}
	}()
	for i := c.n - 1; i >= 0; i-- {
		dr, closeFn, err := newReader(c.list[i], r)
		if err != nil {
			return err
		}
		closers = append(closers, closeFn)
		r = dr
	}
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var n int64
	for {
		k, err := r.Read(buf)
		if k > 0 {
			if n += int64(k); n > max {
				return errDecodeOver
			}
			p.write(buf[:k])
			if p.done {
				// The event stream said it is over: nothing after can change its usage. The
				// decoder stops now rather than when Envoy ends the stream, which, for a reply
				// whose client hung up at [DONE], is its deferred close seconds later: a
				// decoder held until then is one a later reply cannot have (decode_busy).
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// newReader returns the decoder of one coding over r, and what releases it.
func newReader(e Encodings, r io.Reader) (io.Reader, func(), error) {
	switch e {
	case Gzip:
		zr, _ := gzipDecoders.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(r)
		} else {
			err = zr.Reset(r)
		}
		if err != nil {
			return nil, nil, err
		}
		return zr, func() { gzipDecoders.Put(zr) }, nil
	case Deflate:
		// RFC 9110 section 8.4.1.2: "deflate" is the zlib format; some servers send raw deflate
		// instead, told apart by zlib's two-byte header (RFC 1950: method 8, check bits).
		br := bufio.NewReaderSize(r, 512)
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && h[0]>>4 <= 7 && (uint16(h[0])<<8|uint16(h[1]))%31 == 0 {
			zr, err := zlib.NewReader(br)
			if err != nil {
				return nil, nil, err
			}
			return zr, func() { zr.Close() }, nil
		}
		fr := flate.NewReader(br)
		return fr, func() { fr.Close() }, nil
	case Brotli:
		// The large-window extension (RFC 9841) stays off: windows up to 16 MiB, the format's own.
		br, _ := brotliDecoders.Get().(*brotli.Reader)
		if br == nil {
			br = brotli.NewReader(r)
		} else if err := br.Reset(r); err != nil {
			return nil, nil, err
		}
		return br, func() { brotliDecoders.Put(br) }, nil
	case Zstd:
		zr, _ := zstdDecoders.Get().(*zstd.Decoder)
		if zr == nil {
			var err error
			if zr, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(zstdMaxWindow)); err != nil {
				return nil, nil, err
			}
		}
		if err := zr.Reset(r); err != nil {
			zr.Close()
			return nil, nil, err
		}
		return zr, func() {
			// Reset(nil) lets go of the reply; the window stays for the next one.
			if zr.Reset(nil) == nil {
				zstdDecoders.Put(zr)
			} else {
				zr.Close()
			}
		}, nil
	}
	return nil, nil, errors.New("reconcile: no decoder")
}

// write hands one chunk to the decoders and returns once they have decoded all they could of it
// (nothing once they have stopped or the input was ended).
func (d *decoder) write(chunk []byte) {
	if d.stopped || d.closed || len(chunk) == 0 {
		return
	}
	select {
	case d.in <- chunk:
	case <-d.done:
		d.stopped = true
		return
	}
	select {
	case <-d.asked:
	case <-d.done:
		d.stopped = true
	}
}

// finish ends the input and waits for the decoders; it returns why decoding failed, if it did.
func (d *decoder) finish() error {
	d.close(io.EOF)
	return d.err
}

// abort ends the input of a reply that will not be settled from its usage and waits for the
// goroutine to end.
func (d *decoder) abort() {
	d.close(errStreamBroken)
}

// close ends the input with end (what the decoders read after the last chunk) and waits for the
// goroutine to end.
func (d *decoder) close(end error) {
	if !d.closed {
		d.closed = true
		d.end = end
		close(d.in)
	}
	<-d.done
}

// decodeReason maps a decoding failure to its reason.
func decodeReason(err error) Reason {
	if errors.Is(err, errDecodeOver) {
		return reasonDecodeOver
	}
	return reasonDecodeCorrupt
}
