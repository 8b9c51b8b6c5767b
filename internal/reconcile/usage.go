package reconcile

import (
	"bytes"
	"encoding/json"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
)

// Usage is what a provider reports it counted for one response.
type Usage struct {
	// Input is the prompt's tokens (cache writes and reads included); Output the generated ones.
	Input, Output int64
	// Total is the provider's own total when it gives one (OpenAI), else 0.
	Total int64
}

// Tokens is what the response took from the provider's token budget.
func (u Usage) Tokens() int64 {
	if u.Total > 0 {
		return u.Total
	}
	return u.Input + u.Output
}

// rawUsage is every usage shape: OpenAI chat/completions/embeddings (prompt_tokens,
// completion_tokens, total_tokens), OpenAI Responses and Anthropic (input_tokens, output_tokens,
// Anthropic's cache_*_input_tokens).
type rawUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	TotalTokens         int64 `json:"total_tokens"`
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadTokens     int64 `json:"cache_read_input_tokens"`
}

// envelope finds usage at the top level, in an Anthropic message_start ("message") or in an
// OpenAI Responses event ("response").
type envelope struct {
	Usage    *rawUsage `json:"usage"`
	Message  *envelope `json:"message"`
	Response *envelope `json:"response"`
}

func (e *envelope) find() *rawUsage {
	switch {
	case e == nil:
		return nil
	case e.Usage != nil:
		return e.Usage
	case e.Message != nil:
		return e.Message.find()
	}
	return e.Response.find()
}

// merge folds one report into u: every field a report carries replaces the earlier value, so a
// stream's last report wins field by field (Anthropic's message_delta carries the cumulative
// output and, in newer versions, the input again; message_start carries the input).
//
// Each field is first bounded to [0, bucket.MaxAmount], so that no sum of them overflows and a
// negative count takes nothing away; Settlement.bound then bounds the whole.
func (u *Usage) merge(r *rawUsage) {
	in := field(r.PromptTokens) + field(r.InputTokens) + field(r.CacheCreationTokens) + field(r.CacheReadTokens)
	out := field(r.CompletionTokens) + field(r.OutputTokens)
	if in > 0 {
		u.Input = in
	}
	if out > 0 {
		u.Output = out
	}
	if t := field(r.TotalTokens); t > 0 {
		u.Total = t
	}
}

// field bounds one reported count to [0, bucket.MaxAmount].
func field(n int64) int64 { return min(max(n, 0), bucket.MaxAmount) }

// parser reads the usage out of a response body delivered in chunks, within a memory bound.
type parser struct {
	sse   bool
	limit int
	buf   []byte // JSON: the body so far; SSE: the current unfinished line
	over  bool   // the body (or a line) went beyond limit: no usage
	found bool
	usage Usage
}

// write consumes one chunk.
func (p *parser) write(chunk []byte) {
	if p.over {
		return
	}
	if !p.sse {
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

// line handles one SSE line: only data lines that mention usage are decoded.
func (p *parser) line(l []byte) {
	l = bytes.TrimSuffix(l, []byte{'\r'})
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok || !bytes.Contains(data, []byte(`"usage"`)) {
		return
	}
	p.decode(bytes.TrimSpace(data))
}

func (p *parser) decode(data []byte) {
	var e envelope
	if json.Unmarshal(data, &e) != nil {
		return
	}
	if r := e.find(); r != nil {
		p.usage.merge(r)
		p.found = true
	}
}

// end finishes the body and reports the usage, if any was found.
func (p *parser) end() (Usage, bool) {
	if p.over {
		return Usage{}, false
	}
	if p.sse {
		if len(p.buf) > 0 {
			p.line(p.buf)
		}
	} else if len(p.buf) > 0 {
		p.decode(p.buf)
	}
	p.buf = nil
	return p.usage, p.found && p.usage.Tokens() > 0
}
