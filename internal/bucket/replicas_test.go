package bucket

import (
	"context"
	"testing"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// Replicas sharing a prefix count each other; a replica that leaves stops counting at once,
// and another prefix is another set, under the key the prefix names.
func TestRedisHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartServer(t).Client()
	a, b := NewRedis(c, RedisOptions{Prefix: "rl:"}), NewRedis(c, RedisOptions{Prefix: "rl:"})
	other := NewRedis(c, RedisOptions{Prefix: "other:"})
	beat := func(s *Redis, id string, want int) {
		t.Helper()
		if n, err := s.Heartbeat(ctx, id); err != nil || n != want {
			t.Fatalf("Heartbeat(%s) = %d, %v; want %d", id, n, err, want)
		}
	}
	beat(a, "a", 1)
	beat(b, "b", 2)
	beat(a, "a", 2)
	beat(other, "x", 1)
	if err := b.Leave(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	beat(a, "a", 1)
	if n, err := c.ZCard(ctx, "rl:replicas").Result(); err != nil || n != 1 {
		t.Errorf("rl:replicas holds %d, %v; want 1", n, err)
	}
	if ttl, err := c.PTTL(ctx, "rl:replicas").Result(); err != nil || ttl <= 0 || ttl > 3*HeartbeatTTL {
		t.Errorf("rl:replicas expires in %v, %v; want at most %v", ttl, err, 3*HeartbeatTTL)
	}
	a.ReloadTopology(ctx) // not a cluster: nothing to do, and no panic
}
