package reconcile

// arrayFrames finds the top-level elements of a JSON array delivered in chunks: the framing of
// a streamed reply that is one JSON array of documents, such as the Gemini API's
// streamGenerateContent without ?alt=sse ("[{...}\r\n,\r\n{...}]",
// ai.google.dev/api/generate-content#method:-models.streamgeneratecontent). Each element is
// kept only while it is read, within limit bytes: an element above it is skipped whole, and the
// ones after it are still read. It tracks strings and escapes, so that brackets inside text
// never end an element. Only object and array elements are documents; scalars are skipped. Not
// safe for concurrent use.
type arrayFrames struct {
	opened bool // the array's '[' was read
	closed bool // its ']' was read: anything after is ignored
	depth  int  // nesting inside the current element (0: between elements)
	inStr  bool // inside a string of the current element
	esc    bool // the previous byte in that string was a backslash
	skip   bool // the current element went beyond the limit
	buf    []byte
}

// write consumes one chunk, calling emit with each element it completes. emit must not retain
// its argument.
func (a *arrayFrames) write(chunk []byte, limit int, emit func([]byte)) {
	start := -1 // where the current element starts in chunk
	if a.depth > 0 {
		start = 0
	}
	for i := 0; i < len(chunk) && !a.closed; i++ {
		c := chunk[i]
		if a.inStr { // in the current element, or a string between elements (skipped)
			switch {
			case a.esc:
				a.esc = false
			case c == '\\':
				a.esc = true
			case c == '"':
				a.inStr = false
			}
			continue
		}
		if a.depth == 0 {
			switch {
			case !a.opened:
				a.opened = c == '['
			case c == '{' || c == '[':
				a.depth, start, a.skip, a.buf = 1, i, false, a.buf[:0]
			case c == '"':
				a.inStr = true
			case c == ']':
				a.closed = true
			}
			continue
		}
		switch c {
		case '"':
			a.inStr = true
		case '{', '[':
			a.depth++
		case '}', ']':
			a.depth--
			if a.depth == 0 {
				a.finish(chunk[start:i+1], limit, emit)
				start = -1
			}
		}
	}
	if start >= 0 && a.depth > 0 {
		a.take(chunk[start:], limit)
	}
}

// take keeps part of the current element, unless the element goes beyond limit.
func (a *arrayFrames) take(b []byte, limit int) {
	if a.skip {
		return
	}
	if len(a.buf)+len(b) > limit {
		a.skip, a.buf = true, a.buf[:0]
		return
	}
	a.buf = append(a.buf, b...)
}

// finish ends the current element with its last part b.
func (a *arrayFrames) finish(b []byte, limit int, emit func([]byte)) {
	switch {
	case a.skip:
	case len(a.buf) == 0 && len(b) <= limit:
		emit(b) // whole in this chunk: not copied
	default:
		a.take(b, limit)
		if !a.skip {
			emit(a.buf)
		}
	}
	a.skip, a.buf = false, a.buf[:0]
}
