package reconcile

import (
	"bytes"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/dialects"
)

// parser reads the usage out of a response body delivered in chunks, within a memory bound: it
// finds the JSON documents (the body, each server-sent event's data, or each event stream
// message's payload: eventstream.go) and the dialect of the reservation's provider reads the
// usage each reports.
type parser struct {
	dialect provider.Dialect // nil: openai's, which OpenAI-compatible servers speak
	sse     bool
	// events reads an AWS event stream (application/vnd.amazon.eventstream, Bedrock's streams):
	// each message's payload is one document. nil for other replies.
	events *eventStream
	// raw keeps the body as it comes, within limit, framed as nothing: a provider 429's body,
	// read for its wait (retryReader).
	raw bool
	// array is set once a JSON body turns out to be an array of documents (jsonarray.go).
	array *arrayFrames
	limit int
	buf   []byte // JSON: the body so far; SSE: the current unfinished line
	over  bool   // the body (or a line) went beyond limit: no usage
	found bool
	usage provider.Usage
	// done is set once an event stream has said that it is over (doneData): its usage, read
	// before, is final even if the reply's own end never reaches the response path.
	done bool
}

// write consumes one chunk.
func (p *parser) write(chunk []byte) {
	if p.over {
		return
	}
	if p.events != nil {
		p.events.write(chunk, p.decode)
		return
	}
	if p.raw {
		p.buf = append(p.buf, chunk[:min(len(chunk), max(p.limit-len(p.buf), 0))]...)
		return
	}
	if !p.sse {
		if p.array == nil && len(p.buf) == 0 {
			switch first(chunk) {
			case 0:
				return // whitespace before the body's first value
			case '[':
				p.array = &arrayFrames{}
			}
		}
		if p.array != nil {
			p.array.write(chunk, p.limit, p.element)
			return
		}
		if len(p.buf)+len(chunk) > p.limit {
			p.over, p.buf = true, nil
			return
		}
		p.buf = append(p.buf, chunk...)
		return
	}
	for len(chunk) > 0 {
		i := bytes.IndexByte(chunk, '\n')
		if i < 0 {
			if len(p.buf)+len(chunk) > p.limit {
				p.over, p.buf = true, nil
				return
			}
			p.buf = append(p.buf, chunk...)
			return
		}
		line := chunk[:i]
		if len(p.buf) > 0 {
			p.buf = append(p.buf, line...)
			line = p.buf
		}
		p.line(line)
		p.buf = p.buf[:0]
		chunk = chunk[i+1:]
	}
}

// first is the first byte of b that is not JSON whitespace, 0 when there is none.
func first(b []byte) byte {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return c
		}
	}
	return 0
}

// usageKey is what every dialect's usage is reported under: "usage" (OpenAI, Anthropic) or
// "usageMetadata" (Gemini).
var usageKey = []byte(`"usage`)

// element handles one document of a streamed JSON array: decoded when it mentions usage.
func (p *parser) element(doc []byte) {
	if bytes.Contains(doc, usageKey) {
		p.decode(doc)
	}
}

// doneData is the data of the event that ends an OpenAI stream (and the streams of the servers
// that speak its dialect), sent after the event that carries the usage.
var doneData = []byte("[DONE]")

// line handles one SSE line: only data lines that mention usage are decoded, and the one that
// ends the stream is noted.
func (p *parser) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte{'\r'})
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok {
		return
	}
	if !bytes.Contains(data, usageKey) {
		if len(data) <= len(doneData)+2 && bytes.Equal(bytes.TrimSpace(data), doneData) {
			p.done = true
		}
		return
	}
	if nullUsage(data) {
		return
	}
	p.decode(bytes.TrimSpace(data))
}

// nullUsage reports whether every usage field that data mentions is null, as in each content
// event of an OpenAI stream that asked for its usage (stream_options.include_usage): nothing
// to decode. A field named otherwise ("usageMetadata") or holding a value is decoded.
func nullUsage(data []byte) bool {
	for rest := data; ; {
		i := bytes.Index(rest, usageKey)
		if i < 0 {
			return true
		}
		v, ok := bytes.CutPrefix(rest[i+len(usageKey):], []byte(`":`))
		if !ok {
			return false
		}
		v = bytes.TrimLeft(v, " \t")
		if !bytes.HasPrefix(v, []byte("null")) {
			return false
		}
		rest = v[len("null"):]
	}
}

// decode reads one document's usage and folds it into the usage so far: a stream's last report
// wins field by field (provider.Usage.Merge). The dialect bounds each count (provider.Count);
// Settlement.bound then bounds the whole.
func (p *parser) decode(data []byte) {
	d := p.dialect
	if d == nil {
		d = dialects.Of(provider.Unknown)
	}
	if u, ok := d.Usage(data); ok {
		p.usage.Merge(u)
		p.found = true
	}
}

// end finishes the body and reports the usage, if any was found.
func (p *parser) end() (provider.Usage, bool) {
	if p.over {
		return provider.Usage{}, false
	}
	if p.events != nil {
		// A broken frame stops the reading, and what was read before it settles nothing: the
		// reply was cut or corrupted, and the reservation stays.
		if p.events.end(); p.events.broken {
			return provider.Usage{}, false
		}
	}
	if p.sse {
		if len(p.buf) > 0 {
			p.line(p.buf)
		}
	} else if p.array == nil && len(p.buf) > 0 {
		p.decode(p.buf)
	}
	p.buf = nil
	return p.usage, p.found && p.usage.Tokens() > 0
}

// cut reports the usage of a reply whose body stopped before its end: what was found, if the
// event stream had said that it was over (done), else none.
func (p *parser) cut() (provider.Usage, bool) {
	if !p.sse {
		return provider.Usage{}, false
	}
	u, ok := p.end()
	if !p.done {
		return provider.Usage{}, false
	}
	return u, ok
}

// frame chooses how the reply's body is framed, from its content type: server-sent events, an
// AWS event stream, or one JSON document.
func (p *parser) frame(r *report) {
	p.sse = r.sse
	if r.eventStream {
		p.events = &eventStream{limit: p.limit}
	}
}

// broken is why the reply's framing could not be read to its end ("" when it could).
func (p *parser) broken() Reason {
	if p.events != nil && p.events.broken {
		return reasonEventStreamBroken
	}
	return ""
}
