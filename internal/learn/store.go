package learn

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
)

// Key names one learned distribution: the provider (the buckets' tag), the model and the reason
// code of the estimate. Its strings are the caller's; stores keep copies.
type Key struct {
	Provider, Model, Reason string
}

// Delta is what one replica adds to the distribution of Key: the samples it saw since its last
// write, as of Dist.At.
type Delta struct {
	Key  Key
	Dist Dist
}

// Store keeps the distributions every replica shares. Memory and Redis implement it.
type Store interface {
	// Add merges each delta into its key's distribution (decayed to now with halfLife).
	Add(ctx context.Context, deltas []Delta, halfLife time.Duration) error
	// Load returns the distribution of each key (empty for a key never written), as of the time
	// of its last write.
	Load(ctx context.Context, keys []Key) ([]Dist, error)
}

// Memory is a Store in this process: for a single replica and tests. Safe for concurrent use.
type Memory struct {
	mu  sync.Mutex
	m   map[Key]*Dist
	now func() time.Time
}

// NewMemory returns an empty store on the clock now (time.Now when nil).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{m: make(map[Key]*Dist), now: now}
}

// Add merges deltas, as of the store's now.
func (s *Memory) Add(ctx context.Context, deltas []Delta, halfLife time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range deltas {
		d := s.m[deltas[i].Key]
		if d == nil {
			d = &Dist{}
			s.m[deltas[i].Key] = d
		}
		d.Decay(now, halfLife)
		add := deltas[i].Dist
		add.At = d.At // a delta is as of its write, as in Redis
		d.Merge(&add, halfLife)
	}
	return nil
}

// Load copies the distributions of keys.
func (s *Memory) Load(ctx context.Context, keys []Key) ([]Dist, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := make([]Dist, len(keys))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, k := range keys {
		if d := s.m[k]; d != nil {
			out[i] = *d
		}
	}
	return out, nil
}

//go:embed learn.lua
var luaSource string

var script = redis.NewScript(luaSource)

// Redis is a Store in Redis (a single node, Sentinel or Cluster): one hash per key, named
// prefix "{" provider "}L:" reason ":" and 32 hex digits of SHA-256 of the model, so that it
// shares the slot of the provider's buckets (bucket.HashTag) and names no model in clear. Each
// Add and Load is one pipeline. Safe for concurrent use.
type Redis struct {
	client redis.UniversalClient
	prefix string
	ttl    time.Duration
	// now, when set, replaces the server's TIME in the script; tests only.
	now func() time.Time
}

// NewRedis returns a store on client under prefix (as the bucket store's: bucket.RedisOptions)
// whose keys expire ttl after their last write. The client is the caller's to close.
func NewRedis(client redis.UniversalClient, prefix string, ttl time.Duration) *Redis {
	return &Redis{client: client, prefix: strings.NewReplacer("{", "%7B", "}", "%7D").Replace(prefix), ttl: ttl}
}

// RedisKey is the key of k under prefix.
func RedisKey(prefix string, k Key) string {
	sum := sha256.Sum256([]byte(k.Model))
	return prefix + bucket.HashTag(k.Provider) + "L:" + safe(k.Reason) + ":" + hex.EncodeToString(sum[:16])
}

// safe keeps a reason code's bytes that cannot alter a key's hash tag or meaning.
func safe(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(b) < 64; i++ {
		if c := s[i]; c == '_' || c == '-' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' {
			b = append(b, c)
		}
	}
	return string(b)
}

// Add runs the script once per delta, in one pipeline.
func (s *Redis) Add(ctx context.Context, deltas []Delta, halfLife time.Duration) error {
	if len(deltas) == 0 {
		return nil
	}
	var now int64
	if s.now != nil {
		now = s.now().UnixMilli()
	}
	failed, err := s.add(ctx, deltas, now, halfLife)
	if err != nil && len(failed) > 0 {
		// A server restarted or failed over, or never ran the script: load it (on every master)
		// and run again the deltas it refused, only those (the others were merged).
		if err := script.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("learn: load script: %w", err)
		}
		retry := make([]Delta, len(failed))
		for i, j := range failed {
			retry[i] = deltas[j]
		}
		_, err = s.add(ctx, retry, now, halfLife)
	}
	if err != nil {
		return fmt.Errorf("learn: add: %w", err)
	}
	return nil
}

// add is one pipeline of EVALSHA; noscript indexes the deltas a server refused for want of the
// script (nothing else failed when err is nil or only those failed).
func (s *Redis) add(ctx context.Context, deltas []Delta, now int64, halfLife time.Duration) (noscript []int, err error) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(deltas))
	for i := range deltas {
		args := []any{now, halfLife.Milliseconds(), s.ttl.Milliseconds()}
		for b, w := range deltas[i].Dist.W {
			if w > 0 && !math.IsInf(w, 0) {
				args = append(args, b, strconv.FormatFloat(w, 'g', -1, 64))
			}
		}
		cmds[i] = script.EvalSha(ctx, pipe, []string{RedisKey(s.prefix, deltas[i].Key)}, args...)
	}
	_, err = pipe.Exec(ctx)
	if err == nil {
		return nil, nil
	}
	var other error
	for i, c := range cmds {
		switch e := c.Err(); {
		case e == nil:
		case redis.HasErrorPrefix(e, "NOSCRIPT"):
			noscript = append(noscript, i)
		default:
			other = e
		}
	}
	if other != nil {
		return nil, other
	}
	return noscript, err
}

// Load reads every key in one pipeline.
func (s *Redis) Load(ctx context.Context, keys []Key) ([]Dist, error) {
	out := make([]Dist, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	pipe := s.client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, RedisKey(s.prefix, k))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("learn: load: %w", err)
	}
	var errs []error
	for i, c := range cmds {
		for f, v := range c.Val() {
			x, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(x) || x < 0 || math.IsInf(x, 0) {
				errs = append(errs, fmt.Errorf("learn: load: field %q: bad value", f))
				continue
			}
			if f == "t" {
				out[i].At = time.UnixMilli(int64(x)).UTC()
				continue
			}
			b, err := strconv.Atoi(f)
			if err != nil || b < 0 || b >= Bins {
				errs = append(errs, fmt.Errorf("learn: load: bad field %q", f))
				continue
			}
			out[i].W[b] = x
		}
	}
	return out, errors.Join(errs...)
}
