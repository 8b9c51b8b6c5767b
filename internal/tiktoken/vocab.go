package tiktoken

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime"
	"strconv"
	"unsafe"
)

// noRank marks "not a token" in rank tables.
const noRank = ^uint32(0)

// vocab is one encoding's mergeable ranks: token bytes to rank (the token id), in an
// open-addressing hash table over one byte arena. It is immutable once built and safe for
// concurrent use. Lookups of non-tokens cost at most the longest probe sequence of the table,
// which is fixed when the table is built, so hostile input cannot slow them down.
type vocab struct {
	arena  []byte   // token bytes, concatenated in rank order
	off    []uint32 // token r is arena[off[r]:off[r+1]] (empty for unused ranks)
	slots  []slot   // from hugeBytes, unmapped when the vocab is collected
	mask   uint64
	shift  uint8           // a hash's slot is its top bits: hash >> shift
	maxLen int             // longest token in bytes
	pair   [1 << 16]uint32 // rank of each two-byte token, or noRank
	single [256]uint32     // rank of each single byte (all 256 are tokens)
	// Bitsets for cuttable, small enough to stay in cache: which 2-byte strings are tokens,
	// which 3-byte strings may be tokens, which 4-byte strings may occur inside a token.
	pairBits [1 << 16 / 64]uint64
	triBits  []uint64
	quadBits []uint64
	size     int           // number of tokens
	runs     *[256]runRule // counts of one byte repeated (uniform.go); nil: none
	mapped   int           // bytes of slots and longs mapped outside the Go heap (hugeBytes)
	// longs holds the tokens of 9 to 15 bytes again, each whole in its entry, so that a word
	// of that length is found in one cache line (words): from longHash(...) >> lshift, linear
	// probing without wrap-around (the table ends in room for the longest run).
	longs  []longSlot
	lshift uint8
	o200k  bool      // its words are o200k_base's: a capital may start one (setWords)
	table  wordTable // what wordsSSE reads (setWords)
}

// slot is one hash table entry: the token's first 8 bytes packed little-endian (so most
// lookups compare one word and never touch the arena), its length and its rank.
type slot struct {
	head uint64
	rank uint32 // rank+1; 0 is empty
	n    uint32 // token length
}

// longSlot is an entry of vocab.longs: a token of 9 to 15 bytes, its first 8 bytes in head
// and the rest in rest (bytes 8 to n-1 packed little-endian, and n in the top byte, so that
// rest is never 0 but in an empty entry).
type longSlot struct {
	head, rest uint64
}

