package learn

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Learned is what admission reads for one key: the factor to price with (1 unless Learned), and
// the distribution's figures for metrics and the estimate command.
type Learned struct {
	Factor   float64
	Learned  bool
	Samples  float64
	Quantile float64 // the unclamped quantile (0 when empty)
}

// SharedOptions configures a Shared.
type SharedOptions struct {
	Policy Policy
	// MaxKeys bounds the keys a replica learns (and the metric series they make); a key past it
	// keeps the static estimate. Default 256.
	MaxKeys int
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Shared is one replica's view of the distributions every replica shares: admission reads the
// factor of a key from a snapshot (Factor: no lock, no store call), settlements add samples to a
// local delta (Observe), and Sync writes the delta and reads every known key back, once per
// interval (Run), off the request path. A store failure empties the snapshot: every key prices
// statically until a Sync succeeds. Safe for concurrent use.
type Shared struct {
	store Store
	pol   atomic.Pointer[Policy]
	max   int
	now   func() time.Time

	snap atomic.Pointer[map[Key]Learned]

	mu      sync.Mutex
	known   map[Key]struct{}
	pending map[Key]*Dist
}

// NewShared returns a Shared on store; opts.Policy must be valid.
func NewShared(store Store, opts SharedOptions) *Shared {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = 256
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Shared{store: store, max: opts.MaxKeys, now: opts.Now,
		known: make(map[Key]struct{}), pending: make(map[Key]*Dist)}
	s.SetPolicy(opts.Policy)
	empty := map[Key]Learned{}
	s.snap.Store(&empty)
	return s
}

// Policy is the policy s prices with.
func (s *Shared) Policy() Policy { return *s.pol.Load() }

// SetPolicy replaces the policy (a reloaded configuration's, valid); the next Sync prices with it.
func (s *Shared) SetPolicy(p Policy) { s.pol.Store(&p) }

// Factor is the learned figure of k as of the last Sync. A key never seen is remembered (up to
// MaxKeys) so that the next Sync reads it: the distribution another replica learned serves this
// one too. It allocates only the first time it meets a key.
func (s *Shared) Factor(k Key) Learned {
	if l, ok := (*s.snap.Load())[k]; ok {
		return l
	}
	s.remember(k)
	return Learned{Factor: 1}
}

// remember adds k to the known keys, within MaxKeys; it reports whether k is known.
func (s *Shared) remember(k Key) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.known[k]; ok {
		return true
	}
	if len(s.known) >= s.max {
		return false
	}
	s.known[Key{strings.Clone(k.Provider), strings.Clone(k.Model), strings.Clone(k.Reason)}] = struct{}{}
	return true
}

// Observe records one settlement: the provider reported actual input tokens for a prompt the
// limiter estimated at estimate (statically, before any learned factor). A report of 0 or a
// non-positive estimate says nothing and is ignored.
func (s *Shared) Observe(k Key, actual, estimate int64) {
	if actual <= 0 || estimate <= 0 || !s.remember(k) {
		return
	}
	now := s.now()
	s.mu.Lock()
	d := s.pending[k]
	if d == nil {
		k = Key{strings.Clone(k.Provider), strings.Clone(k.Model), strings.Clone(k.Reason)}
		d = &Dist{}
		s.pending[k] = d
	}
	r := float64(actual) / float64(estimate)
	pol := s.pol.Load()
	d.Add(r, now, pol.HalfLife)
	s.raise(k, r, pol)
	s.mu.Unlock()
}

// raise lifts the learned factor of k in the snapshot to ratio r (at its bin's upper edge, at
// most Max) when r is above it: a provider whose counts just rose (a changed tokenizer) is
// priced at once by the replica that saw it, not one refresh later; the next Sync prices at the
// distribution's quantile again. Only a learned factor is raised (the static estimate stands
// below the sample floor), and never lowered here. Called with s.mu held.
func (s *Shared) raise(k Key, r float64, pol *Policy) {
	snap := *s.snap.Load()
	cur, ok := snap[k]
	i, valid := Bin(r)
	if !ok || !cur.Learned || !valid {
		return
	}
	up := min(Upper(i), pol.Max)
	if up <= cur.Factor {
		return
	}
	next := maps.Clone(snap)
	cur.Factor = up
	next[k] = cur
	s.snap.Store(&next)
}

// Sync writes the samples observed since the last Sync and reads every known key back: two
// pipelines. On a failure the snapshot is emptied (static pricing) and the error returned;
// samples that could not be written are dropped.
func (s *Shared) Sync(ctx context.Context) error {
	s.mu.Lock()
	deltas := make([]Delta, 0, len(s.pending))
	for k, d := range s.pending {
		deltas = append(deltas, Delta{Key: k, Dist: *d})
	}
	clear(s.pending)
	keys := make([]Key, 0, len(s.known))
	for k := range s.known {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	pol := s.pol.Load()
	if err := s.store.Add(ctx, deltas, pol.HalfLife); err != nil {
		s.fallBack()
		return err
	}
	dists, err := s.store.Load(ctx, keys)
	if err != nil {
		s.fallBack()
		return err
	}
	now := s.now()
	next := make(map[Key]Learned, len(keys))
	for i, k := range keys {
		d := &dists[i]
		f, ok := pol.Factor(d, now)
		d.Decay(now, pol.HalfLife)
		next[k] = Learned{Factor: f, Learned: ok, Samples: d.Samples(), Quantile: d.Quantile(pol.Quantile)}
	}
	s.snap.Store(&next)
	return nil
}

// fallBack empties the snapshot: static pricing for every key.
func (s *Shared) fallBack() {
	empty := map[Key]Learned{}
	s.snap.Store(&empty)
}

// Snapshot is every key's learned figure as of the last Sync, for metrics and operators.
func (s *Shared) Snapshot() map[Key]Learned { return *s.snap.Load() }

// Run calls Sync every interval until ctx ends, each within interval, handing its errors to
// onErr (nil: ignored). It returns when ctx ends.
func (s *Shared) Run(ctx context.Context, interval time.Duration, onErr func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, interval)
		if err := s.Sync(sctx); err != nil && onErr != nil {
			onErr(err)
		}
		cancel()
	}
}
