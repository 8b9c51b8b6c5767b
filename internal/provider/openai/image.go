package openai

import (
	"math"
	"strings"
)

// imageRule is one row of OpenAI's published image cost table ("Calculating costs" in
// the vision guide): tile models cost base + tile per 512 px tile of the scaled image; patch
// models cost patches of 32 px (at most 1536) times a multiplier.
type imageRule struct {
	prefix     string
	base, tile int64
	patchMult  float64 // > 0 for patch models
}

// Order matters: longer prefixes first.
var imageRules = []imageRule{
	{prefix: "gpt-4.1-mini", patchMult: 1.62},
	{prefix: "gpt-4.1-nano", patchMult: 2.46},
	{prefix: "gpt-5-mini", patchMult: 1.62},
	{prefix: "gpt-5-nano", patchMult: 2.46},
	{prefix: "o4-mini", patchMult: 1.72},
	{prefix: "gpt-4o-mini", base: 2833, tile: 5667},
	{prefix: "o1", base: 75, tile: 150},
	{prefix: "o3", base: 75, tile: 150},
	{prefix: "gpt-5", base: 70, tile: 140},
	{prefix: "computer-use", base: 65, tile: 129},
	{prefix: "", base: 85, tile: 170}, // gpt-4o, gpt-4.1, gpt-4.5, gpt-4-turbo and unknown models
}

// imageTokens prices one image. w and h are 0 when unknown; fixed (> 0) then replaces the
// rule's worst case.
func imageTokens(model, detail string, w, h int, fixed int64) int64 {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	m = strings.TrimPrefix(m, "ft:")
	var rule imageRule
	for _, r := range imageRules {
		if strings.HasPrefix(m, r.prefix) {
			rule = r
			break
		}
	}
	known := w > 0 && h > 0 && w < 1<<16 && h < 1<<16
	if rule.patchMult > 0 {
		if !known {
			if fixed > 0 {
				return fixed
			}
			return int64(math.Ceil(1536 * rule.patchMult))
		}
		return int64(math.Ceil(float64(patches(w, h)) * rule.patchMult))
	}
	if detail == "low" {
		return rule.base
	}
	if !known {
		if fixed > 0 {
			return fixed
		}
		// The most tiles any image can need: 768x2048 after scaling is 2x4 tiles.
		return rule.base + 8*rule.tile
	}
	fw, fh := float64(w), float64(h)
	if s := 2048 / max(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	if s := 768 / min(fw, fh); s < 1 {
		fw, fh = fw*s, fh*s
	}
	tiles := int64(math.Ceil(fw/512) * math.Ceil(fh/512))
	return rule.base + rule.tile*tiles
}

// patches is OpenAI's 32 px patch count, scaled down to at most 1536 patches.
func patches(w, h int) int64 {
	fw, fh := float64(w), float64(h)
	p := math.Ceil(fw/32) * math.Ceil(fh/32)
	if p <= 1536 {
		return int64(p)
	}
	r := math.Sqrt(32 * 32 * 1536 / (fw * fh))
	r *= min(math.Floor(fw*r/32)/(fw*r/32), math.Floor(fh*r/32)/(fh*r/32))
	return int64(min(math.Ceil(fw*r/32)*math.Ceil(fh*r/32), 1536))
}
