package pricing

import (
	"hash/maphash"
	"math/bits"
	"sync/atomic"
)

// Cache remembers the token counts of the texts clients send again and again: chat clients
// resend the whole conversation on every turn, with the same system prompt and tool definitions
// on every request, so most of an 8 KB chat body was already counted by an earlier request. Only
// those parts are offered to the cache (see Request.Resent): the last message of a conversation
// is new on almost every request and is always counted, so a cache slot is never spent on it.
//
// It is a fixed table of atomic words, direct-mapped by a keyed hash of the text (maphash,
// seeded at random per process, so that nobody outside can aim two texts at one slot): no lock,
// no allocation, a miss costs one hash of the text before counting it. Each word holds the
// count, the two approximation flags counting may raise, and a 38-bit tag from the hash bits
// the index does not use, so a hit is a text whose 54+ hash bits all match. A false hit (about
// one in 2^54 lookups of distinct texts) returns another text's count: a price, never a crash.
// It is safe for concurrent use.
type Cache struct {
	seed  maphash.Seed
	mask  uint64
	slots []atomic.Uint64
}

// minCached is the shortest text worth caching: below it counting costs about what hashing
// and a cache miss do.
const minCached = 256

const (
	cacheCountBits = 24 // counts up to 16,777,215 tokens (a 4 MiB body has fewer)
	cacheChunked   = 1 << cacheCountBits
	cacheInvalid   = 1 << (cacheCountBits + 1)
	cacheTagShift  = cacheCountBits + 2
	cacheCountMask = cacheChunked - 1
)

// NewCache returns a cache of at least entries slots (rounded up to a power of two), or
// nil when entries <= 0.
func NewCache(entries int) *Cache {
	if entries <= 0 {
		return nil
	}
	n := uint64(1) << bits.Len64(uint64(entries-1))
	return &Cache{seed: maphash.MakeSeed(), mask: n - 1, slots: make([]atomic.Uint64, n)}
}

// key returns the slot index and the tagged word prefix of text counted in the named encoding.
// The name's hash keeps the encodings' counts of one text apart.
func (c *Cache) key(text []byte, encoding string) (idx uint64, tag uint64) {
	h := maphash.Bytes(c.seed, text) ^ maphash.String(c.seed, encoding)
	// The tag is the hash's top bits; bit 0 of the tag is forced on so that no stored word is
	// zero (the empty slot).
	return h & c.mask, (h>>cacheTagShift | 1) << cacheTagShift
}

// get returns the count and flags stored for text, if any.
func (c *Cache) get(idx, tag uint64) (n int, chunked, invalid, ok bool) {
	w := c.slots[idx].Load()
	if w&^(1<<cacheTagShift-1) != tag {
		return 0, false, false, false
	}
	return int(w & cacheCountMask), w&cacheChunked != 0, w&cacheInvalid != 0, true
}

// put stores a count (the newest text wins its slot). Counts too large to store are not kept.
func (c *Cache) put(idx, tag uint64, n int, chunked, invalid bool) {
	if n < 0 || n > cacheCountMask {
		return
	}
	w := tag | uint64(n)
	if chunked {
		w |= cacheChunked
	}
	if invalid {
		w |= cacheInvalid
	}
	c.slots[idx].Store(w)
}

// Store records n as the count of text in the named encoding, without flags (the newest text
// wins its slot). Counting stores what it counts; Store lets a test plant a count.
func (c *Cache) Store(text []byte, encoding string, n int) {
	idx, tag := c.key(text, encoding)
	c.put(idx, tag, n, false, false)
}

// Filled is the number of slots in use. It reads every slot: for tests and diagnostics, never
// the request path.
func (c *Cache) Filled() int {
	n := 0
	for i := range c.slots {
		if c.slots[i].Load() != 0 {
			n++
		}
	}
	return n
}
