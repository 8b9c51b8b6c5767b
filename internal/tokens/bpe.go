package tokens

// Byte-pair merging, counting only. The result is the same as tiktoken's _byte_pair_merge: the
// piece starts as single bytes and, while any adjacent pair of parts concatenates to a token,
// the pair whose concatenation has the lowest rank is merged (the leftmost on a tie).
//
// Short pieces use tiktoken's own quadratic scan over a small array, which is fastest when
// n is small. Long pieces use a binary heap keyed by (rank, position) over a doubly linked list
// of parts, with lazy deletion of stale entries: O(n log n) time, O(n) scratch space, where the
// scan would be O(n²).

// smallPiece is the longest piece merged with the quadratic scan.
const smallPiece = 48

// countPiece returns the number of tokens piece encodes to.
func (v *vocab) countPiece(piece []byte, sc *scratch) int {
	switch {
	case len(piece) == 1:
		return 1
	case len(piece) <= v.maxLen && v.rank(piece) != noRank:
		return 1
	case len(piece) <= smallPiece:
		return v.mergeSmall(piece)
	}
	return v.mergeHeap(piece, sc)
}

// mergeSmall is tiktoken's scan: start[k] is where part k begins, rank[k] the rank of part k
// merged with part k+1.
func (v *vocab) mergeSmall(piece []byte) int {
	var start [smallPiece + 1]int32
	var rank [smallPiece]uint32
	n := len(piece)
	m := n // parts
	for k := 0; k < n; k++ {
		start[k] = int32(k)
	}
	start[n] = int32(n)
	for k := 0; k+1 < n; k++ {
		rank[k] = v.pair[uint16(piece[k])<<8|uint16(piece[k+1])]
	}
	rank[n-1] = noRank
	for m > 1 {
		best, bi := noRank, -1
		for k := 0; k+1 < m; k++ {
			if rank[k] < best {
				best, bi = rank[k], k
			}
		}
		if bi < 0 {
			break
		}
		// Merge part bi+1 into part bi.
		copy(start[bi+1:m], start[bi+2:m+1])
		copy(rank[bi+1:m-1], rank[bi+2:m])
		m--
		rank[m-1] = noRank
		if bi+1 < m {
			rank[bi] = v.rank(piece[start[bi]:start[bi+2]])
		} else {
			rank[bi] = noRank
		}
		if bi > 0 {
			rank[bi-1] = v.rank(piece[start[bi-1]:start[bi+1]])
		}
	}
	return m
}

// scratch is the reusable working memory of mergeHeap (pooled by the Encoder).
type scratch struct {
	next, prev []int32
	rank       []uint32
	heap       []uint64
}

// dead marks a position that is no longer the start of a part.
const dead = noRank - 1

func (v *vocab) mergeHeap(piece []byte, sc *scratch) int {
	n := len(piece)
	sc.next = grow(sc.next, n+1)
	sc.prev = grow(sc.prev, n+1)
	sc.rank = grow(sc.rank, n+1)
	next, prev, rank := sc.next[:n+1], sc.prev[:n+1], sc.rank[:n+1]
	h := sc.heap[:0]
	for k := 0; k <= n; k++ {
		next[k] = int32(k + 1)
		prev[k] = int32(k - 1)
	}
	for k := 0; k+1 < n; k++ {
		r := v.pair[uint16(piece[k])<<8|uint16(piece[k+1])]
		rank[k] = r
		if r != noRank {
			h = append(h, uint64(r)<<32|uint64(k))
		}
	}
	rank[n-1], rank[n] = noRank, noRank
	for k := len(h)/2 - 1; k >= 0; k-- {
		siftDown(h, k)
	}
	parts := n
	for len(h) > 0 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		siftDown(h, 0)
		r, pos := uint32(top>>32), int32(uint32(top))
		if rank[pos] != r {
			continue // stale: pos was merged away or its pair changed
		}
		// Merge the part at pos with the next one.
		nx := next[pos]
		nn := next[nx]
		next[pos] = nn
		prev[nn] = pos
		rank[nx] = dead
		parts--
		if int(nn) < n {
			rank[pos] = v.rank(piece[pos:next[nn]])
			if rank[pos] != noRank {
				h = push(h, uint64(rank[pos])<<32|uint64(pos))
			}
		} else {
			rank[pos] = noRank
		}
		if pos > 0 {
			pv := prev[pos]
			rank[pv] = v.rank(piece[pv:nn])
			if rank[pv] != noRank {
				h = push(h, uint64(rank[pv])<<32|uint64(pv))
			}
		}
	}
	sc.heap = h[:0]
	return parts
}

func grow[T any](s []T, n int) []T {
	if cap(s) >= n {
		return s[:n]
	}
	return make([]T, n, n+n/4)
}

func push(h []uint64, x uint64) []uint64 {
	h = append(h, x)
	k := len(h) - 1
	for k > 0 {
		p := (k - 1) / 2
		if h[p] <= x {
			break
		}
		h[k] = h[p]
		k = p
	}
	h[k] = x
	return h
}

func siftDown(h []uint64, k int) {
	n := len(h)
	if n == 0 {
		return
	}
	x := h[k]
	for {
		c := 2*k + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if x <= h[c] {
			break
		}
		h[k] = h[c]
		k = c
	}
	h[k] = x
}
