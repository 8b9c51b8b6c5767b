package tokens

import "strings"

// OpenAI pricing. The chat rule is OpenAI's published one (OpenAI Cookbook, "How to count
// tokens with tiktoken", num_tokens_from_messages): every message costs 3 tokens plus the
// tokens of each of its string values (role, content, name, ...), a name costs 1 more, and
// every reply is primed with 3 tokens (<|start|>assistant<|message|>). gpt-3.5-turbo-0301 used
// 4 per message and -1 per name.

// toolsOverhead is added once when tools, functions or a JSON schema are present: OpenAI renders
// them into a hidden system message ("# Tools", "## functions", "namespace functions {...}").
// The definitions themselves are counted as their JSON text, which is longer than that
// TypeScript-like rendering for typical schemas (quotes, braces and "type"/"properties" keys),
// so the total errs high.
const (
	toolsOverhead = 20
	perToolCall   = 5 // per assistant tool call, on top of its JSON text
)

func (s *pricing) chat(root int) {
	perMsg, perName := int64(3), int64(1)
	if strings.HasPrefix(s.est.Model, "gpt-3.5-turbo-0301") {
		perMsg, perName = 4, -1
	}
	msgs := s.d.get(root, "messages")
	var total int64
	if s.d.kind(msgs) != jArray {
		s.approx(ReasonWrongType)
		total += s.countRaw(msgs)
	}
	end := s.d.end(msgs)
	s.d.elems(msgs, func(m int) bool {
		s.resent = s.d.end(m) != end // every message but the last was sent before
		total += perMsg
		if s.d.kind(m) != jObject {
			s.approx(ReasonWrongType)
			total += s.countRaw(m)
			return true
		}
		s.d.children(m, func(k, v int) bool {
			switch s.d.kind(v) {
			case jString:
				total += s.countText(v)
				if s.d.keyIs(k, "name") {
					total += perName
				}
			case jNull:
			case jArray:
				switch {
				case s.d.keyIs(k, "content"):
					total += s.parts(v)
				case s.d.keyIs(k, "tool_calls"):
					s.approx(ReasonTools)
					s.d.children(v, func(_, c int) bool {
						total += perToolCall + s.countRaw(c)
						return true
					})
				default:
					s.approx(ReasonUnpricedPart)
					total += s.countRaw(v)
				}
			default:
				if s.d.keyIs(k, "function_call") {
					s.approx(ReasonTools)
				} else {
					s.approx(ReasonUnpricedPart)
				}
				total += s.countRaw(v)
			}
			return true
		})
		return true
	})
	total += 3 // reply priming
	s.resent = true
	total += s.tools(root, "tools", "functions")
	total += s.responseFormat(s.d.get(root, "response_format"))
	s.resent = false
	s.est.PromptTokens = total
	out := s.maxOutput(root, s.defaultOutput(), "max_completion_tokens", "max_tokens")
	s.est.OutputTokens = satMul(out, s.choices(root, "n"))
}

// parts prices a content array (chat or Responses): text parts by their text, images by the
// image rule, anything else by its JSON text.
func (s *pricing) parts(arr int) int64 {
	var total int64
	s.approx(ReasonContentParts)
	s.d.children(arr, func(_, part int) bool {
		if s.d.kind(part) == jString { // Responses allows bare strings in some places
			total += s.countText(part)
			return true
		}
		typ := s.d.get(part, "type")
		switch {
		case s.d.textIs(typ, "text"), s.d.textIs(typ, "input_text"), s.d.textIs(typ, "output_text"):
			total += s.countText(s.d.get(part, "text"))
		case s.d.textIs(typ, "refusal"):
			total += s.countText(s.d.get(part, "refusal"))
		case s.d.textIs(typ, "image_url"):
			img := s.d.get(part, "image_url")
			url, detail := img, -1
			if s.d.kind(img) == jObject {
				url, detail = s.d.get(img, "url"), s.d.get(img, "detail")
			}
			total += s.openAIImage(url, detail)
		case s.d.textIs(typ, "input_image"):
			total += s.openAIImage(s.d.get(part, "image_url"), s.d.get(part, "detail"))
		case s.d.textIs(typ, "file"), s.d.textIs(typ, "input_file"):
			// A file by id or URL, or a PDF inline: the provider reads its pages' text and
			// images, which these bytes do not tell (platform.openai.com/docs/guides/pdf-files).
			s.unseen(ReasonFileInput)
			total += s.countRaw(part)
		default:
			s.approx(ReasonUnpricedPart)
			total += s.countRaw(part)
		}
		return true
	})
	return total
}

func (s *pricing) openAIImage(url, detail int) int64 {
	s.approx(ReasonImage)
	var w, h int
	if u, ok := s.d.text(s.w.buf, url); ok {
		w, h, _ = imageSize(u, s.w.img)
	}
	var buf [16]byte
	d, _ := s.d.text(buf[:0], detail)
	return openAIImageTokens(s.est.Model, string(d), w, h, s.p.opts.ImageTokens)
}

// tools prices tool/function definitions as their JSON text plus the fixed overhead.
func (s *pricing) tools(root int, keys ...string) int64 {
	var total int64
	for _, k := range keys {
		t := s.d.get(root, k)
		if s.d.kind(t) != jArray || s.d.nodes[t].next == int32(t+1) {
			continue // absent, null or empty
		}
		s.approx(ReasonTools)
		if total == 0 {
			total = toolsOverhead
		}
		total += s.countRaw(t)
	}
	return total
}

