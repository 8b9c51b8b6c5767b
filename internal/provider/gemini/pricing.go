package gemini

import (
	"bytes"
	"math"
	"strings"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/anthropic"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/openai"
	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// The estimate's constants; the package doc gives their evidence.
const (
	// Margin multiplies the cl100k_base count of Gemini text.
	Margin = 1.25
	// perContent is a content turn's role markers.
	perContent = 4
	// imageTile is the cost of one 768x768 tile of an image, or of an image of at most
	// 384x384 (ai.google.dev/gemini-api/docs/tokens).
	imageTile  = 258
	tileSide   = 768
	smallImage = 384
	// imageHigh is an image at the high media_resolution of models after Gemini 2, and the
	// cost of an image of unknown size.
	imageHigh = 1120
	// mediaChars is the base64 characters of inline audio, video or documents priced as one
	// token.
	mediaChars = 16
)

// Price prices the parsed body of a request to the family, from the object root: a
// generateContent body, the OpenAI-compatible endpoint's chat body, or (Claude on Vertex) a
// Messages body priced by internal/provider/anthropic with claude (validated); the chat body is
// read by OpenAI's chat rule with chat (validated). It sets s.Est.PromptTokens,
// s.Est.OutputTokens and s.Est.Stream, and records why they are approximate. It allocates
// nothing.
func Price(s *pricing.Request, root int, claude *anthropic.Settings, chat *openai.Settings) {
	switch s.Est.API {
	case provider.Messages:
		anthropic.PriceMessages(s, root, claude)
		return
	case provider.ChatCompletions:
		compatChat(s, root, chat)
		return
	}
	s.Est.Stream = s.Est.API == provider.StreamGenerateContent
	generate(s, root)
}

// get is the value of a field of object obj under its JSON name (camelCase, what the SDKs
// send) or its proto name (snake_case, which the API accepts too), or -1.
func get(s *pricing.Request, obj int, camel, snake string) int {
	if v := s.Doc.Get(obj, camel); v >= 0 {
		return v
	}
	return s.Doc.Get(obj, snake)
}

// generate prices a GenerateContentRequest (ai.google.dev/api/generate-content): contents,
// systemInstruction, tools and toolConfig; cachedContent is input the body does not hold.
func generate(s *pricing.Request, root int) {
	s.SetEncoding(s.Config().CL100K)
	s.Approx(pricing.ReasonGeminiEstimate)
	var text, media int64
	s.Resent = true // the system instruction and the tools come with every request
	if sys := get(s, root, "systemInstruction", "system_instruction"); sys >= 0 && s.Doc.Kind(sys) != pricing.Null {
		t, m := content(s, sys)
		text, media = text+t, media+m
	}
	for _, k := range [...][2]string{{"tools", "tools"}, {"toolConfig", "tool_config"}} {
		if v := get(s, root, k[0], k[1]); v >= 0 && s.Doc.Kind(v) != pricing.Null {
			s.Approx(pricing.ReasonTools)
			text += s.CountRaw(v)
		}
	}
	s.Resent = false
	if c := get(s, root, "cachedContent", "cached_content"); s.Doc.Kind(c) == pricing.String && s.Doc.NonEmpty(c) {
		// "cachedContents/{id}": a context cache whose tokens count in promptTokenCount
		// (ai.google.dev/gemini-api/docs/caching).
		s.Unseen(pricing.ReasonCachedContent)
	}
	contents := s.Doc.Get(root, "contents")
	switch s.Doc.Kind(contents) {
	case pricing.Array:
		end := s.Doc.End(contents)
		s.Doc.Elems(contents, func(c int) bool {
			s.Resent = s.Doc.End(c) != end // every turn but the last was sent before
			t, m := content(s, c)
			text, media = text+t, media+m
			return true
		})
		s.Resent = false
	case pricing.Object: // one Content where a list is expected
		s.Approx(pricing.ReasonWrongType)
		t, m := content(s, contents)
		text, media = text+t, media+m
	default:
		if contents >= 0 && s.Doc.Kind(contents) != pricing.Null {
			s.Approx(pricing.ReasonWrongType)
			text += s.CountRaw(contents)
		}
	}
	cfg := get(s, root, "generationConfig", "generation_config")
	out := s.MaxOutput(cfg, s.DefaultOutput(), "maxOutputTokens", "max_output_tokens")
	n := s.Choices(cfg, "candidateCount")
	if s.Doc.Get(cfg, "candidateCount") < 0 {
		n = s.Choices(cfg, "candidate_count")
	}
	s.Est.PromptTokens = scaled(text) + media
	s.Est.OutputTokens = pricing.SatMul(out, n)
}

// scaled is the margin applied to a count of cl100k_base tokens.
func scaled(n int64) int64 {
	v := math.Ceil(float64(n) * Margin)
	if !(v < 1<<50) {
		return 1 << 50
	}
	return int64(v)
}

// content prices one Content ({role, parts}): its text and its media.
func content(s *pricing.Request, c int) (text, media int64) {
	text = perContent
	if s.Doc.Kind(c) != pricing.Object {
		s.Approx(pricing.ReasonWrongType)
		return text + s.CountRaw(c), 0
	}
	parts := s.Doc.Get(c, "parts")
	if s.Doc.Kind(parts) != pricing.Array {
		if parts >= 0 && s.Doc.Kind(parts) != pricing.Null {
			s.Approx(pricing.ReasonWrongType)
			text += s.CountRaw(parts)
		}
		return text, 0
	}
	s.Doc.Elems(parts, func(p int) bool {
		t, m := part(s, p)
		text, media = text+t, media+m
		return true
	})
	return text, media
}

// part prices one Part (ai.google.dev/api/caching#Part): text, inlineData, fileData,
// functionCall, functionResponse, executableCode, codeExecutionResult. A thoughtSignature is an
// opaque token of the model's own, not counted.
func part(s *pricing.Request, p int) (text, media int64) {
	if s.Doc.Kind(p) != pricing.Object {
		s.Approx(pricing.ReasonWrongType)
		return s.CountRaw(p), 0
	}
	s.Doc.Children(p, func(k, v int) bool {
		switch {
		case s.Doc.KeyIs(k, "text"):
			text += s.CountText(v)
		case s.Doc.KeyIs(k, "inlineData"), s.Doc.KeyIs(k, "inline_data"):
			media += inline(s, v)
		case s.Doc.KeyIs(k, "fileData"), s.Doc.KeyIs(k, "file_data"):
			s.Unseen(pricing.ReasonFileInput)
		case s.Doc.KeyIs(k, "functionCall"), s.Doc.KeyIs(k, "function_call"),
			s.Doc.KeyIs(k, "functionResponse"), s.Doc.KeyIs(k, "function_response"),
			s.Doc.KeyIs(k, "executableCode"), s.Doc.KeyIs(k, "executable_code"),
			s.Doc.KeyIs(k, "codeExecutionResult"), s.Doc.KeyIs(k, "code_execution_result"):
			s.Approx(pricing.ReasonTools)
			text += s.CountRaw(v)
		case s.Doc.KeyIs(k, "thoughtSignature"), s.Doc.KeyIs(k, "thought_signature"),
			s.Doc.KeyIs(k, "thought"), s.Doc.KeyIs(k, "videoMetadata"), s.Doc.KeyIs(k, "video_metadata"),
			s.Doc.KeyIs(k, "mediaResolution"), s.Doc.KeyIs(k, "media_resolution"):
			return true
		default:
			s.Approx(pricing.ReasonUnpricedPart)
			text += s.CountRaw(v)
		}
		return true
	})
	return text, media
}

// inline prices an inlineData blob ({mimeType, data}): an image by its size, anything else by
// the length of its base64 data.
func inline(s *pricing.Request, blob int) int64 {
	mime, _ := s.Doc.Text(nil, get(s, blob, "mimeType", "mime_type"))
	data := s.Doc.Get(blob, "data")
	if !bytes.HasPrefix(mime, []byte("image/")) {
		s.Approx(pricing.ReasonUnpricedPart)
		var n int64
		if data >= 0 {
			n = int64(len(s.Doc.Raw(data)))
		}
		return (n + mediaChars - 1) / mediaChars
	}
	s.Approx(pricing.ReasonImage)
	w, h, ok := s.Base64ImageSize(data)
	if !ok {
		return imageHigh
	}
	return imageTokens(s.Est.Model, w, h)
}

// imageTokens is the cost of a w x h image to model: Gemini 2.0's tile rule, and at least the
// high media_resolution for the models after it.
func imageTokens(model string, w, h int) int64 {
	n := int64(imageTile)
	if w > smallImage || h > smallImage {
		n = int64((w+tileSide-1)/tileSide) * int64((h+tileSide-1)/tileSide) * imageTile
	}
	if !tileModel(model) {
		n = max(n, imageHigh)
	}
	return n
}

// tileModel is true for the models the tile rule was published for: Gemini 1.x and 2.x.
func tileModel(model string) bool {
	return strings.HasPrefix(model, "gemini-1") || strings.HasPrefix(model, "gemini-2")
}

// compatChat prices a body sent to the OpenAI-compatible endpoint: read as OpenAI's chat body
// (the endpoint takes the same messages, tools and max_tokens, ai.google.dev/gemini-api/docs/
// openai), counted with cl100k_base times Margin, since Gemini tokenizes it.
func compatChat(s *pricing.Request, root int, chat *openai.Settings) {
	s.SetEncoding(s.Config().CL100K)
	s.Approx(pricing.ReasonGeminiEstimate)
	openai.Chat(s, root, chat)
	s.Est.PromptTokens = scaled(s.Est.PromptTokens)
}
