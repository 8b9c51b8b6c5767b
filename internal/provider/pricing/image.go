package pricing

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
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
