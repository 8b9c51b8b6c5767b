package tiktoken

import "bytes"

// uniform_table.go is measured by TestUniformRuns with -update; TestUniformTableGenerated
// checks that measuring again writes the same file.
//
//go:generate go test -run ^TestUniformRuns$ -update

// One byte repeated (spaces, newlines, a letter, "=====") is the slowest input of the
// merge: no position of the run can be cut, so it is merged whole, at O(n log n). Its count
// is also periodic: BPE builds c^n from the longest runs the vocabulary has (of 2^k bytes
// for most bytes: 128 spaces and 32 newlines in cl100k_base, 8 letters), so that beyond a
// short prefix, p more bytes add q more tokens:
//
//	count(c^(n+p)) = count(c^n) + q    for n >= base
//
// A segment of more than uniformMin bytes of one byte is therefore merged on a residue of
// less than base + 2p bytes, and the rest is added by the rule: a scan instead of a merge.
// The rules (uniform_table.go) are generated from exact counts of c^1 ... c^1024 for every
// byte of both encodings, each checked on longer runs (go test -run TestUniformRuns -update);
// TestUniformRuns compares every rule with the full merge on runs of 4 to 12 KiB, and the
// bytes of the usual hostile bodies on 1 MiB runs.
const uniformMin = 4096 // shorter runs are merged as before

// runRule is the periodic count of one byte's runs in one vocabulary; period 0: no rule.
type runRule struct{ period, add, base uint16 }

// countUniform counts seg if it is one byte repeated, more than uniformMin bytes, and that
// byte has a rule; ok is false otherwise.
func (v *vocab) countUniform(seg []byte, sc *scratch) (n int, ok bool) {
	if v.runs == nil || len(seg) <= uniformMin || !isRun(seg) {
		return 0, false
	}
	r := v.runs[seg[0]]
	if r.period == 0 {
		return 0, false
	}
	p, base := int(r.period), int(r.base)
	k := (len(seg)-base)/p - 1 // periods left out: the residue keeps base plus [p, 2p) bytes
	n, _ = v.mergeSegment(seg[:len(seg)-k*p], sc, 0)
	return n + k*int(r.add), true
}

// isRun reports whether every byte of b equals b[0], 64 bytes at a time.
func isRun(b []byte) bool {
	var w [64]byte
	for i := range w {
		w[i] = b[0]
	}
	for len(b) >= len(w) {
		if !bytes.Equal(b[:len(w)], w[:]) {
			return false
		}
		b = b[len(w):]
	}
	return bytes.Equal(b, w[:len(b)])
}
