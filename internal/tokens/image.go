package tokens

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"math"
	"strings"
)

// imageSize returns the pixel size of an image given as a data URL
// ("data:image/png;base64,...") by decoding only the first bytes of its header (PNG, GIF,
// JPEG, WebP). ok is false for plain URLs and unrecognised data.
func imageSize(url []byte, scratch []byte) (w, h int, ok bool) {
	if !bytes.HasPrefix(url, []byte("data:")) {
		return 0, 0, false
	}
	comma := bytes.IndexByte(url, ',')
	if comma < 0 || !bytes.HasSuffix(url[:comma], []byte(";base64")) {
		return 0, 0, false
	}
	return headerSize(decodeB64Prefix(url[comma+1:], scratch))
}

// decodeB64Prefix decodes the first 64 KiB of base64 data: JPEG headers can be long (EXIF, ICC
// profiles), and 64 KiB covers nearly all.
func decodeB64Prefix(b64, scratch []byte) []byte {
	const maxHeader = 64 << 10
	b64 = b64[:min(len(b64), maxHeader/3*4)]
	b64 = b64[:len(b64)/4*4]
	buf, _ := base64.StdEncoding.AppendDecode(scratch[:0], b64)
	return buf
}

func headerSize(b []byte) (w, h int, ok bool) {
	switch {
	case len(b) >= 24 && bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return int(binary.BigEndian.Uint32(b[16:])), int(binary.BigEndian.Uint32(b[20:])), true
	case len(b) >= 10 && (bytes.HasPrefix(b, []byte("GIF87a")) || bytes.HasPrefix(b, []byte("GIF89a"))):
		return int(binary.LittleEndian.Uint16(b[6:])), int(binary.LittleEndian.Uint16(b[8:])), true
	case len(b) >= 30 && bytes.HasPrefix(b, []byte("RIFF")) && string(b[8:12]) == "WEBP":
		switch string(b[12:16]) {
		case "VP8 ":
			return int(binary.LittleEndian.Uint16(b[26:]) & 0x3fff), int(binary.LittleEndian.Uint16(b[28:]) & 0x3fff), true
		case "VP8L":
			v := binary.LittleEndian.Uint32(b[21:])
			return int(v&0x3fff) + 1, int(v>>14&0x3fff) + 1, true
		case "VP8X":
			return int(uint32(b[24])|uint32(b[25])<<8|uint32(b[26])<<16) + 1,
				int(uint32(b[27])|uint32(b[28])<<8|uint32(b[29])<<16) + 1, true
		}
	case len(b) >= 4 && b[0] == 0xFF && b[1] == 0xD8:
		for i := 2; i+9 < len(b); {
			if b[i] != 0xFF {
				return 0, 0, false
			}
			m := b[i+1]
			if m == 0xFF {
				i++
				continue
			}
			if m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC {
				return int(binary.BigEndian.Uint16(b[i+7:])), int(binary.BigEndian.Uint16(b[i+5:])), true
			}
			if m == 0xD8 || m == 0x01 || (m >= 0xD0 && m <= 0xD7) {
				i += 2
				continue
			}
			i += 2 + int(binary.BigEndian.Uint16(b[i+2:]))
		}
	}
	return 0, 0, false
}

// openAIImageRule is one row of OpenAI's published image cost table ("Calculating costs" in
// the vision guide): tile models cost base + tile per 512 px tile of the scaled image; patch
// models cost patches of 32 px (at most 1536) times a multiplier.
type openAIImageRule struct {
	prefix     string
	base, tile int64
	patchMult  float64 // > 0 for patch models
}

// Order matters: longer prefixes first.
var openAIImageRules = []openAIImageRule{
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

// openAIImageTokens prices one image. w and h are 0 when unknown; fixed (> 0) then replaces the
// rule's worst case.
func openAIImageTokens(model, detail string, w, h int, fixed int64) int64 {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	m = strings.TrimPrefix(m, "ft:")
	var rule openAIImageRule
	for _, r := range openAIImageRules {
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

// anthropicImageTokens is Anthropic's published estimate (vision guide): width*height/750
// after the image is scaled to at most 1568 px on the long edge and about 1.15 megapixels.
func anthropicImageTokens(w, h int, fixed int64) int64 {
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
