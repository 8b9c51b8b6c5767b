package anthropic

import "math"

// imageTokens is Anthropic's published estimate (vision guide): width*height/750
// after the image is scaled to at most 1568 px on the long edge and about 1.15 megapixels.
func imageTokens(w, h int, fixed int64) int64 {
	if w <= 0 || h <= 0 || w >= 1<<16 || h >= 1<<16 {
		return fixed
	}
	fw, fh := float64(w), float64(h)
	if s := 1568 / max(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	if s := math.Sqrt(1_150_000 / (fw * fh)); s < 1 {
		fw, fh = fw*s, fh*s
	}
	return int64(math.Ceil(fw * fh / 750))
}
