package tiktoken

import (
	"math"
	"slices"
)

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

// countPiece returns the number of tokens piece encodes to (see mergeLong for limit).
func (v *vocab) countPiece(piece []byte, sc *scratch, limit int) (int, bool) {
	switch {
	case len(piece) == 1:
		return 1, false
	case len(piece) <= v.maxLen && v.rank(piece) != noRank:
		return 1, false
	case len(piece) <= smallPiece:
		return v.mergeSmall(piece), false
	}
	return v.mergeLong(piece, sc, limit)
}

// mergeLong cuts a long piece where no token can span (see cuttable) and merges the segments
// independently. Cuts are only tried next to multi-byte UTF-8 characters: in CJK and other
// non-Latin runs most character boundaries are cuttable, while in ASCII runs (one letter
// repeated, spaces) almost none are and trying would only cost time. A segment longer than
// limit (> 0) is merged in chunks of limit bytes, which bounds scratch memory but is no longer
// exact; chunked reports whether that happened.
func (v *vocab) mergeLong(piece []byte, sc *scratch, limit int) (total int, chunked bool) {
	start := 0
	for p := 1; p < len(piece); p++ {
		b := piece[p]
		if b&0xC0 == 0x80 || (b < 0x80 && piece[p-1] < 0x80) || !v.cuttable(piece, p) {
			continue // inside a character, between ASCII bytes, or not cuttable
		}
		n, c := v.mergeSegment(piece[start:p], sc, limit)
		total, chunked = total+n, chunked || c
		start = p
	}
	n, c := v.mergeSegment(piece[start:], sc, limit)
	return total + n, chunked || c
}