// responseFormat prices a JSON schema (chat "response_format" or Responses "text.format").
func (s *pricing) responseFormat(rf int) int64 {
	if s.d.kind(rf) != jObject || !s.d.textIs(s.d.get(rf, "type"), "json_schema") {
		return 0
	}
	s.approx(ReasonTools)
	return toolsOverhead + s.countRaw(rf)
}

func (s *pricing) completions(root int) {
	prompts, total := s.inputs(s.d.get(root, "prompt"))
	total += s.countText(s.d.get(root, "suffix"))
	s.est.PromptTokens = total
	out := s.maxOutput(root, completionsMaxTokens, "max_tokens")
	n := max(s.choices(root, "n"), s.choices(root, "best_of"))
	s.est.OutputTokens = satMul(satMul(out, n), max(prompts, 1))
}

func (s *pricing) embeddings(root int) {
	_, s.est.PromptTokens = s.inputs(s.d.get(root, "input"))
}

// inputs prices a completions prompt or an embeddings input: a string, an array of strings,
// an array of token ids or an array of token-id arrays. It returns how many prompts there are
// and their tokens (exact: token ids count one each).
func (s *pricing) inputs(v int) (prompts, total int64) {
	switch s.d.kind(v) {
	case jString:
		return 1, s.countText(v)
	case jArray:
		ids := int64(0)
		s.d.children(v, func(_, e int) bool {
			switch s.d.kind(e) {
			case jString:
				prompts++
				total += s.countText(e)
			case jNumber:
				ids++
			case jArray:
				prompts++
				s.d.children(e, func(_, id int) bool {
					total++
					if s.d.kind(id) != jNumber {
						s.approx(ReasonWrongType)
					}
					return true
				})
			default:
				s.approx(ReasonWrongType)
				total += s.countRaw(e)
			}
			return true
		})
		if ids > 0 {
			prompts++
			total += ids
		}
		return prompts, total
	case jNull:
		if v < 0 {
			return 0, 0
		}
	}
	s.approx(ReasonWrongType)
	return 1, s.countRaw(v)
}

// responses prices the Responses API with the chat rule: "instructions" is a system message,
// "input" a user message or a list of items. OpenAI publishes no rule for it, and a
// previous_response_id brings earlier turns the body does not show.
func (s *pricing) responses(root int) {
	s.approx(ReasonResponses)
	// Input the body refers to but does not hold (platform.openai.com/docs/api-reference/
	// responses/create): the turns of a previous response or a stored conversation, a stored
	// prompt template, and items by reference.
	if v := s.d.get(root, "previous_response_id"); s.d.kind(v) == jString && s.d.nodes[v].end > s.d.nodes[v].start {
		s.unseen(ReasonPreviousResponse)
	}
	if v := s.d.get(root, "conversation"); v >= 0 && s.d.kind(v) != jNull {
		s.unseen(ReasonConversation)
	}
	if v := s.d.get(root, "prompt"); s.d.kind(v) == jObject {
		s.unseen(ReasonStoredPrompt)
	}
	s.d.elems(s.d.get(root, "tools"), func(t int) bool {
		switch typ := s.d.get(t, "type"); {
		case s.d.textIs(typ, "mcp"):
			s.unseen(ReasonMCPServers) // the server's tool list is imported into the context
		case s.d.textIs(typ, "file_search"):
			s.unseen(ReasonFileInput) // retrieved chunks of stored files
		}
		return true
	})
	var total int64
	if ins := s.d.get(root, "instructions"); s.d.kind(ins) == jString {
		s.resent = true
		total += 3 + 1 + s.countText(ins) // "system" is one token
		s.resent = false
	}
	input := s.d.get(root, "input")
	switch s.d.kind(input) {
	case jString:
		total += 3 + 1 + s.countText(input)
	case jArray:
		end := s.d.end(input)
		s.d.children(input, func(_, item int) bool {
			s.resent = s.d.end(item) != end
			total += 3
			if s.d.kind(item) != jObject {
				total += s.countRaw(item)
				return true
			}
			if role := s.d.get(item, "role"); role >= 0 {
				total += s.countText(role)
				c := s.d.get(item, "content")
				if s.d.kind(c) == jArray {
					total += s.parts(c)
				} else {
					total += s.countText(c)
				}
				return true
			}
			if s.d.textIs(s.d.get(item, "type"), "item_reference") {
				s.unseen(ReasonItemReference)
			}
			// function_call, function_call_output, reasoning and other items.
			s.approx(ReasonTools)
			total += s.countRaw(item)
			return true
		})
	default:
		if input >= 0 {
			s.approx(ReasonWrongType)
			total += s.countRaw(input)
		}
	}
	total += 3
	s.resent = true
	total += s.tools(root, "tools")
	if t := s.d.get(root, "text"); t >= 0 {
		total += s.responseFormat(s.d.get(t, "format"))
	}
	s.resent = false
	s.est.PromptTokens = total
	s.est.OutputTokens = s.maxOutput(root, s.defaultOutput(), "max_output_tokens")
}
