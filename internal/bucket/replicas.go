package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed heartbeat.lua
var heartbeatSource string

var heartbeatScript = redis.NewScript(heartbeatSource)

// HeartbeatTTL is how long a replica counts as live after its last beat.
const HeartbeatTTL = 5 * time.Second

// Heartbeat records replica id as live, in a sorted set under the store's prefix, and returns
// the number of replicas that beat within HeartbeatTTL, this one included. Replicas sharing the
// store call it at every health ping (about once a second), never per decision; the count
// divides each limit among them while the store is down (failure.mode local). Safe for
// concurrent use.
func (s *Redis) Heartbeat(ctx context.Context, id string) (int, error) {
	n, err := heartbeatScript.Run(ctx, s.client, []string{s.replicasKey}, id, HeartbeatTTL.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("bucket: heartbeat: %w", err)
	}
	return n, nil
}

// Leave removes replica id from the live ones at once, rather than when its beat expires, so
// that the others' share grows at once. Safe for concurrent use.
func (s *Redis) Leave(ctx context.Context, id string) error {
	if err := s.client.ZRem(ctx, s.replicasKey, id).Err(); err != nil {
		return fmt.Errorf("bucket: leave: %w", err)
	}
	return nil
}

// ReloadTopology reloads a Redis Cluster's slot map; it does nothing on other deployments.
// go-redis reloads the map on MOVED, but not when a dead master stops answering and its
// replica takes over: a caller that sees the store fail calls it. Safe for concurrent use.
func (s *Redis) ReloadTopology(ctx context.Context) {
	if cc, ok := s.client.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
}
