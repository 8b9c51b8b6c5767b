package tokens

import (
	"bytes"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Upper-bound pricing: what a request costs when the pricer cannot read all of it (a body cut by
// Envoy's max_request_bytes, one it cannot decode or parse), or when the request brings input
// the body does not show (a stored conversation, a file, a URL, a tool server). Such a request
// is never priced at a typical answer's default: it is priced at a bound the provider itself
// cannot exceed, from the model's documented limits (the rooms' limits.go, through
// dialects.ModelLimits and dialects.Maxima).
//
//   - Prompt: one token per byte of the body's declared size (content-length, or the bytes
//     seen), at most the model's context window. Every token of a byte-level BPE vocabulary
//     (OpenAI's, and by all public evidence Anthropic's) covers at least one byte of text, and
//     a JSON string's escapes never decode to more bytes than they take, so the text of a
//     body of n bytes is at most n tokens; and no request the provider accepts holds more
//     input than the context window (it answers 400 above it). A UTF-16 body is counted at
//     1.5 tokens per byte (a 2-byte unit can become 3 bytes of UTF-8). A body of unknown size
//     (Envoy's partial body with no content-length, a compressed body that does not decode)
//     costs the whole window.
//   - Output: the max_tokens (max_completion_tokens, max_output_tokens, the largest present)
//     found by a linear scan of the bytes at the top level of the JSON object, the last
//     occurrence of each key winning as in the providers' parsers, times n (or best_of). A body
//     seen only in part may name a larger one after the part seen, so it reserves the larger of
//     that and the model's maximum output. A model the table does not know gets
//     Options.UnreadableOutputTokens (by default the provider's largest maximum output).
//   - Unseen context: the visible prompt plus Options.UnseenContextTokens, or, by default, the
//     model's context window. Reconciliation settles it to the usage the provider reports.

// tokensPerByte is the worst case of tokens per byte of UTF-8 text.
const tokensPerByte = 1

// refuseTokens is the output priced when Options.RefuseUnreadable is set: more than any bucket
// can hold, so that the decision is a 413.
const refuseTokens = 1 << 40

// scan is what a linear scan of raw JSON bytes finds at the top level of an object.
type scan struct {
	output int64 // the largest of the output maxima found (their last occurrences); -1 if none
	n      int64 // the larger of the last n and best_of; 0 if none
	model  []byte
}

// outputKeys are the output maxima of the priced APIs.
var outputKeys = [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

// scanTop scans b for the top-level keys that set the output and the model. It tracks strings
// (with their escapes) and nesting, so that a key inside a string or a nested object (a tool
// schema's "max_tokens" property) is not taken for the request's own; a key written with
// escapes is not recognised (the bound then applies). Linear in len(b), allocation-free.
func scanTop(b []byte) scan {
	var last [len(outputKeys)]int64
	for i := range last {
		last[i] = -1
	}
	n, bestOf := int64(0), int64(0)
	var model []byte
	depth := 0
	for i := 0; i < len(b); {
		switch b[i] {
		case '{', '[':
			depth++
			i++
		case '}', ']':
			depth--
			i++
		case '"':
			end := stringEnd(b, i)
			if end < 0 {
				i = len(b)
				break
			}
			if depth == 1 {
				j := skipSpace(b, end)
				if j < len(b) && b[j] == ':' {
					key, v := b[i+1:end-1], skipSpace(b, j+1)
					switch string(key) {
					case "model":
						if v < len(b) && b[v] == '"' {
							if e := stringEnd(b, v); e > 0 && e-v <= 258 {
								model = b[v+1 : e-1]
							}
						}
					case "n":
						n = scanCount(b[v:])
					case "best_of":
						bestOf = scanCount(b[v:])
					default:
						for k, name := range outputKeys {
							if string(key) == name {
								last[k] = -1
								if x, ok := pricing.ParseInt(numberAt(b[v:])); ok {
									last[k] = x
								}
							}
						}
					}
				}
			}
			i = end
		default:
			i++
		}
	}
	out := int64(-1)
	for _, x := range last {
		out = max(out, x)
	}
	return scan{output: out, n: min(max(n, bestOf), pricing.MaxChoices), model: model}
}

// scanCount reads a count (n, best_of) at the start of b: 0 when it is not a positive integer.
func scanCount(b []byte) int64 {
	if x, ok := pricing.ParseInt(numberAt(b)); ok && x > 0 {
		return x
	}
	return 0
}

// stringEnd returns the index after the closing quote of the string opening at b[i], or -1.
// A quote is the closing one when an even number of backslashes precede it; each run of
// backslashes is read once, for the quote it precedes.
func stringEnd(b []byte, i int) int {
	for j := i + 1; ; {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return -1
		}
		q += j
		k := q - 1
		for k > i && b[k] == '\\' {
			k--
		}
		if (q-1-k)%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// numberAt returns the JSON number at the start of b (possibly empty).
func numberAt(b []byte) []byte {
	j := 0
	for j < len(b) && j < 64 {
		c := b[j]
		if (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-' {
			j++
			continue
		}
		break
	}
	return b[:j]
}

// unreadable prices a body that cannot be read field by field at the upper bound (see the top
// of this file). text is what was seen of it, as UTF-8 where its encoding is known; size is the
// body's whole size in bytes (-1 when unknown) and whole whether text is all of it.
func (s *call) unreadable(r Reason, text []byte, size int64, whole bool) {
	s.Bound(r)
	sc := scanTop(text)
	switch m := s.pathModel(); {
	case m != "":
		s.Est.Model = m // the deployment decides, never the body
	case sc.model != nil:
		s.Est.Model = string(sc.model)
	default:
		s.Est.Model = sniffModel(text)
	}
	lim, known := s.limits()
	if size >= 0 {
		s.Est.PromptTokens = min(pricing.SatMul(size, tokensPerByte), lim.Context)
	} else {
		s.Est.PromptTokens = lim.Context
	}
	if s.Est.API == Embeddings {
		s.Est.OutputTokens = 0
		return
	}
	out := lim.Output
	if !known && s.p.opts.UnreadableOutputTokens > 0 {
		out = s.p.opts.UnreadableOutputTokens
	}
	switch {
	case s.p.opts.RefuseUnreadable:
		out = refuseTokens
	case whole && sc.output >= 0:
		out = sc.output // the provider reads these bytes whole, and the last occurrence wins
	default:
		out = max(out, sc.output)
	}
	s.Est.OutputTokens = pricing.SatMul(out, max(sc.n, 1))
}

// addUnseen raises the prompt to cover the unseen context: the visible prompt plus
// Options.UnseenContextTokens (never beyond the context window), or the model's context window.
func (s *call) addUnseen() {
	lim, _ := s.limits()
	p := s.Est.PromptTokens
	if n := s.p.opts.UnseenContextTokens; n > 0 {
		s.Est.PromptTokens = max(p, min(p+n, lim.Context))
		return
	}
	s.Est.PromptTokens = max(p, lim.Context)
}
