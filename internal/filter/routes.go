package filter

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
)

// routeCache keeps the parsed context_extensions of each route: Envoy sends the same map with
// every request of a route, so it is validated once, not per request. Safe for concurrent use.
type routeCache struct {
	mu      sync.RWMutex
	seed    maphash.Seed
	entries map[uint64]routeEntry
}

type routeEntry struct {
	ext   map[string]string // a copy, to confirm a hit
	route *config.Route
	err   error
}

// maxRoutes bounds the cache; past it, the cache starts over (routes are few; a flood of distinct
// maps only costs parsing).
const maxRoutes = 4096

func (c *routeCache) reset() {
	c.mu.Lock()
	c.entries = nil
	c.mu.Unlock()
}

// get returns the parsed route for ext under cfg.
func (c *routeCache) get(cfg *config.Config, ext map[string]string) (*config.Route, error) {
	c.mu.RLock()
	if c.entries == nil {
		c.mu.RUnlock()
		c.mu.Lock()
		if c.entries == nil {
			c.seed = maphash.MakeSeed()
			c.entries = map[uint64]routeEntry{}
		}
		c.mu.Unlock()
		c.mu.RLock()
	}
	h := c.hash(ext)
	e, ok := c.entries[h]
	c.mu.RUnlock()
	if ok && sameMap(e.ext, ext) {
		return e.route, e.err
	}
	// ext may point into a request's encoding: what the cache keeps is parsed from a copy.
	cp := make(map[string]string, len(ext))
	for k, v := range ext {
		cp[strings.Clone(k)] = strings.Clone(v)
	}
	rt, err := cfg.ParseRoute(cp)
	c.mu.Lock()
	if c.entries == nil || len(c.entries) >= maxRoutes {
		c.entries = map[uint64]routeEntry{}
	}
	c.entries[h] = routeEntry{ext: cp, route: rt, err: err}
	c.mu.Unlock()
	return rt, err
}

// hash is independent of map order: the sum of the hashes of the pairs.
func (c *routeCache) hash(ext map[string]string) uint64 {
	var sum uint64
	for k, v := range ext {
		var h maphash.Hash
		h.SetSeed(c.seed)
		h.WriteString(k)
		h.WriteByte(0)
		h.WriteString(v)
		sum += h.Sum64()
	}
	return sum
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
