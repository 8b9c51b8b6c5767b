package anthropic

import (
	"math"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Anthropic pricing: an estimate, see the package doc for its evidence. Text is counted with
// cl100k_base; the count plus per-message and per-block overheads is multiplied by the model's
// factor (Settings.Factors, Factor).
// Images use Anthropic's published size formula; tool definitions add the tool-use system
// prompt Anthropic documents.
const (
	anthropicBase        = 10  // conversation wrapper
	anthropicPerMessage  = 5   // role markers
	anthropicPerBlock    = 3   // content block framing
	anthropicToolsSystem = 530 // the largest tool-use system prompt in Anthropic's published table
)

// Price prices the parsed body of a request to the family, from the object root, with set
// (validated): the Messages API, or the OpenAI-compatible endpoint's chat body, which is read
// by OpenAI's chat rule with chat (its image parts are OpenAI's). It counts in cl100k_base
// whatever the model, sets s.Est.PromptTokens and s.Est.OutputTokens and records why they are
// approximate. It allocates nothing.
func Price(s *pricing.Request, root int, set *Settings, chat *openai.Settings) {
	s.SetEncoding(s.Config().CL100K)
	if s.Est.API == provider.ChatCompletions {
		compatChat(s, root, set, chat)
		return
	}
	messages(s, root, set)
}

// messages prices a Messages API body, in the order Anthropic builds its cache prefixes
// (tools, system, messages), recording the prefixes its cache_control blocks mark (cache.go).
func messages(s *pricing.Request, root int, set *Settings) {
	s.Approx(pricing.ReasonAnthropicEstimate)
	var text, images int64 = anthropicBase, 0
	var cp cachePrefix
	cp.start(s, root)
	f := set.factor(s.Est.Model)
	var blocks func(v int, top bool)
	blocks = func(v int, top bool) {
		switch s.Doc.Kind(v) {
		case pricing.String:
			cp.write(s.Doc, v)
			text += s.CountText(v)
			return
		case pricing.Array:
		default:
			if v >= 0 && s.Doc.Kind(v) != pricing.Null {
				s.Approx(pricing.ReasonWrongType)
				cp.write(s.Doc, v)
				text += s.CountRaw(v)
			}
			return
		}
		s.Doc.Children(v, func(_, b int) bool {
			marked, ttl := cp.block(s.Doc, b)
			text += anthropicPerBlock
			typ := s.Doc.Get(b, "type")
			switch {
			case s.Doc.TextIs(typ, "text"):
				text += s.CountText(s.Doc.Get(b, "text"))
			case s.Doc.TextIs(typ, "thinking"):
				text += s.CountText(s.Doc.Get(b, "thinking"))
			case s.Doc.TextIs(typ, "image"):
				images += image(s, s.Doc.Get(b, "source"), set)
			case s.Doc.TextIs(typ, "tool_result"):
				text += s.CountText(s.Doc.Get(b, "tool_use_id"))
				blocks(s.Doc.Get(b, "content"), false) // a string or blocks; nesting is bounded by the parser
			case s.Doc.TextIs(typ, "tool_use"):
				text += s.CountText(s.Doc.Get(b, "name")) + s.CountRaw(s.Doc.Get(b, "input"))
			case s.Doc.TextIs(typ, "document"):
				// A PDF is read as each page's text and image (docs.anthropic.com/en/docs/
				// build-with-claude/pdf-support), which its bytes do not tell; a URL or a
				// file id is fetched by Anthropic. Plain-text documents are counted.
				switch src := s.Doc.Get(b, "source"); {
				case s.Doc.TextIs(s.Doc.Get(src, "type"), "url"):
					s.Unseen(pricing.ReasonDocumentURL)
				case s.Doc.TextIs(s.Doc.Get(src, "type"), "file"),
					s.Doc.TextIs(s.Doc.Get(src, "media_type"), "application/pdf"):
					s.Unseen(pricing.ReasonFileInput)
				}
				s.Approx(pricing.ReasonUnpricedPart)
				text += s.CountRaw(b)
			case s.Doc.TextIs(typ, "container_upload"):
				s.Unseen(pricing.ReasonContainerUpload) // a file uploaded into the code execution container
				text += s.CountRaw(b)
			default: // redacted_thinking, search results, ...
				s.Approx(pricing.ReasonUnpricedPart)
				text += s.CountRaw(b)
			}
			if marked && top {
				cp.point(s, text, images, f, ttl)
			}
			return true
		})
	}
	// Remote MCP servers (docs.anthropic.com/en/docs/agents-and-tools/mcp-connector): their
	// tool definitions and results enter the context without appearing in the body.
	if v := s.Doc.Get(root, "mcp_servers"); s.Doc.Kind(v) == pricing.Array && s.Doc.NonEmpty(v) {
		s.Unseen(pricing.ReasonMCPServers)
	}
	s.Resent = true // tools and the system prompt come with every request
	if t := s.Doc.Get(root, "tools"); s.Doc.Kind(t) == pricing.Array && s.Doc.NonEmpty(t) {
		text += anthropicToolsSystem + s.CountRaw(t)
		if marked, ttl := cp.tools(s.Doc, t); marked {
			cp.point(s, text, images, f, ttl)
		}
	}
	blocks(s.Doc.Get(root, "system"), true)
	s.Resent = false
	msgs := s.Doc.Get(root, "messages")
	if s.Doc.Kind(msgs) != pricing.Array {
		s.Approx(pricing.ReasonWrongType)
		text += s.CountRaw(msgs)
	}
	end := s.Doc.End(msgs)
	s.Doc.Elems(msgs, func(m int) bool {
		s.Resent = s.Doc.End(m) != end // every message but the last was sent before
		text += anthropicPerMessage
		if s.Doc.Kind(m) != pricing.Object {
			cp.write(s.Doc, m)
			text += s.CountRaw(m)
			return true
		}
		cp.write(s.Doc, s.Doc.Get(m, "role"))
		blocks(s.Doc.Get(m, "content"), true)
		return true
	})
	s.Resent = false
	if marked, ttl := cp.mark(s.Doc, root); marked {
		cp.point(s, text, images, f, ttl) // automatic caching: the whole prompt
	}
	s.Est.PromptTokens = int64(math.Ceil(float64(text)*f)) + images
	s.Est.OutputTokens = s.MaxOutput(root, s.DefaultOutput(), "max_tokens")
}

// image prices an image block's source: by its size when its base64 data tells it, else at
// set.ImageTokens.
func image(s *pricing.Request, src int, set *Settings) int64 {
	if s.Doc.TextIs(s.Doc.Get(src, "type"), "base64") {
		if w, h, ok := s.Base64ImageSize(s.Doc.Get(src, "data")); ok {
			return imageTokens(w, h, set.ImageTokens)
		}
	}
	return set.ImageTokens
}

// compatChat prices a body sent to Anthropic's OpenAI-compatible endpoint
// (/v1/chat/completions on api.anthropic.com). It is read as OpenAI's chat body and counted as
// Anthropic text: Anthropic turns it into a Messages request (system and developer messages
// hoisted into one system prompt, tools into its own tools; max_tokens and
// max_completion_tokens "fully supported", n "must be exactly 1": platform.claude.com/docs/en/
// api/openai-sdk), so the estimate is the Messages one: the chat rule's count with cl100k_base,
// plus the Messages overheads (the wrapper, 5 rather than 3 per message, Anthropic's tool-use
// system prompt), times the model's factor. A larger n is reserved all the same.
func compatChat(s *pricing.Request, root int, set *Settings, chat *openai.Settings) {
	s.Approx(pricing.ReasonAnthropicEstimate)
	openai.Chat(s, root, chat)
	text := s.Est.PromptTokens + anthropicBase
	msgs := s.Doc.Get(root, "messages")
	s.Doc.Elems(msgs, func(int) bool {
		text += anthropicPerMessage - 3 // the chat rule counted 3 per message
		return true
	})
	for _, k := range [...]string{"tools", "functions"} {
		if t := s.Doc.Get(root, k); s.Doc.Kind(t) == pricing.Array && s.Doc.NonEmpty(t) {
			text += anthropicToolsSystem
			break
		}
	}
	s.Est.PromptTokens = int64(math.Ceil(float64(text) * set.factor(s.Est.Model)))
}
