package anthropic

import (
	"bytes"
	"hash/maphash"
	"math"
	"path"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Prompt caching (https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching): a block
// marked cache_control ends a cacheable prefix, built in the order tools, system, messages; the
// first request with a prefix writes it, a later one with the same prefix within its lifetime
// (5 minutes from its last use, or 1 hour with "ttl": "1h") reads it; a prefix shorter than the
// model's minimum is not cached; at most 4 breakpoints (a top-level cache_control, automatic
// caching, ends one at the last block). The room records each marked prefix as a CachePoint:
// a key hashing the model and the prefix's content (cache_control markers left out, so that a
// breakpoint that moves does not change what came before it), its estimated tokens and its
// lifetime. Whether the provider holds it is not the room's to know: internal/promptcache
// remembers the prefixes admitted requests sent.

// seed keys the prefix hashes of this process: they are compared only within it.
var seed = maphash.MakeSeed()

// Lifetimes of a cache entry after its last use.
const (
	cacheTTL     = 5 * time.Minute
	cacheTTLHour = time.Hour
)

// minCacheable is the shortest cacheable prefix of each model family in Anthropic's tokens
// ("Cache limitations" in the prompt-caching guide); a model not listed gets the largest.
var minCacheable = []struct {
	glob string
	min  int64
}{
	{"claude-opus-4-5*", 4096},
	{"claude-opus-4-6*", 4096},
	{"claude-haiku-4-5*", 4096},
	{"claude-sonnet-4-6*", 2048},
	{"claude-3-haiku*", 2048},
	{"claude-3-5-haiku*", 2048},
	{"claude-sonnet-4-5*", 1024},
	{"claude-sonnet-4-0*", 1024},
	{"claude-sonnet-4-2*", 1024}, // claude-sonnet-4-20250514
	{"claude-opus-4-1*", 1024},
	{"claude-opus-4-0*", 1024},
	{"claude-opus-4-2*", 1024}, // claude-opus-4-20250514
	{"claude-3-7-sonnet*", 1024},
	{"claude-3-5-sonnet*", 1024},
	{"claude-3-opus*", 1024},
}

const minCacheableUnknown = 4096

// minCacheableFor is model's minimum. The room compares it with the prefix's cl100k_base
// count before the model's factor: Anthropic's tokenizer gives at least as many tokens, so a
// prefix that passes is long enough to be cached.
func minCacheableFor(model string) int64 {
	for _, m := range minCacheable {
		if ok, _ := path.Match(m.glob, model); ok {
			return m.min
		}
	}
	return minCacheableUnknown
}

var cacheControl = []byte(`"cache_control"`)

// cachePrefix hashes a Messages body's prompt in cache order and records its breakpoints. Its
// zero value records nothing.
type cachePrefix struct {
	on  bool
	min int64
	h   maphash.Hash
}

// start turns cp on when the body marks a breakpoint and its texts are tokenized (a body
// priced at a bound by its length records none: its counts say nothing of a prefix).
func (cp *cachePrefix) start(s *pricing.Request, root int) {
	if !s.Tokenizes() || !bytes.Contains(s.Doc.Raw(root), cacheControl) {
		return
	}
	cp.on = true
	cp.min = minCacheableFor(s.Est.Model)
	cp.h.SetSeed(seed)
	_, _ = cp.h.WriteString(s.Est.Model)
	_ = cp.h.WriteByte(0)
}

// write adds value v's JSON text to the prefix.
func (cp *cachePrefix) write(d *pricing.Doc, v int) {
	if !cp.on || v < 0 {
		return
	}
	_, _ = cp.h.Write(d.Raw(v))
	_ = cp.h.WriteByte(0)
}

// block adds content block b to the prefix, without its cache_control member, and reports
// whether that member marks a breakpoint, with its lifetime.
func (cp *cachePrefix) block(d *pricing.Doc, b int) (marked bool, ttl time.Duration) {
	if !cp.on {
		return false, 0
	}
	if d.Kind(b) != pricing.Object {
		cp.write(d, b)
		return false, 0
	}
	d.Children(b, func(k, v int) bool {
		if d.KeyIs(k, "cache_control") {
			marked, ttl = cp.ttl(d, v)
			return true
		}
		_, _ = cp.h.Write(d.Raw(k))
		_, _ = cp.h.Write(d.Raw(v))
		return true
	})
	_ = cp.h.WriteByte(0)
	return marked, ttl
}

// tools adds the tool definitions t to the prefix and reports whether the last one marks a
// breakpoint. One on an earlier tool is not recorded: the count of the tools is made whole.
func (cp *cachePrefix) tools(d *pricing.Doc, t int) (marked bool, ttl time.Duration) {
	if !cp.on {
		return false, 0
	}
	end := d.End(t)
	d.Elems(t, func(v int) bool {
		m, l := cp.block(d, v)
		if d.End(v) == end {
			marked, ttl = m, l
		}
		return true
	})
	return marked, ttl
}

// mark reports whether object v has a cache_control member marking a breakpoint (a body's
// top-level one turns on automatic caching).
func (cp *cachePrefix) mark(d *pricing.Doc, v int) (bool, time.Duration) {
	if !cp.on {
		return false, 0
	}
	return cp.ttl(d, d.Get(v, "cache_control"))
}

// ttl reads a cache_control value: an object of type ephemeral marks a breakpoint, kept 5
// minutes, or an hour with "ttl": "1h".
func (cp *cachePrefix) ttl(d *pricing.Doc, v int) (bool, time.Duration) {
	if d.Kind(v) != pricing.Object || !d.TextIs(d.Get(v, "type"), "ephemeral") {
		return false, 0
	}
	if d.TextIs(d.Get(v, "ttl"), "1h") {
		return true, cacheTTLHour
	}
	return true, cacheTTL
}

// point records the prefix so far (text tokens before the factor f, images) as a CachePoint,
// when it is long enough to be cached and the request has fewer than four. The conversation
// wrapper (anthropicBase) is left to the uncached part: a read expected of the prefix must not
// price what follows it below the provider's count.
func (cp *cachePrefix) point(s *pricing.Request, text, images int64, f float64, ttl time.Duration) {
	if !cp.on || text < cp.min || s.Est.NCache >= pricing.MaxCachePoints {
		return
	}
	s.Est.CachePoints[s.Est.NCache] = pricing.CachePoint{
		Key:    cp.h.Sum64(),
		Tokens: int64(math.Floor(float64(text-anthropicBase)*f)) + images,
		TTL:    ttl,
	}
	s.Est.NCache++
}
