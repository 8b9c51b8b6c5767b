package openai

import (
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// OpenAI pricing. The chat rule is OpenAI's published one (OpenAI Cookbook, "How to count
// tokens with tiktoken", num_tokens_from_messages): every message costs 3 tokens plus the
// tokens of each of its string values (role, content, name, ...), a name costs 1 more, and
// every reply is primed with 3 tokens (<|start|>assistant<|message|>). gpt-3.5-turbo-0301 used
// 4 per message and -1 per name.

// toolsOverhead is added once when tools, functions or a JSON schema are priced by their JSON
// text (definitions no published rule covers, tools.go): OpenAI renders them into a hidden
// system message ("# Tools", "## functions", "namespace functions {...}"). Their JSON text is
// longer than that TypeScript-like rendering for typical schemas (quotes, braces and
// "type"/"properties" keys), so the total errs high.
const (
	toolsOverhead = 20
	perToolCall   = 5 // per assistant tool call, on top of its JSON text
)

// completionsMaxTokens is the /v1/completions API's own default max_tokens.
const completionsMaxTokens = 16

// Price prices the parsed body of a request to one of the family's APIs, from the object root,
// with set (validated): it counts in the model's encoding (the fallback for unknown models,
// approximate), sets s.Est.PromptTokens and s.Est.OutputTokens and records why they are
// approximate. Any other API is left unpriced. It allocates nothing.
func Price(s *pricing.Request, root int, set *Settings) {
	enc, known := s.Config().Encoding(s.Est.Model)
	s.SetEncoding(enc)
	if !known && !s.EncodingFixed() {
		s.Approx(pricing.ReasonUnknownModel)
	}
	switch s.Est.API {
	case provider.ChatCompletions:
		Chat(s, root, set)
	case provider.Completions:
		completions(s, root)
	case provider.Embeddings:
		embeddings(s, root)
	case provider.Responses:
		responses(s, root, set)
	}
}

// Chat prices a chat completions body by the chat rule, with set (validated). Anthropic's
// OpenAI-compatible endpoint reads the same body (internal/provider/anthropic).
func Chat(s *pricing.Request, root int, set *Settings) {
	perMsg, perName := int64(3), int64(1)
	if strings.HasPrefix(s.Est.Model, "gpt-3.5-turbo-0301") {
		perMsg, perName = 4, -1
	}
	msgs := s.Doc.Get(root, "messages")
	var total int64
	if s.Doc.Kind(msgs) != pricing.Array {
		s.Approx(pricing.ReasonWrongType)
		total += s.CountRaw(msgs)
	}
	end := s.Doc.End(msgs)
	s.Doc.Elems(msgs, func(m int) bool {
		s.Resent = s.Doc.End(m) != end // every message but the last was sent before
		total += perMsg
		if s.Doc.Kind(m) != pricing.Object {
			s.Approx(pricing.ReasonWrongType)
			total += s.CountRaw(m)
			return true
		}
		s.Doc.Children(m, func(k, v int) bool {
			switch s.Doc.Kind(v) {
			case pricing.String:
				total += s.CountText(v)
				if s.Doc.KeyIs(k, "name") {
					total += perName
				}
			case pricing.Null:
			case pricing.Array:
				switch {
				case s.Doc.KeyIs(k, "content"):
					total += parts(s, v, set)
				case s.Doc.KeyIs(k, "tool_calls"):
					s.Approx(pricing.ReasonTools)
					s.Doc.Children(v, func(_, c int) bool {
						total += perToolCall + s.CountRaw(c)
						return true
					})
				default:
					s.Approx(pricing.ReasonUnpricedPart)
					total += s.CountRaw(v)
				}
			default:
				if s.Doc.KeyIs(k, "function_call") {
					s.Approx(pricing.ReasonTools)
				} else {
					s.Approx(pricing.ReasonUnpricedPart)
				}
				total += s.CountRaw(v)
			}
			return true
		})
		return true
	})
	total += 3 // reply priming
	s.Resent = true
	total += definitions(s, root) // tools.go
	total += responseFormat(s, s.Doc.Get(root, "response_format"))
	s.Resent = false
	s.Est.PromptTokens = total
	out := s.MaxOutput(root, s.DefaultOutput(), "max_completion_tokens", "max_tokens")
	s.Est.OutputTokens = pricing.SatMul(out, s.Choices(root, "n"))
}

// parts prices a content array (chat or Responses): text parts by their text, images by the
// image rule, anything else by its JSON text.
func parts(s *pricing.Request, arr int, set *Settings) int64 {
	var total int64
	s.Approx(pricing.ReasonContentParts)
	s.Doc.Children(arr, func(_, part int) bool {
		if s.Doc.Kind(part) == pricing.String { // Responses allows bare strings in some places
			total += s.CountText(part)
			return true
		}
		typ := s.Doc.Get(part, "type")
		switch {
		case s.Doc.TextIs(typ, "text"), s.Doc.TextIs(typ, "input_text"), s.Doc.TextIs(typ, "output_text"):
			total += s.CountText(s.Doc.Get(part, "text"))
		case s.Doc.TextIs(typ, "refusal"):
			total += s.CountText(s.Doc.Get(part, "refusal"))
		case s.Doc.TextIs(typ, "image_url"):
			img := s.Doc.Get(part, "image_url")
			url, detail := img, -1
			if s.Doc.Kind(img) == pricing.Object {
				url, detail = s.Doc.Get(img, "url"), s.Doc.Get(img, "detail")
			}
			total += image(s, url, detail, set)
		case s.Doc.TextIs(typ, "input_image"):
			total += image(s, s.Doc.Get(part, "image_url"), s.Doc.Get(part, "detail"), set)
		case s.Doc.TextIs(typ, "file"), s.Doc.TextIs(typ, "input_file"):
			// A file by id or URL, or a PDF inline: the provider reads its pages' text and
			// images, which these bytes do not tell (platform.openai.com/docs/guides/pdf-files).
			s.Unseen(pricing.ReasonFileInput)
			total += s.CountRaw(part)
		default:
			s.Approx(pricing.ReasonUnpricedPart)
			total += s.CountRaw(part)
		}
		return true
	})
	return total
}

// image prices an image part by the model's rule (image.go), its size read from a data URL, or
// at set.ImageTokens when that is unknown and the setting is given.
func image(s *pricing.Request, url, detail int, set *Settings) int64 {
	s.Approx(pricing.ReasonImage)
	w, h, _ := s.ImageSize(url)
	var buf [16]byte
	d, _ := s.Doc.Text(buf[:0], detail)
	return imageTokens(s.Est.Model, string(d), w, h, set.ImageTokens)
}

// tools prices tool/function definitions as their JSON text plus the fixed overhead
// (ReasonTools).
func tools(s *pricing.Request, root int, keys ...string) int64 {
	var total int64
	for _, k := range keys {
		t := s.Doc.Get(root, k)
		if s.Doc.Kind(t) != pricing.Array || !s.Doc.NonEmpty(t) {
			continue // absent, null or empty
		}
		s.Approx(pricing.ReasonTools)
		if total == 0 {
			total = toolsOverhead
		}
		total += s.CountRaw(t)
	}
	return total
}

// responseFormat prices a JSON schema (chat "response_format" or Responses "text.format").
func responseFormat(s *pricing.Request, rf int) int64 {
	if s.Doc.Kind(rf) != pricing.Object || !s.Doc.TextIs(s.Doc.Get(rf, "type"), "json_schema") {
		return 0
	}
	s.Approx(pricing.ReasonTools)
	return toolsOverhead + s.CountRaw(rf)
}

func completions(s *pricing.Request, root int) {
	prompts, total := inputs(s, s.Doc.Get(root, "prompt"))
	total += s.CountText(s.Doc.Get(root, "suffix"))
	s.Est.PromptTokens = total
	out := s.MaxOutput(root, completionsMaxTokens, "max_tokens")
	n := max(s.Choices(root, "n"), s.Choices(root, "best_of"))
	s.Est.OutputTokens = pricing.SatMul(pricing.SatMul(out, n), max(prompts, 1))
}

func embeddings(s *pricing.Request, root int) {
	_, s.Est.PromptTokens = inputs(s, s.Doc.Get(root, "input"))
}

// inputs prices a completions prompt or an embeddings input: a string, an array of strings,
// an array of token ids or an array of token-id arrays. It returns how many prompts there are
// and their tokens (exact: token ids count one each).
func inputs(s *pricing.Request, v int) (prompts, total int64) {
	switch s.Doc.Kind(v) {
	case pricing.String:
		return 1, s.CountText(v)
	case pricing.Array:
		ids := int64(0)
		s.Doc.Children(v, func(_, e int) bool {
			switch s.Doc.Kind(e) {
			case pricing.String:
				prompts++
				total += s.CountText(e)
			case pricing.Number:
				ids++
			case pricing.Array:
				prompts++
				s.Doc.Children(e, func(_, id int) bool {
					total++
					if s.Doc.Kind(id) != pricing.Number {
						s.Approx(pricing.ReasonWrongType)
					}
					return true
				})
			default:
				s.Approx(pricing.ReasonWrongType)
				total += s.CountRaw(e)
			}
			return true
		})
		if ids > 0 {
			prompts++
			total += ids
		}
		return prompts, total
	case pricing.Null:
		if v < 0 {
			return 0, 0
		}
	}
	s.Approx(pricing.ReasonWrongType)
	return 1, s.CountRaw(v)
}

// responses prices the Responses API with the chat rule: "instructions" is a system message,
// "input" a user message or a list of items. OpenAI publishes no rule for it, and a
// previous_response_id brings earlier turns the body does not show.
func responses(s *pricing.Request, root int, set *Settings) {
	s.Approx(pricing.ReasonResponses)
	// Input the body refers to but does not hold (platform.openai.com/docs/api-reference/
	// responses/create): the turns of a previous response or a stored conversation, a stored
	// prompt template, and items by reference.
	if v := s.Doc.Get(root, "previous_response_id"); s.Doc.Kind(v) == pricing.String && s.Doc.NonEmpty(v) {
		s.Unseen(pricing.ReasonPreviousResponse)
	}
	if v := s.Doc.Get(root, "conversation"); v >= 0 && s.Doc.Kind(v) != pricing.Null {
		s.Unseen(pricing.ReasonConversation)
	}
	if v := s.Doc.Get(root, "prompt"); s.Doc.Kind(v) == pricing.Object {
		s.Unseen(pricing.ReasonStoredPrompt)
	}
	s.Doc.Elems(s.Doc.Get(root, "tools"), func(t int) bool {
		switch typ := s.Doc.Get(t, "type"); {
		case s.Doc.TextIs(typ, "mcp"):
			s.Unseen(pricing.ReasonMCPServers) // the server's tool list is imported into the context
		case s.Doc.TextIs(typ, "file_search"):
			s.Unseen(pricing.ReasonFileInput) // retrieved chunks of stored files
		}
		return true
	})
	var total int64
	if ins := s.Doc.Get(root, "instructions"); s.Doc.Kind(ins) == pricing.String {
		s.Resent = true
		total += 3 + 1 + s.CountText(ins) // "system" is one token
		s.Resent = false
	}
	input := s.Doc.Get(root, "input")
	switch s.Doc.Kind(input) {
	case pricing.String:
		total += 3 + 1 + s.CountText(input)
	case pricing.Array:
		end := s.Doc.End(input)
		s.Doc.Children(input, func(_, item int) bool {
			s.Resent = s.Doc.End(item) != end
			total += 3
			if s.Doc.Kind(item) != pricing.Object {
				total += s.CountRaw(item)
				return true
			}
			if role := s.Doc.Get(item, "role"); role >= 0 {
				total += s.CountText(role)
				c := s.Doc.Get(item, "content")
				if s.Doc.Kind(c) == pricing.Array {
					total += parts(s, c, set)
				} else {
					total += s.CountText(c)
				}
				return true
			}
			if s.Doc.TextIs(s.Doc.Get(item, "type"), "item_reference") {
				s.Unseen(pricing.ReasonItemReference)
			}
			// function_call, function_call_output, reasoning and other items.
			s.Approx(pricing.ReasonTools)
			total += s.CountRaw(item)
			return true
		})
	default:
		if input >= 0 {
			s.Approx(pricing.ReasonWrongType)
			total += s.CountRaw(input)
		}
	}
	total += 3
	s.Resent = true
	total += tools(s, root, "tools")
	if t := s.Doc.Get(root, "text"); t >= 0 {
		total += responseFormat(s, s.Doc.Get(t, "format"))
	}
	s.Resent = false
	s.Est.PromptTokens = total
	s.Est.OutputTokens = s.MaxOutput(root, s.DefaultOutput(), "max_output_tokens")
}