// parseVocab reads a .tiktoken file: one "base64(token) rank" per line.
func parseVocab(data []byte) (*vocab, error) {
	type entry struct {
		tok  []byte
		rank uint32
	}
	var entries []entry
	arena := make([]byte, 0, len(data)/2)
	maxRank := uint32(0)
	for line := range bytes.Lines(data) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("tiktoken: vocabulary line %d: no rank", len(entries)+1)
		}
		start := len(arena)
		var err error
		arena, err = base64.StdEncoding.AppendDecode(arena, line[:sp])
		if err != nil {
			return nil, fmt.Errorf("tiktoken: vocabulary line %d: %w", len(entries)+1, err)
		}
		if len(arena) == start {
			return nil, fmt.Errorf("tiktoken: vocabulary line %d: empty token", len(entries)+1)
		}
		r, err := strconv.ParseUint(string(line[sp+1:]), 10, 24)
		if err != nil {
			return nil, fmt.Errorf("tiktoken: vocabulary line %d: %w", len(entries)+1, err)
		}
		entries = append(entries, entry{arena[start:len(arena):len(arena)], uint32(r)})
		maxRank = max(maxRank, uint32(r))
	}
	v := &vocab{size: len(entries)}
	for i := range v.pair {
		v.pair[i] = noRank
	}
	for i := range v.single {
		v.single[i] = noRank
	}
	// Lay the arena out by rank so that off[] can find a token from its rank.
	byRank := make([][]byte, maxRank+1)
	for _, e := range entries {
		if byRank[e.rank] != nil {
			return nil, fmt.Errorf("tiktoken: vocabulary: rank %d appears twice", e.rank)
		}
		byRank[e.rank] = e.tok
	}
	v.off = make([]uint32, len(byRank)+1)
	v.arena = make([]byte, 0, len(arena))
	for r, tok := range byRank {
		v.off[r] = uint32(len(v.arena))
		v.arena = append(v.arena, tok...)
		v.maxLen = max(v.maxLen, len(tok))
	}
	v.off[len(byRank)] = uint32(len(v.arena))

	nslots := 1 << bits.Len(uint(2*len(entries)))
	mem, free := hugeBytes(nslots * int(unsafe.Sizeof(slot{})))
	if free != nil {
		v.mapped = len(mem)
		runtime.AddCleanup(v, func(free func()) { free() }, free)
	}
	v.slots = slotsOf(mem)
	v.mask = uint64(nslots - 1)
	v.shift = uint8(64 - bits.TrailingZeros(uint(nslots)))
	for r, tok := range byRank {
		if tok == nil {
			continue
		}
		head, h := keyOf(tok)
		for s := h >> v.shift; ; s = (s + 1) & v.mask {
			if v.slots[s].rank == 0 {
				v.slots[s] = slot{head: head, rank: uint32(r + 1), n: uint32(len(tok))}
				break
			}
		}
		switch len(tok) {
		case 1:
			v.single[tok[0]] = uint32(r)
		case 2:
			v.pair[binary.BigEndian.Uint16(tok)] = uint32(r)
		}
	}
	if err := v.buildLongs(byRank); err != nil {
		return nil, err
	}
	v.triBits = make([]uint64, 1<<triLog/64)
	v.quadBits = make([]uint64, 1<<quadLog/64)
	for _, tok := range byRank {
		switch len(tok) {
		case 2:
			k := binary.BigEndian.Uint16(tok)
			v.pairBits[k/64] |= 1 << (k % 64)
		case 3:
			setBit(v.triBits, gramHash(uint32(tok[0])|uint32(tok[1])<<8|uint32(tok[2])<<16, triLog))
		}
		for i := 0; i+4 <= len(tok); i++ {
			setBit(v.quadBits, gramHash(binary.LittleEndian.Uint32(tok[i:]), quadLog))
		}
	}
	for b, r := range v.single {
		if r == noRank {
			return nil, fmt.Errorf("tiktoken: vocabulary: byte %#x is not a token", b)
		}
	}
	return v, nil
}

// longRoom is the number of entries vocab.longs has past its last home slot, for the runs
// that start near its end.
const longRoom = 64

// buildLongs fills v.longs with the tokens of 9 to 15 bytes of byRank, at a load of at most
// a half.
func (v *vocab) buildLongs(byRank [][]byte) error {
	n := 0
	for _, tok := range byRank {
		if len(tok) >= 9 && len(tok) <= 15 {
			n++
		}
	}
	nslots := 1 << bits.Len(uint(2*n))
	mem, free := hugeBytes((nslots + longRoom) * int(unsafe.Sizeof(longSlot{})))
	if free != nil {
		v.mapped += len(mem)
		runtime.AddCleanup(v, func(free func()) { free() }, free)
	}
	v.longs = longSlotsOf(mem)
	v.lshift = uint8(64 - bits.TrailingZeros(uint(nslots)))
	for _, tok := range byRank {
		if len(tok) < 9 || len(tok) > 15 {
			continue
		}
		head, rest := longKey(tok)
		s := longHash(head, rest) >> v.lshift
		for v.longs[s].rest != 0 {
			if s++; s == uint64(len(v.longs)) {
				return fmt.Errorf("tiktoken: vocabulary: the table of long tokens overflows its %d spare entries", longRoom)
			}
		}
		v.longs[s] = longSlot{head, rest}
	}
	return nil
}

