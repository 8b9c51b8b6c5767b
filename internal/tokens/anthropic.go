package tokens

import (
	"math"
	"path"
)

// Anthropic pricing: an estimate, see the package doc. Text is counted with cl100k_base; the
// count plus per-message and per-block overheads is multiplied by Options.AnthropicFactor.
// Images use Anthropic's published size formula; tool definitions add the tool-use system
// prompt Anthropic documents.
const (
	anthropicBase        = 10  // conversation wrapper
	anthropicPerMessage  = 5   // role markers
	anthropicPerBlock    = 3   // content block framing
	anthropicToolsSystem = 530 // the largest tool-use system prompt in Anthropic's published table
)

func (s *pricing) anthropic(root int) {
	s.approx(ReasonAnthropicEstimate)
	var text, images int64 = anthropicBase, 0
	var blocks func(v int)
	blocks = func(v int) {
		switch s.d.kind(v) {
		case jString:
			text += s.countText(v)
			return
		case jArray:
		default:
			if v >= 0 && s.d.kind(v) != jNull {
				s.approx(ReasonWrongType)
				text += s.countRaw(v)
			}
			return
		}
		s.d.children(v, func(_, b int) bool {
			text += anthropicPerBlock
			typ := s.d.get(b, "type")
			switch {
			case s.d.textIs(typ, "text"):
				text += s.countText(s.d.get(b, "text"))
			case s.d.textIs(typ, "thinking"):
				text += s.countText(s.d.get(b, "thinking"))
			case s.d.textIs(typ, "image"):
				images += s.anthropicImage(s.d.get(b, "source"))
			case s.d.textIs(typ, "tool_result"):
				text += s.countText(s.d.get(b, "tool_use_id"))
				blocks(s.d.get(b, "content")) // a string or blocks; nesting is bounded by the parser
			case s.d.textIs(typ, "tool_use"):
				text += s.countText(s.d.get(b, "name")) + s.countRaw(s.d.get(b, "input"))
			case s.d.textIs(typ, "document"):
				// A PDF is read as each page's text and image (docs.anthropic.com/en/docs/
				// build-with-claude/pdf-support), which its bytes do not tell; a URL or a
				// file id is fetched by Anthropic. Plain-text documents are counted.
				switch src := s.d.get(b, "source"); {
				case s.d.textIs(s.d.get(src, "type"), "url"):
					s.unseen(ReasonDocumentURL)
				case s.d.textIs(s.d.get(src, "type"), "file"),
					s.d.textIs(s.d.get(src, "media_type"), "application/pdf"):
					s.unseen(ReasonFileInput)
				}
				s.approx(ReasonUnpricedPart)
				text += s.countRaw(b)
			case s.d.textIs(typ, "container_upload"):
				s.unseen(ReasonContainerUpload) // a file uploaded into the code execution container
				text += s.countRaw(b)
			default: // redacted_thinking, search results, ...
				s.approx(ReasonUnpricedPart)
				text += s.countRaw(b)
			}
			return true
		})
	}
	// Remote MCP servers (docs.anthropic.com/en/docs/agents-and-tools/mcp-connector): their
	// tool definitions and results enter the context without appearing in the body.
	if v := s.d.get(root, "mcp_servers"); s.d.kind(v) == jArray && s.d.nodes[v].next != int32(v+1) {
		s.unseen(ReasonMCPServers)
	}
	s.resent = true // the system prompt comes with every request
	blocks(s.d.get(root, "system"))
	s.resent = false
	msgs := s.d.get(root, "messages")
	if s.d.kind(msgs) != jArray {
		s.approx(ReasonWrongType)
		text += s.countRaw(msgs)
	}
	end := s.d.end(msgs)
	s.d.elems(msgs, func(m int) bool {
		s.resent = s.d.end(m) != end // every message but the last was sent before
		text += anthropicPerMessage
		if s.d.kind(m) != jObject {
			text += s.countRaw(m)
			return true
		}
		blocks(s.d.get(m, "content"))
		return true
	})
	s.resent = true
	if t := s.d.get(root, "tools"); s.d.kind(t) == jArray && s.d.nodes[t].next != int32(t+1) {
		text += anthropicToolsSystem + s.countRaw(t)
	}
	s.resent = false
	s.est.PromptTokens = int64(math.Ceil(float64(text)*s.anthropicFactor())) + images
	s.est.OutputTokens = s.maxOutput(root, s.defaultOutput(), "max_tokens")
}

func (s *pricing) anthropicImage(src int) int64 {
	if s.d.textIs(s.d.get(src, "type"), "base64") {
		if data, ok := s.d.text(s.w.buf, s.d.get(src, "data")); ok {
			if w, h, ok := headerSize(decodeB64Prefix(data, s.w.img)); ok {
				return anthropicImageTokens(w, h, s.p.opts.AnthropicImageTokens)
			}
		}
	}
	return s.p.opts.AnthropicImageTokens
}

// anthropicFactor is the multiplier for the request's model.
func (s *pricing) anthropicFactor() float64 {
	for _, r := range s.p.opts.AnthropicFactors {
		if ok, _ := path.Match(r.Model, s.est.Model); ok {
			return r.Factor
		}
	}
	return s.p.opts.AnthropicFactor
}

// anthropicChat prices a body sent to Anthropic's OpenAI-compatible endpoint
// (/v1/chat/completions on api.anthropic.com). It is read as OpenAI's chat body and counted as
// Anthropic text: Anthropic turns it into a Messages request (system and developer messages
// hoisted into one system prompt, tools into its own tools; max_tokens and
// max_completion_tokens "fully supported", n "must be exactly 1": platform.claude.com/docs/en/
// api/openai-sdk), so the estimate is the Messages one: the chat rule's count with cl100k_base,
// plus the Messages overheads (the wrapper, 5 rather than 3 per message, Anthropic's tool-use
// system prompt), times the model's factor. A larger n is reserved all the same.
func (s *pricing) anthropicChat(root int) {
	s.approx(ReasonAnthropicEstimate)
	s.chat(root)
	text := s.est.PromptTokens + anthropicBase
	msgs := s.d.get(root, "messages")
	s.d.elems(msgs, func(int) bool {
		text += anthropicPerMessage - 3 // the chat rule counted 3 per message
		return true
	})
	for _, k := range [...]string{"tools", "functions"} {
		if t := s.d.get(root, k); s.d.kind(t) == jArray && s.d.nodes[t].next != int32(t+1) {
			text += anthropicToolsSystem
			break
		}
	}
	s.est.PromptTokens = int64(math.Ceil(float64(text) * s.anthropicFactor()))
}
