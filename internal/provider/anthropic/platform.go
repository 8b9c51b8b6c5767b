package anthropic

import (
	"math"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// What the rooms of platforms that serve Claude under bodies of their own (Amazon Bedrock's
// Converse API) need of this room's estimate: its overheads, its factor and its image rule, so
// that a Claude prompt is priced the same whatever body carries it.
const (
	// Base is the conversation wrapper, PerMessage a message's role markers, PerBlock a content
	// block's framing, ToolsSystem the tool-use system prompt of a request that defines tools.
	Base        = anthropicBase
	PerMessage  = anthropicPerMessage
	PerBlock    = anthropicPerBlock
	ToolsSystem = anthropicToolsSystem
)

// Estimate is the estimate of a Claude prompt whose text counts text tokens in cl100k_base
// (overheads included) and whose images count images: the text times set's factor for
// s.Est.Model, plus the images. It allocates nothing.
func Estimate(s *pricing.Request, set *Settings, text, images int64) int64 {
	return int64(math.Ceil(float64(text)*set.factor(s.Est.Model))) + images
}

// PriceMessages prices a Messages API body that another platform carries (Bedrock's InvokeModel
// with a Claude model), from the object root, with set (validated), as Price prices one sent to
// Anthropic. It allocates nothing.
func PriceMessages(s *pricing.Request, root int, set *Settings) {
	s.SetEncoding(s.Config().CL100K)
	messages(s, root, set)
}

// ImageTokens is the tokens of an image of w x h pixels by Anthropic's vision guide, or fixed
// when the size is not plausible.
func ImageTokens(w, h int, fixed int64) int64 { return imageTokens(w, h, fixed) }