// longKey returns the key of a token or word of 9 to 15 bytes: its first 8 bytes, and the
// rest with the length.
func longKey(b []byte) (head, rest uint64) {
	return binary.LittleEndian.Uint64(b), loadTail(b[8:]) | uint64(len(b))<<56
}

// longHash is the hash of a long key: its top bits depend on every bit of both words.
func longHash(head, rest uint64) uint64 {
	return (rest*hashM1 ^ head) * hashM2
}

// isLong reports whether the word of 9 to 15 bytes whose key is head, rest is a token.
func (v *vocab) isLong(head, rest uint64) bool {
	for s := longHash(head, rest) >> v.lshift; ; s++ {
		e := &v.longs[s]
		if e.head == head && e.rest == rest {
			return true
		}
		if e.rest == 0 {
			return false
		}
	}
}

// rank returns the rank of token b, or noRank.
func (v *vocab) rank(b []byte) uint32 {
	switch len(b) {
	case 0:
		return noRank
	case 1:
		return v.single[b[0]]
	case 2:
		return v.pair[uint16(b[0])<<8|uint16(b[1])]
	}
	if len(b) > v.maxLen {
		return noRank
	}
	// Most failed lookups stop here, in cache-resident filters, instead of probing the table:
	// every 3-byte token is in triBits, and every longer token's first 4 bytes are in quadBits.
	if len(b) == 3 {
		if !hasBit(v.triBits, gramHash(tri(b), triLog)) {
			return noRank
		}
	} else if !hasBit(v.quadBits, gramHash(binary.LittleEndian.Uint32(b), quadLog)) {
		return noRank
	}
	head, h := keyOf(b)
	for s := h >> v.shift; ; s = (s + 1) & v.mask {
		e := &v.slots[s]
		if e.rank == 0 {
			return noRank
		}
		if e.head == head && int(e.n) == len(b) {
			r := e.rank - 1
			if len(b) <= 8 || string(v.arena[v.off[r]+8:v.off[r+1]]) == string(b[8:]) {
				return r
			}
		}
	}
}

// shortHead reports whether the n bytes (1 <= n <= 8) packed little-endian in head are one
// token. It is rank without its length switch, filters and copy.
func (v *vocab) shortHead(head uint64, n int) bool {
	switch n {
	case 1:
		return true
	case 2:
		return v.pair[uint16(head)<<8|uint16(head>>8)&0xFF] != noRank
	}
	return v.probe(head, n)
}

// probe is shortHead's lookup in the hash table, which holds every token, those of 1 and 2
// bytes included: rank's probe without the tail comparison, written out (as a shared function
// call it cost 7% more instructions per Count, scripts/count-cost.sh).
func (v *vocab) probe(head uint64, n int) bool {
	for s := shortHash(head) >> v.shift; ; s = (s + 1) & v.mask {
		e := &v.slots[s]
		if e.head == head && int(e.n) == n { // an empty slot has n 0
			return true
		}
		if e.rank == 0 {
			return false
		}
	}
}

// The multipliers of keyOf's hashes (words_amd64.s repeats them): hashM1 and hashM2 mix the
// words of a token longer than 8 bytes, and a short token's hash is its head times hashM2.
const hashM1, hashM2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9

// shortHash is keyOf's hash of a token of at most 8 bytes whose key is head: one multiply,
// whose top bits (the slot) depend on every bit of head. Tokens whose heads are equal differ in
// length only (trailing zero bytes), share a probe sequence, and are told apart by the slot's
// length. It costs two instructions on the path of every word (vocab.words), against about
// ten for fmix; the longest probe run is shorter than with fmix (TestProbeBound: 23 slots of
// 524,288 in o200k_base, 34 before).
func shortHash(head uint64) uint64 {
	return head * hashM2
}