func (v *vocab) mergeSegment(seg []byte, sc *scratch, limit int) (int, bool) {
	switch {
	case len(seg) == 1:
		return 1, false
	case len(seg) <= v.maxLen && v.rank(seg) != noRank:
		return 1, false
	case len(seg) <= smallPiece:
		return v.mergeSmall(seg), false
	case len(seg) < hugePiece:
		return v.mergeHeap(seg, sc), false
	}
	if n, ok := v.countUniform(seg, sc); ok {
		return n, false
	}
	if limit <= 0 || len(seg) <= limit {
		return v.mergeHuge(seg, sc), false
	}
	total := 0
	for len(seg) > 0 {
		n := min(len(seg), limit)
		for k := n; n < len(seg) && k > n-4 && k > 0; k-- {
			if seg[k]&0xC0 != 0x80 { // cut before a character, not inside one
				n = k
				break
			}
		}
		c, _ := v.mergeSegment(seg[:n], sc, limit)
		total += c
		seg = seg[n:]
	}
	return total, true
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

// scratch is the reusable working memory of mergeHeap (pooled by the Encoding).
type scratch struct {
	next, prev []int32
	rank       []uint32
	heap       []uint64
	nodes      []node
	buckets    buckets
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

// hugePiece is the length from which mergeHuge replaces mergeHeap: a binary heap of a million
// entries misses the cache on every level of every sift.
const hugePiece = 2048

// node is one byte position of a huge piece: the linked list of parts and the rank of the pair
// starting here, kept together so that one cache line serves a merge.
type node struct {
	next, prev int32
	rank       uint32
}

// entry is a queued (position, next entry of the same rank).
type entry struct {
	pos, next int32
}

// buckets is a priority queue of (rank, position) for mergeHuge: one FIFO list of positions per
// rank, plus a small binary heap of the ranks whose list is not empty. A run of one character
// has a handful of distinct ranks, so almost every operation is a sequential list append or
// pop. Lists are kept in position order (the tie-break) by sorting one lazily in the rare case
// a position arrives out of order. Per-rank arrays are sized to the vocabulary and reset in O(1)
// by a generation stamp.
type buckets struct {
	gen   uint32
	lists []list // per rank, valid when stamp == gen
	ents  []entry
	ranks []uint64
	tmp   []int32

	init     []uint64 // initial pairs, sorted by rank<<32 | position
	next     int      // next entry of init to pop
	distinct []uint32
}

type list struct {
	stamp      uint32
	head, tail int32 // -1 when empty
	count      int32 // fill's counting sort
	unsorted   bool
}

func (q *buckets) reset(vocabSize, n int) {
	if len(q.lists) < vocabSize {
		q.lists = make([]list, vocabSize)
		q.gen = 0
	}
	q.gen++
	if q.gen == 0 {
		clear(q.lists)
		q.gen = 1
	}
	// Two entries per merge at most, and at most n-1 merges.
	if cap(q.ents) < 2*n {
		q.ents = make([]entry, 0, 2*n)
	}
	q.ents = q.ents[:0]
	q.ranks = q.ranks[:0]
}

func (q *buckets) add(r uint32, pos int32) {
	l := &q.lists[r]
	if l.stamp != q.gen {
		*l = list{stamp: q.gen, head: -1, tail: -1}
	}
	e := int32(len(q.ents))
	q.ents = append(q.ents, entry{pos: pos, next: -1})
	if l.tail >= 0 {
		q.ents[l.tail].next = e
		if q.ents[l.tail].pos > pos {
			l.unsorted = true
		}
	} else {
		l.head = e
		q.ranks = push(q.ranks, uint64(r))
	}
	l.tail = e
}

// pop removes the entry with the lowest (rank, position): the head of the initial stream or of
// the lowest non-empty list, whichever is lower.
func (q *buckets) pop() (uint32, int32, bool) {
	dyn := uint64(math.MaxUint64)
	var l *list
	if len(q.ranks) > 0 {
		r := uint32(q.ranks[0])
		l = &q.lists[r]
		if l.unsorted {
			q.sort(l)
		}
		dyn = uint64(r)<<32 | uint64(q.ents[l.head].pos)
	}
	if q.next < len(q.init) && q.init[q.next] < dyn {
		k := q.init[q.next]
		q.next++
		return uint32(k >> 32), int32(uint32(k)), true
	}
	if l == nil {
		return 0, 0, false
	}
	e := q.ents[l.head]
	l.head = e.next
	if l.head < 0 {
		l.tail = -1
		last := len(q.ranks) - 1
		q.ranks[0] = q.ranks[last]
		q.ranks = q.ranks[:last]
		siftDown(q.ranks, 0)
	}
	return uint32(dyn >> 32), e.pos, true
}

// fill sets the initial pairs as one stream sorted by (rank, position), by counting sort over
// the distinct ranks present (few: they are two-byte tokens), so that the first and largest
// wave of pops reads memory sequentially and costs no list appends.
func (q *buckets) fill(nodes []node) {
	q.distinct = q.distinct[:0]
	for k := range nodes {
		r := nodes[k].rank
		if r == noRank {
			continue
		}
		l := &q.lists[r]
		if l.stamp != q.gen {
			*l = list{stamp: q.gen, head: -1, tail: -1}
			q.distinct = append(q.distinct, r)
		}
		l.count++
	}
	slices.Sort(q.distinct)
	off := int32(0)
	for _, r := range q.distinct {
		l := &q.lists[r]
		l.count, off = off, off+l.count
	}
	q.init = grow(q.init, int(off))
	for k := range nodes {
		if r := nodes[k].rank; r != noRank {
			l := &q.lists[r]
			q.init[l.count] = uint64(r)<<32 | uint64(k)
			l.count++
		}
	}
	q.next = 0
}

func (q *buckets) sort(l *list) {
	q.tmp = q.tmp[:0]
	for e := l.head; e >= 0; e = q.ents[e].next {
		q.tmp = append(q.tmp, q.ents[e].pos)
	}
	slices.Sort(q.tmp)
	i := 0
	for e := l.head; e >= 0; e = q.ents[e].next {
		q.ents[e].pos = q.tmp[i]
		i++
	}
	l.unsorted = false
}

// mergeHuge is mergeHeap with the buckets queue and the node layout.
func (v *vocab) mergeHuge(piece []byte, sc *scratch) int {
	n := len(piece)
	if cap(sc.nodes) < n+1 {
		sc.nodes = make([]node, n+1)
	}
	nodes := sc.nodes[:n+1]
	q := &sc.buckets
	q.reset(len(v.off)-1, n)
	for k := 0; k+1 < n; k++ {
		r := v.pair[uint16(piece[k])<<8|uint16(piece[k+1])]
		nodes[k] = node{next: int32(k + 1), prev: int32(k - 1), rank: r}
	}
	nodes[n-1] = node{next: int32(n), prev: int32(n - 2), rank: noRank}
	nodes[n] = node{next: int32(n + 1), prev: int32(n - 1), rank: noRank}
	q.fill(nodes[:n-1])
	parts := n
	for {
		r, pos, ok := q.pop()
		if !ok {
			break
		}
		np := &nodes[pos]
		if np.rank != r {
			continue
		}
		nx := np.next
		nn := nodes[nx].next
		np.next = nn
		nodes[nn].prev = pos
		nodes[nx].rank = dead
		parts--
		if int(nn) < n {
			np.rank = v.rank(piece[pos:nodes[nn].next])
			// When the next part's own pair has the current rank r and ours a higher one,
			// that pair is merged first (it is in the queue and lower), and merging it
			// recomputes and queues ours. Queuing ours now would only leave a stale entry,
			// which in runs of one character is half of all entries.
			if np.rank != noRank && (nodes[nn].rank != r || np.rank < r) {
				q.add(np.rank, pos)
			}
		} else {
			np.rank = noRank
		}
		if pos > 0 {
			pv := np.prev
			pn := &nodes[pv]
			pn.rank = v.rank(piece[pv:nn])
			if pn.rank != noRank {
				q.add(pn.rank, pv)
			}
		}
	}
	return parts
}
