package config

import "strings"

// Glob matches strings against a pattern where * matches any run of bytes and ? one byte. The
// empty pattern and "*" match everything. A Glob is immutable and safe for concurrent use.
type Glob struct {
	pattern string
	any     bool // matches everything
	literal bool // no wildcards: plain comparison
}

// NewGlob compiles a pattern.
func NewGlob(pattern string) Glob {
	return Glob{
		pattern: pattern,
		any:     pattern == "" || pattern == "*",
		literal: !strings.ContainsAny(pattern, "*?"),
	}
}

// String returns the pattern.
func (g Glob) String() string { return g.pattern }

// Any reports whether the glob matches everything.
func (g Glob) Any() bool { return g.any }

// Match reports whether s matches. It runs in O(len(pattern) x len(s)) at worst, without
// allocating.
func (g Glob) Match(s string) bool {
	if g.any {
		return true
	}
	if g.literal {
		return g.pattern == s
	}
	p := g.pattern
	// Iterative matcher with single-star backtracking: linear in practice, never exponential.
	pi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, si
			pi++
		case star >= 0:
			pi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