// keyOf returns the first 8 bytes of b packed little-endian (zero-padded) and b's hash.
func keyOf(b []byte) (head, hash uint64) {
	if len(b) >= 8 {
		head = binary.LittleEndian.Uint64(b)
		if len(b) > 8 {
			// Constant time: the first 16 and the last 8 bytes and the length. Longer
			// tokens sharing all of those only probe a little further.
			var mid uint64
			if len(b) >= 16 {
				mid = binary.LittleEndian.Uint64(b[8:])
			} else {
				mid = loadTail(b[8:])
			}
			tail := binary.LittleEndian.Uint64(b[len(b)-8:])
			h := (head ^ hashM1) * hashM2
			h = (h ^ h>>31 ^ mid) * hashM1
			return head, fmix(h ^ h>>29 ^ tail ^ uint64(len(b))<<56)
		}
	} else {
		head = loadTail(b)
	}
	return head, shortHash(head)
}

// fmix is MurmurHash3's 64-bit finaliser: every input bit affects every output bit, so the
// slots of long tokens are well spread.
func fmix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// loadTail packs len(b) < 8 bytes little-endian.
func loadTail(b []byte) uint64 {
	switch len(b) {
	case 7:
		return uint64(b[6])<<48 | uint64(b[5])<<40 | uint64(b[4])<<32 | uint64(binary.LittleEndian.Uint32(b))
	case 6:
		return uint64(b[5])<<40 | uint64(b[4])<<32 | uint64(binary.LittleEndian.Uint32(b))
	case 5:
		return uint64(b[4])<<32 | uint64(binary.LittleEndian.Uint32(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	case 3:
		return uint64(b[2])<<16 | uint64(binary.LittleEndian.Uint16(b))
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 1:
		return uint64(b[0])
	}
	return 0
}

// Sizes (log2 bits) of the one-hash Bloom filters for cuttable: 64 KiB for ~18k 3-byte tokens
// and 256 KiB for ~100k distinct 4-grams (o200k_base). A false positive only makes cuttable
// miss a cut, never make a wrong one.
const (
	triLog  = 19
	quadLog = 21
)

func gramHash(g uint32, log uint) uint32 { return (g * 0x9E3779B1) >> (32 - log) }

func setBit(bits []uint64, h uint32) { bits[h/64] |= 1 << (h % 64) }

func hasBit(bits []uint64, h uint32) bool { return bits[h/64]&(1<<(h%64)) != 0 }

func tri(b []byte) uint32 { return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 }

// cuttable reports whether no token of the vocabulary occurs in piece across position p
// (0 < p < len(piece)). Then no part of the merge can ever span p: every part is a token, and
// the pair across p never has a rank because its concatenation would be such a token. So the
// piece merges as piece[:p] and piece[p:] independently, with the same result.
//
// A crossing token of 2 or 3 bytes is one of piece[p-1:p+1], piece[p-2:p+1], piece[p-1:p+2],
// looked up directly. A longer one contains one of the 4-byte windows starting at p-3, p-2 or
// p-1 (whichever fit inside it), so it is ruled out when none of those windows occurs in any
// token (the quads bitset).
func (v *vocab) cuttable(piece []byte, p int) bool {
	n := len(piece)
	if k := uint16(piece[p-1])<<8 | uint16(piece[p]); v.pairBits[k/64]&(1<<(k%64)) != 0 {
		return false
	}
	if p >= 2 && hasBit(v.triBits, gramHash(tri(piece[p-2:]), triLog)) {
		return false
	}
	if p+2 <= n && hasBit(v.triBits, gramHash(tri(piece[p-1:]), triLog)) {
		return false
	}
	for w := max(p-3, 0); w <= p-1; w++ {
		if w+4 <= n && hasBit(v.quadBits, gramHash(binary.LittleEndian.Uint32(piece[w:]), quadLog)) {
			return false
		}
	}
	return true
}
