package promptcache

import (
	"sync"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/provider/pricing"
)

// Defaults of Options.
const (
	DefaultEntries = 1 << 16
	// DefaultWarmup: a provider makes a prefix readable once the response of the request that
	// wrote it begins ("a cache entry only becomes available after the first response begins",
	// https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching), so a prefix first
	// sent less than this long ago is expected to be written again.
	DefaultWarmup = 2 * time.Second
)

// Options configure a Memory.
type Options struct {
	// Entries bounds the prefixes remembered (about 40 bytes each). Default DefaultEntries.
	Entries int
	// Warmup is how long after its first sending a prefix is taken as readable. Default
	// DefaultWarmup; negative: at once.
	Warmup time.Duration
}

const shards = 64

// Memory is the replica's view of the provider's prompt caches. It is safe for concurrent use.
type Memory struct {
	warmup   int64
	perShard int
	shards   [shards]shard
}

type shard struct {
	mu sync.Mutex
	m  map[uint64]entry
}

// entry is one prefix: when it was first sent (this life of it), and until when the provider
// keeps it (its last sending plus its lifetime), in Unix nanoseconds.
type entry struct {
	first, until int64
}

// New returns an empty Memory.
func New(o Options) *Memory {
	if o.Entries <= 0 {
		o.Entries = DefaultEntries
	}
	switch {
	case o.Warmup == 0:
		o.Warmup = DefaultWarmup
	case o.Warmup < 0:
		o.Warmup = 0
	}
	m := &Memory{warmup: int64(o.Warmup), perShard: max(o.Entries/shards, 1)}
	for i := range m.shards {
		m.shards[i].m = make(map[uint64]entry)
	}
	return m
}

func (m *Memory) shard(key uint64) *shard { return &m.shards[key%shards] }

// Expect sets est.CacheRead to the tokens of the longest of est's prefixes the provider should
// hold at now (sent at least Warmup ago, and kept since), 0 when none.
func (m *Memory) Expect(est *pricing.Estimate, now time.Time) {
	est.CacheRead = 0
	t := now.UnixNano()
	for i := est.NCache - 1; i >= 0; i-- {
		p := &est.CachePoints[i]
		sh := m.shard(p.Key)
		sh.mu.Lock()
		e, ok := sh.m[p.Key]
		sh.mu.Unlock()
		if ok && t < e.until && t-e.first >= m.warmup {
			est.CacheRead = min(p.Tokens, est.PromptTokens)
			return
		}
	}
}

// Sent records that est's prefixes went to the provider at now: a prefix it no longer holds is
// written anew, one it holds has its lifetime renewed.
func (m *Memory) Sent(est *pricing.Estimate, now time.Time) {
	t := now.UnixNano()
	for i := range est.NCache {
		p := &est.CachePoints[i]
		sh := m.shard(p.Key)
		sh.mu.Lock()
		e, ok := sh.m[p.Key]
		if !ok || t >= e.until {
			if !ok && len(sh.m) >= m.perShard && !sh.sweep(t) {
				sh.mu.Unlock()
				continue // full of live prefixes: this one is expected to be written each time
			}
			e.first = t
		}
		e.until = max(e.until, t+int64(p.TTL))
		sh.m[p.Key] = e
		sh.mu.Unlock()
	}
}

// sweep drops the prefixes expired at t and reports whether room was made. Called with mu
// held, only when the shard is full.
func (sh *shard) sweep(t int64) bool {
	n := len(sh.m)
	for k, e := range sh.m {
		if t >= e.until {
			delete(sh.m, k)
		}
	}
	return len(sh.m) < n
}

// Len is the number of prefixes remembered, expired ones included until swept.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
