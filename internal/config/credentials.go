package config

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// Credentials names the provider credentials that are the operator's own: only the answers to
// requests that carried one of them (or, with Injected, every answer) may correct a
// provider_feedback rule. A client's own key has its own budget at the provider; its 429s and
// rate-limit headers say nothing of ours.
type Credentials struct {
	// Injected: Envoy replaces the client's credential with the operator's on every priced route
	// (a route's request_headers_to_add, with append_action OVERWRITE_IF_EXISTS_OR_ADD), so every
	// answer is about the operator's budget.
	Injected bool `yaml:"injected"`
	// Salt is prepended to a credential before it is hashed. Required with SHA256; without it a
	// random salt is drawn at each load.
	Salt string `yaml:"salt"`
	// SHA256 lists the hex SHA-256 of Salt followed by each own credential:
	// printf '%s%s' "$SALT" "$OPENAI_API_KEY" | sha256sum
	SHA256 []string `yaml:"sha256"`
	// Files lists files that each hold one own credential (a mounted secret): read and hashed at
	// load, the credential itself never kept. Surrounding white space is ignored.
	Files []string `yaml:"files"`
}

// OwnCredentials recognises the operator's credentials by salted hash. The zero value knows
// none. It is immutable and safe for concurrent use.
type OwnCredentials struct {
	injected bool
	salt     []byte
	sums     [][sha256.Size]byte
}

// Configured reports whether any credential (or Injected) is configured.
func (o *OwnCredentials) Configured() bool { return o.injected || len(o.sums) > 0 }

// Injected reports whether Envoy injects the operator's credential on every route.
func (o *OwnCredentials) Injected() bool { return o.injected }

// Own reports whether cred, a credential as the request carried it (the value of x-api-key or
// api-key, or of authorization without its "Bearer " prefix), is one of the operator's.
// cred is hashed on the stack and not kept.
func (o *OwnCredentials) Own(cred string) bool {
	if cred == "" || len(o.sums) == 0 {
		return false
	}
	var buf [512]byte
	var sum [sha256.Size]byte
	if n := len(o.salt) + len(cred); n <= len(buf) {
		copy(buf[copy(buf[:], o.salt):], cred)
		sum = sha256.Sum256(buf[:n])
		clear(buf[:n])
	} else {
		h := sha256.New()
		h.Write(o.salt)
		h.Write([]byte(cred))
		h.Sum(sum[:0])
	}
	own := 0
	for i := range o.sums {
		own |= subtle.ConstantTimeCompare(sum[:], o.sums[i][:])
	}
	return own == 1
}

// BearerToken is the credential of an authorization header value: without its "Bearer " prefix
// (any case), else the value itself.
func BearerToken(v string) string {
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return v
}

// compileCredentials validates c; bad reports a problem under key.
func compileCredentials(c *Credentials, bad func(key, format string, args ...any)) *OwnCredentials {
	o := &OwnCredentials{injected: c.Injected, salt: []byte(c.Salt)}
	if len(c.SHA256) > 0 && c.Salt == "" {
		bad("credentials.salt", "required with credentials.sha256: the hashes are of the salt followed by the credential")
	}
	if c.Salt == "" && len(c.Files) > 0 {
		o.salt = make([]byte, 16)
		if _, err := rand.Read(o.salt); err != nil {
			bad("credentials.salt", "no random salt: %v", err)
		}
	}
	for i, s := range c.SHA256 {
		b, err := hex.DecodeString(strings.TrimSpace(s))
		if err != nil || len(b) != sha256.Size {
			bad(fmt.Sprintf("credentials.sha256[%d]", i), "is not the 64 hex digits of a SHA-256")
			continue
		}
		o.sums = append(o.sums, [sha256.Size]byte(b))
	}
	for i, path := range c.Files {
		data, err := os.ReadFile(path)
		if err != nil {
			// The error names the path, never the content.
			bad(fmt.Sprintf("credentials.files[%d]", i), "%v", err)
			continue
		}
		cred := bytes.TrimSpace(data)
		if len(cred) == 0 {
			bad(fmt.Sprintf("credentials.files[%d]", i), "%q is empty", path)
			continue
		}
		h := sha256.New()
		h.Write(o.salt)
		h.Write(cred)
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		o.sums = append(o.sums, sum)
		clear(data)
	}
	return o
}
