package tiktoken

import (
	"encoding/binary"
	"sync/atomic"
)

// pieceCache remembers the token counts of the pieces of 2 to 16 bytes that neither the word
// loop nor the in-place lookup of a short piece counted as one token. Most are not one token (a
// capitalised word that is two tokens, a rare word, a number): merging one costs a dozen lookups of its parts, each through the filters, the hash table and
// the arena, most of them cache misses in a busy service (a microsecond a piece), where a hit
// here costs one line. The same such pieces come back request after request.
//
// It is exact: an entry holds the whole piece (its bytes in two words and its length), and
// pieces are never told apart by a hash. Each entry is a sequence lock of atomic words: a
// writer takes it with a compare-and-swap (another writer's entry is left alone: the piece is
// simply not cached this time), a reader retries nothing and takes an entry only when its
// sequence was even and unchanged around the reads. No allocation, no lock held while
// counting. Safe for concurrent use.
type pieceCache struct {
	entries [pieceEntries]pieceEntry
}

// pieceEntries: 2,048 entries of 32 bytes (64 KiB) per encoding, indexed by pieceBits of a
// hash.
const (
	pieceBits    = 11
	pieceEntries = 1 << pieceBits
)

// maxCachedPiece is the longest piece the cache holds: its key is two words.
const maxCachedPiece = 16

type pieceEntry struct {
	seq    atomic.Uint64 // odd while a writer fills the entry
	lo, hi atomic.Uint64 // the piece's bytes 0-7 and 8-15, little-endian, zero-padded
	val    atomic.Uint64 // the piece's length << 32 | its token count; 0: empty
}

// pieceKey returns the key of piece (2 to 16 bytes) and its entry's index.
func pieceKey(piece []byte) (lo, hi, idx uint64) {
	switch {
	case len(piece) == 16:
		lo, hi = binary.LittleEndian.Uint64(piece), binary.LittleEndian.Uint64(piece[8:])
	case len(piece) >= 8:
		lo, hi = binary.LittleEndian.Uint64(piece), loadTail(piece[8:])
	default:
		lo = loadTail(piece)
	}
	return lo, hi, longHash(lo, hi^uint64(len(piece))<<59) >> (64 - pieceBits)
}

// get returns the count of piece, if the cache holds it.
func (c *pieceCache) get(piece []byte) (int, bool) {
	lo, hi, idx := pieceKey(piece)
	e := &c.entries[idx]
	s := e.seq.Load()
	if s&1 != 0 {
		return 0, false
	}
	l, h, v := e.lo.Load(), e.hi.Load(), e.val.Load()
	if e.seq.Load() != s || l != lo || h != hi || v>>32 != uint64(len(piece)) {
		return 0, false
	}
	return int(uint32(v)), true
}

// put stores the count of piece, unless another writer holds its entry.
func (c *pieceCache) put(piece []byte, count int) {
	lo, hi, idx := pieceKey(piece)
	e := &c.entries[idx]
	s := e.seq.Load()
	if s&1 != 0 || !e.seq.CompareAndSwap(s, s+1) {
		return
	}
	e.lo.Store(lo)
	e.hi.Store(hi)
	e.val.Store(uint64(len(piece))<<32 | uint64(uint32(count)))
	e.seq.Store(s + 2)
}
