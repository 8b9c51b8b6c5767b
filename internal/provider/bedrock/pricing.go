package bedrock

import (
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Price prices the parsed body of a request to the Bedrock runtime, from the object root, for
// the model s.Est.Model (the path's modelId, decoded). It sets s.Est.PromptTokens,
// s.Est.OutputTokens and s.Est.Stream (the stream operations), and records why they are
// approximate. It never modifies the body: the request is signed (SigV4) and goes on as it came.
// It allocates nothing.
func Price(s *pricing.Request, root int, set *anthropic.Settings) {
	s.SetEncoding(s.Config().CL100K)
	model := s.Est.Model
	name := Claude(model)
	switch s.Est.API {
	case provider.Converse, provider.ConverseStream:
		converse(s, root, name, set)
	default:
		invoke(s, root, name, set)
	}
	// Bedrock reserves the cache's reads with the rest of the prompt at the start, and gives them
	// back at the end (Dialect.Profile): admission must not expect them read.
	s.Est.NCache = 0
	s.Est.Stream = s.Est.API == provider.ConverseStream || s.Est.API == provider.InvokeModelStream
	if s.Est.OutputUnset {
		s.Est.OutputTokens = unsetOutput(s, model)
	}
}

// unsetOutput is the output reserved for a request that names no maximum: "If maxTokens is
// unset, it defaults to the model's maximum" and the quota reserves that
// (docs.aws.amazon.com/bedrock/latest/userguide/quotas-token-burndown.html; the max_tokens row
// of its terms), the family's table's figure; the configured default for a model the table does
// not know.
func unsetOutput(s *pricing.Request, model string) int64 {
	if n, ok := maxOutput(model); ok {
		return n
	}
	return s.DefaultOutput()
}

// invoke prices an InvokeModel body, the model's own format. A Claude model's is Anthropic's
// Messages body ("anthropic_version": "bedrock-2023-05-31", max_tokens; the model in the path,
// not in the body: docs.aws.amazon.com/bedrock/latest/userguide/model-parameters-anthropic-
// claude-messages.html), priced by the anthropic room's rules for the Claude model it names.
// Another vendor's body is counted as its JSON text, its output maximum read under each vendor's
// name for it (max_tokens, Meta's max_gen_len, Amazon Nova's inferenceConfig.max_new_tokens,
// Titan's textGenerationConfig.maxTokenCount, Cohere's max_tokens).
func invoke(s *pricing.Request, root int, name string, set *anthropic.Settings) {
	if name != "" || s.Doc.Get(root, "anthropic_version") >= 0 {
		withClaude(s, name, func() { anthropic.PriceMessages(s, root, set) })
		return
	}
	s.Approx(pricing.ReasonUnpricedPart)
	s.Est.PromptTokens = s.CountRaw(root)
	def := s.DefaultOutput()
	d := s.Doc
	switch {
	case d.Get(root, "max_tokens") >= 0:
		s.Est.OutputTokens = s.MaxOutput(root, def, "max_tokens")
	case d.Get(root, "max_gen_len") >= 0:
		s.Est.OutputTokens = s.MaxOutput(root, def, "max_gen_len")
	case d.Kind(d.Get(root, "inferenceConfig")) == pricing.Object:
		s.Est.OutputTokens = s.MaxOutput(d.Get(root, "inferenceConfig"), def, "max_new_tokens")
	case d.Kind(d.Get(root, "textGenerationConfig")) == pricing.Object:
		s.Est.OutputTokens = s.MaxOutput(d.Get(root, "textGenerationConfig"), def, "maxTokenCount")
	default:
		s.Est.OutputTokens = s.MaxOutput(root, def, "max_tokens")
	}
}

// withClaude runs f with s.Est.Model set to the Claude name (so that the anthropic room's
// per-model factors and minima apply), then restores the Bedrock id.
func withClaude(s *pricing.Request, name string, f func()) {
	model := s.Est.Model
	if name != "" {
		s.Est.Model = name
	}
	f()
	s.Est.Model = model
}

// converse prices a Converse body (API_runtime_Converse.html): system (SystemContentBlock:
// text, guardContent, cachePoint), messages (role, content: ContentBlock), toolConfig.tools
// (toolSpec: name, description, inputSchema.json), inferenceConfig.maxTokens. Bedrock turns it
// into the model's own request; for a Claude model that is a Messages request, estimated by the
// anthropic room's rules (its overheads, its factor for the Claude model named, its image rule).
// Another vendor's model is counted in the fallback encoding, with the same overheads and no
// factor. Content the body refers to but does not hold (an S3 location, a PDF, a stored prompt's
// variables) raises the prompt to its bound.
func converse(s *pricing.Request, root int, name string, set *anthropic.Settings) {
	claude := name != ""
	if claude {
		s.Approx(pricing.ReasonAnthropicEstimate)
	} else {
		s.SetEncoding(s.Config().Fallback)
		s.Approx(pricing.ReasonUnknownModel)
	}
	d := s.Doc
	var text, images int64 = anthropic.Base, 0
	if v := d.Get(root, "promptVariables"); d.Kind(v) == pricing.Object && d.NonEmpty(v) {
		s.Unseen(pricing.ReasonStoredPrompt) // the modelId is a stored prompt's ARN
	}
	blocks := func(v int) {
		if d.Kind(v) != pricing.Array {
			if v >= 0 && d.Kind(v) != pricing.Null {
				s.Approx(pricing.ReasonWrongType)
				text += s.CountRaw(v)
			}
			return
		}
		d.Elems(v, func(b int) bool {
			if d.Kind(b) != pricing.Object {
				s.Approx(pricing.ReasonWrongType)
				text += s.CountRaw(b)
				return true
			}
			d.Children(b, func(k, val int) bool {
				text += block(s, set, k, val, &images)
				return true
			})
			return true
		})
	}
	s.Resent = true // tools and the system prompt come with every request
	if tc := d.Get(root, "toolConfig"); d.Kind(tc) == pricing.Object {
		if t := d.Get(tc, "tools"); d.Kind(t) == pricing.Array && d.NonEmpty(t) {
			text += anthropic.ToolsSystem + s.CountRaw(t)
		}
	}
	blocks(d.Get(root, "system"))
	s.Resent = false
	msgs := d.Get(root, "messages")
	if d.Kind(msgs) != pricing.Array {
		s.Approx(pricing.ReasonWrongType)
		text += s.CountRaw(msgs)
	}
	end := d.End(msgs)
	d.Elems(msgs, func(m int) bool {
		s.Resent = d.End(m) != end // every message but the last was sent before
		text += anthropic.PerMessage
		if d.Kind(m) != pricing.Object {
			text += s.CountRaw(m)
			return true
		}
		blocks(d.Get(m, "content"))
		return true
	})
	s.Resent = false
	if claude {
		withClaude(s, name, func() { s.Est.PromptTokens = anthropic.Estimate(s, set, text, images) })
	} else {
		s.Est.PromptTokens = text + images
	}
	def := s.DefaultOutput()
	if ic := d.Get(root, "inferenceConfig"); d.Kind(ic) == pricing.Object {
		s.Est.OutputTokens = s.MaxOutput(ic, def, "maxTokens")
	} else {
		s.Est.OutputTokens = s.MaxOutput(root, def, "maxTokens") // absent: unset
	}
}

// block counts one member (key k, value v) of a content block: a ContentBlock is a union, one
// member set. It adds image tokens to *images and returns the text tokens.
func block(s *pricing.Request, set *anthropic.Settings, k, v int, images *int64) int64 {
	d := s.Doc
	switch {
	case d.KeyIs(k, "cachePoint"):
		return 0 // a marker, no content
	case d.KeyIs(k, "text"):
		return anthropic.PerBlock + s.CountText(v)
	case d.KeyIs(k, "image"):
		*images += imageTokens(s, set, v)
		return anthropic.PerBlock
	case d.KeyIs(k, "toolUse"):
		return anthropic.PerBlock + s.CountText(d.Get(v, "toolUseId")) + s.CountText(d.Get(v, "name")) + s.CountRaw(d.Get(v, "input"))
	case d.KeyIs(k, "toolResult"):
		n := anthropic.PerBlock + s.CountText(d.Get(v, "toolUseId"))
		var inner int64
		d.Elems(d.Get(v, "content"), func(b int) bool {
			d.Children(b, func(k2, v2 int) bool {
				if d.KeyIs(k2, "json") {
					inner += anthropic.PerBlock + s.CountRaw(v2)
					return true
				}
				inner += block(s, set, k2, v2, images)
				return true
			})
			return true
		})
		return n + inner
	case d.KeyIs(k, "reasoningContent"):
		if rt := d.Get(v, "reasoningText"); rt >= 0 {
			return anthropic.PerBlock + s.CountText(d.Get(rt, "text"))
		}
		s.Approx(pricing.ReasonUnpricedPart)
		return anthropic.PerBlock + s.CountRaw(v)
	case d.KeyIs(k, "document"):
		src := d.Get(v, "source")
		switch {
		case d.Get(src, "s3Location") >= 0:
			s.Unseen(pricing.ReasonFileInput)
		case d.TextIs(d.Get(v, "format"), "pdf"):
			// A PDF is read as each page's text and image, which its bytes do not tell.
			s.Unseen(pricing.ReasonFileInput)
		case d.Get(src, "text") >= 0:
			return anthropic.PerBlock + s.CountText(d.Get(src, "text"))
		}
		s.Approx(pricing.ReasonUnpricedPart)
		return anthropic.PerBlock + s.CountRaw(v)
	case d.KeyIs(k, "video"):
		if d.Get(d.Get(v, "source"), "s3Location") >= 0 {
			s.Unseen(pricing.ReasonFileInput)
		}
		s.Approx(pricing.ReasonUnpricedPart)
		return anthropic.PerBlock + s.CountRaw(v)
	}
	// guardContent, citationsContent, and members of later versions.
	s.Approx(pricing.ReasonUnpricedPart)
	return anthropic.PerBlock + s.CountRaw(v)
}

// imageTokens prices an ImageBlock {format, source: {bytes | s3Location}}: by Anthropic's size
// rule when its bytes (base64 in JSON) tell the size, else at Config.AnthropicImageTokens (the
// rule's maximum); one in S3 is fetched by Bedrock, unseen here.
func imageTokens(s *pricing.Request, set *anthropic.Settings, img int) int64 {
	src := s.Doc.Get(img, "source")
	fixed := set.ImageTokens
	if s.Doc.Get(src, "s3Location") >= 0 {
		s.Unseen(pricing.ReasonFileInput)
		return fixed
	}
	s.Approx(pricing.ReasonImage)
	if w, h, ok := s.Base64ImageSize(s.Doc.Get(src, "bytes")); ok {
		return anthropic.ImageTokens(w, h, fixed)
	}
	return fixed
}
