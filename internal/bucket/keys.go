package bucket

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// maxPart is the longest escaped tag or name kept readable in a key; longer ones are hashed.
const maxPart = 64

// hashedLen is the length of a hashed part: '#' and 32 hex digits (128 bits of SHA-256).
const hashedLen = 1 + 32

// safeByte reports whether b stands for itself in a key. Everything else, notably '{', '}', '%',
// '#', spaces, control bytes and non-ASCII, is percent-escaped.
func safeByte(b byte) bool {
	switch {
	case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		return true
	}
	switch b {
	case '-', '_', '.', ':', '/', '@', '+', '=', '~', '!', '*', '(', ')', ',', ';', '$', '&', '\'':
		return true
	}
	return false
}

// partLen is the length of s once encoded by appendPart.
func partLen(s string) int {
	if s == "" {
		return 1
	}
	if n := escapedLen(s); n <= maxPart {
		return n
	}
	return hashedLen
}

// escapedLen is the length of s with every unsafe byte percent-escaped.
func escapedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if !safeByte(s[i]) {
			n += 2
		}
	}
	return n
}

// appendPart appends an injective, brace-free encoding of s: s itself when every byte is safe,
// else with unsafe bytes as %XX; "%" for the empty string (Redis hashes a key with an empty hash
// tag "{}" whole, which would scatter a decision over slots); and '#' followed by 32 hex digits of
// SHA-256 when the escaped form would exceed maxPart bytes. The three forms cannot collide: an
// escaped form never holds '#', nor a '%' without two hex digits after it.
func appendPart(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, '%')
	}
	if escapedLen(s) > maxPart {
		sum := sha256.Sum256([]byte(s))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:16])
	}
	const digits = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safeByte(c) {
			dst = append(dst, c)
		} else {
			dst = append(dst, '%', digits[c>>4], digits[c&15])
		}
	}
	return dst
}

// keyLen is the length of the key of spec under prefix and tag.
func keyLen(prefix, tag string, s *Spec) int {
	return len(prefix) + 1 + partLen(tag) + 1 + 2 + partLen(s.Name)
}

// appendKey appends the key of bucket s: prefix "{" tag "}" code ":" name, where code is
// keyCode's letter, so that a bucket renamed to another algorithm never reads the other's state.
// The hash tag is the encoded tag, the only braces in the key.
func appendKey(dst []byte, prefix, tag string, s *Spec) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = appendPart(dst, tag)
	dst = append(dst, '}', keyCode(s), ':')
	return appendPart(dst, s.Name)
}

// keyCode names a bucket's algorithm and storage in its key: upper case for the buckets stored
// as a string of doubles (T token bucket, G token buckets sharing the key by slot, D daily quota,
// M monthly quota), lower case for a hash (s, sliding window) or a sorted set (c, concurrency).
// Builds before the strings kept token buckets and quotas as hashes under t, d and m: their keys
// are never read and expire on their own, and a replica of such a build never meets a string
// where it expects a hash.
func keyCode(s *Spec) byte {
	if s.Slot > 0 {
		return 'G'
	}
	switch c := s.Code(); c {
	case CodeTokenBucket, CodeDaily, CodeMonthly:
		return c - 'a' + 'A'
	default:
		return c
	}
}

// cleanPrefix makes a configured key prefix brace-free, so that the tag is the key's hash tag.
func cleanPrefix(p string) string {
	return strings.NewReplacer("{", "%7B", "}", "%7D").Replace(p)
}

// HashTag is the hash tag of tag's buckets, braces included: a key holding it is kept on the
// same Redis Cluster slot as the buckets of tag.
func HashTag(tag string) string {
	b := append(make([]byte, 0, 2+partLen(tag)), '{')
	return string(append(appendPart(b, tag), '}'))
}
