package tokens

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math/bits"
	"strconv"
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
	slots  []uint64 // hash tag<<32 | rank+1; 0 is empty
	mask   uint64
	maxLen int             // longest token in bytes
	pair   [1 << 16]uint32 // rank of each two-byte token, or noRank
	single [256]uint32     // rank of each single byte (all 256 are tokens)
	size   int             // number of tokens
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
			return nil, fmt.Errorf("tokens: vocabulary line %d: no rank", len(entries)+1)
		}
		start := len(arena)
		var err error
		arena, err = base64.StdEncoding.AppendDecode(arena, line[:sp])
		if err != nil {
			return nil, fmt.Errorf("tokens: vocabulary line %d: %w", len(entries)+1, err)
		}
		if len(arena) == start {
			return nil, fmt.Errorf("tokens: vocabulary line %d: empty token", len(entries)+1)
		}
		r, err := strconv.ParseUint(string(line[sp+1:]), 10, 24)
		if err != nil {
			return nil, fmt.Errorf("tokens: vocabulary line %d: %w", len(entries)+1, err)
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
			return nil, fmt.Errorf("tokens: vocabulary: rank %d appears twice", e.rank)
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
	v.slots = make([]uint64, nslots)
	v.mask = uint64(nslots - 1)
	for r, tok := range byRank {
		if tok == nil {
			continue
		}
		h := hashBytes(tok)
		for s := h & v.mask; ; s = (s + 1) & v.mask {
			if v.slots[s] == 0 {
				v.slots[s] = h>>32<<32 | uint64(r+1)
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
	for b, r := range v.single {
		if r == noRank {
			return nil, fmt.Errorf("tokens: vocabulary: byte %#x is not a token", b)
		}
	}
	return v, nil
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
	h := hashBytes(b)
	tag := h >> 32
	for s := h & v.mask; ; s = (s + 1) & v.mask {
		e := v.slots[s]
		if e == 0 {
			return noRank
		}
		if e>>32 == tag {
			r := uint32(e) - 1
			if string(v.arena[v.off[r]:v.off[r+1]]) == string(b) {
				return r
			}
		}
	}
}

// hashBytes is a fast non-cryptographic hash (wyhash-style multiply-mix of 8-byte words).
// The table it feeds is fixed, so its quality only affects speed, never correctness.
func hashBytes(b []byte) uint64 {
	const m1, m2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9
	h := uint64(len(b)) * m1
	for len(b) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(b)) * m2
		h ^= h >> 31
		b = b[8:]
	}
	var tail uint64
	switch len(b) {
	case 7:
		tail = uint64(b[6])<<48 | uint64(b[5])<<40 | uint64(b[4])<<32 | uint64(binary.LittleEndian.Uint32(b))
	case 6:
		tail = uint64(b[5])<<40 | uint64(b[4])<<32 | uint64(binary.LittleEndian.Uint32(b))
	case 5:
		tail = uint64(b[4])<<32 | uint64(binary.LittleEndian.Uint32(b))
	case 4:
		tail = uint64(binary.LittleEndian.Uint32(b))
	case 3:
		tail = uint64(b[2])<<16 | uint64(binary.LittleEndian.Uint16(b))
	case 2:
		tail = uint64(binary.LittleEndian.Uint16(b))
	case 1:
		tail = uint64(b[0])
	}
	h = (h ^ tail ^ 0xFF) * m1
	h ^= h >> 29
	h *= m2
	h ^= h >> 32
	return h
}
