package reconcile

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
)

// The AWS event stream encoding (content type application/vnd.amazon.eventstream), in which the
// Bedrock runtime sends ConverseStream and InvokeModelWithResponseStream replies. Each message
// is (docs.aws.amazon.com/transcribe/latest/dg/streaming-setting-up.html#streaming-event-stream
// and docs.aws.amazon.com/lexv2/latest/dg/event-stream-encoding.html, the same format):
//
//	prelude   total length (uint32, big-endian, the whole message, itself included)
//	          headers length (uint32, big-endian)
//	          prelude CRC (uint32, CRC32 of the 8 bytes before it)
//	headers   headers length bytes: name length (1 byte), name, value type (1 byte), value
//	payload   total length - headers length - 16 bytes
//	message CRC (uint32, CRC32 of everything before it, the prelude included)
//
// CRC32 is the IEEE polynomial ("often referred to as GZIP CRC32"). A header's value is, by
// type: 0 true and 1 false (no bytes), 2 byte (1), 3 short (2), 4 integer (4), 5 long (8),
// 6 byte array and 7 string (a 2-byte length, then the bytes), 8 timestamp (8), 9 UUID (16).
// The :message-type header is "event" for an event (its :event-type names it: chunk, metadata,
// messageStart...), "exception" or "error" for an error sent in the stream.

// eventPrelude is the prelude's size; eventOverhead the prelude and both CRCs.
const (
	eventPrelude  = 12
	eventOverhead = 16
)

// eventStream reads event stream messages from a reply delivered in chunks, one message at a
// time, within a bound: a message up to limit bytes is kept whole and its payload handed to
// emit once both CRCs check; a longer one is read through, its CRC checked, and skipped. A
// frame that breaks the encoding (a bad CRC, a length that cannot be, a reply that ends inside
// a message) stops the reading: broken is set and nothing more is read. Its zero value with a
// limit is ready to use; it is not safe for concurrent use.
type eventStream struct {
	limit int

	prelude [eventPrelude]byte
	np      int // prelude bytes so far
	data    int // headers and payload bytes still to come
	crcLeft int // message CRC bytes still to come
	crcWant [4]byte
	crc     uint32 // CRC32 of the message so far
	hlen    int
	skip    bool   // the message is longer than limit: read, checked, not kept
	buf     []byte // the message's headers and payload, when kept

	broken  bool
	skipped int // messages skipped for their size
}

// write consumes one chunk, calling emit with the payload of each whole event message.
func (e *eventStream) write(chunk []byte, emit func(payload []byte)) {
	for len(chunk) > 0 && !e.broken {
		if e.np < eventPrelude {
			n := copy(e.prelude[e.np:], chunk)
			e.np += n
			chunk = chunk[n:]
			if e.np < eventPrelude {
				return
			}
			e.begin()
			continue
		}
		if e.data > 0 {
			n := min(len(chunk), e.data)
			e.crc = crc32.Update(e.crc, crc32.IEEETable, chunk[:n])
			if !e.skip {
				e.buf = append(e.buf, chunk[:n]...)
			}
			e.data -= n
			chunk = chunk[n:]
			continue
		}
		n := copy(e.crcWant[4-e.crcLeft:], chunk)
		e.crcLeft -= n
		chunk = chunk[n:]
		if e.crcLeft == 0 {
			e.finish(emit)
		}
	}
}

// begin checks a whole prelude and starts its message.
func (e *eventStream) begin() {
	total := binary.BigEndian.Uint32(e.prelude[0:4])
	hlen := binary.BigEndian.Uint32(e.prelude[4:8])
	if crc32.ChecksumIEEE(e.prelude[:8]) != binary.BigEndian.Uint32(e.prelude[8:12]) ||
		total < eventOverhead || hlen > total-eventOverhead {
		e.broken = true
		return
	}
	e.crc = crc32.ChecksumIEEE(e.prelude[:])
	e.data, e.crcLeft, e.hlen = int(total-eventOverhead), 4, int(hlen)
	e.skip = int64(total) > int64(e.limit)
	e.buf = e.buf[:0]
}

// finish checks a whole message's CRC and hands an event's payload to emit.
func (e *eventStream) finish(emit func([]byte)) {
	e.np = 0
	if e.crc != binary.BigEndian.Uint32(e.crcWant[:]) {
		e.broken = true
		return
	}
	if e.skip {
		e.skipped++
		return
	}
	typ, ok := messageType(e.buf[:e.hlen])
	if !ok {
		e.broken = true
		return
	}
	if typ == nil || string(typ) == "event" {
		emit(e.buf[e.hlen:])
	}
}

// end reports whether the reply ended between messages; a reply that ends inside one is broken.
func (e *eventStream) end() {
	if e.np > 0 {
		e.broken = true
	}
	e.buf = nil
}

var headerMessageType = []byte(":message-type")

// messageType is the :message-type string of headers h (nil when absent); ok is false when the
// headers do not parse.
func messageType(h []byte) (typ []byte, ok bool) {
	for len(h) > 0 {
		n := int(h[0])
		if len(h) < 1+n+1 {
			return nil, false
		}
		name, t := h[1:1+n], h[1+n]
		h = h[2+n:]
		var size int
		switch t {
		case 0, 1:
		case 2:
			size = 1
		case 3:
			size = 2
		case 4:
			size = 4
		case 5, 8:
			size = 8
		case 9:
			size = 16
		case 6, 7:
			if len(h) < 2 {
				return nil, false
			}
			l := int(binary.BigEndian.Uint16(h))
			if len(h) < 2+l {
				return nil, false
			}
			if t == 7 && bytes.Equal(name, headerMessageType) {
				typ = h[2 : 2+l]
			}
			size = 2 + l
		default:
			return nil, false
		}
		if len(h) < size {
			return nil, false
		}
		h = h[size:]
	}
	return typ, true
}
