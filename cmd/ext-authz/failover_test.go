package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// Sentinel failover under load: the master is killed, Sentinel promotes the replica, and the
// service follows it (go-redis's failover client asks the Sentinel again). Every Check is answered
// within faultBound; decisions are exact again within a second of the promotion.
func TestFaultSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	master := redistest.StartServer(t)
	replica := redistest.StartReplica(t, master)
	sentinel := redistest.StartSentinel(t, master, "main")
	waitFor(t, 15*time.Second, "sentinel to see the replica", func() bool {
		v, err := sentinel.Client().Do(ctx, "SENTINEL", "replicas", "main").Slice()
		return err == nil && len(v) > 0
	})
	cfg := writeFile(t, "limits.yaml", fmt.Sprintf(faultLimits, "deny"))
	p := startProc(t, "-config", cfg, "-redis-url", sentinel.URL(), "-redis-prefix", "failover:",
		"-redis-timeout", faultTimeout.String())
	l := startLoad(t, p, 4)
	time.Sleep(time.Second)
	master.Kill()
	killed := time.Now()
	waitFor(t, 30*time.Second, "the replica's promotion", func() bool {
		addr, err := sentinel.Client().Do(ctx, "SENTINEL", "get-master-addr-by-name", "main").StringSlice()
		return err == nil && strings.Join(addr, ":") == replica.Addr()
	})
	promoted := time.Now()
	t.Logf("sentinel promoted the replica %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
	time.Sleep(time.Second + faultBound)
	l.end()
	checkPhase(t, "master killed, until promotion", summarize(l.between(killed.Add(faultBound), promoted)), "unavailable", "allowed")
	recovered(t, l, promoted)
}

// A Redis Cluster under load: the slot of the decisions' hash tag migrates to another master
// (ASK, then MOVED redirections), then that master is killed and its replica promoted. Every
// Check is answered within faultBound; decisions are exact again within a second of the
// promotion.
func TestFaultClusterMigrationAndMasterKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t, redistest.WithReplicas(1))
	cfg := writeFile(t, "limits.yaml", fmt.Sprintf(faultLimits, "deny"))
	p := startProc(t, "-config", cfg, "-redis-url", c.URL(), "-redis-prefix", "cluster:",
		"-redis-timeout", faultTimeout.String())
	l := startLoad(t, p, 4)
	time.Sleep(time.Second)

	// Every key of a decision carries the provider as its hash tag.
	cl := c.Client()
	slot, err := cl.ClusterKeySlot(ctx, "{openai}").Result()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]*redistest.Server{}
	var from, to *redistest.Server
	var fromID, toID string
	for _, s := range c.Nodes[:3] {
		id, _ := s.Do(ctx, "CLUSTER", "MYID").(string)
		ids[id] = s
		owns, err := s.Client().ClusterCountKeysInSlot(ctx, int(slot)).Result()
		_ = owns
		if err != nil {
			t.Fatal(err)
		}
	}
	slots, err := cl.ClusterSlots(ctx).Result() //nolint:staticcheck // CLUSTER SHARDS needs Redis 7; older servers are supported
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			fromID = r.Nodes[0].ID
		}
	}
	from = ids[fromID]
	for id, s := range ids {
		if id != fromID {
			to, toID = s, id
			break
		}
	}
	if from == nil || to == nil {
		t.Fatalf("slot %d: no owner among the masters", slot)
	}

	// Migrate the slot key by key: while it is MIGRATING, missing keys are answered with ASK.
	migrating := time.Now()
	to.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", fromID)
	from.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", toID)
	time.Sleep(500 * time.Millisecond)
	for {
		keys, _ := from.Do(ctx, "CLUSTER", "GETKEYSINSLOT", slot, 100).([]any)
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", to.Port(), "", 0, 5000, "KEYS"}
		args = append(args, keys...)
		from.Do(ctx, args...)
	}
	time.Sleep(500 * time.Millisecond)
	for _, s := range c.Nodes[:3] {
		s.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID)
	}
	moved := time.Now()
	time.Sleep(time.Second)
	migration := summarize(l.between(migrating, moved.Add(time.Second)))
	checkPhase(t, "slot migrating (ASK) then moved (MOVED)", migration, "allowed", "unavailable")

	// Kill the slot's new master: the cluster promotes its replica after the node timeout (3s).
	var replica *redistest.Server
	for _, s := range c.Nodes[3:] {
		info, _ := s.Do(ctx, "INFO", "replication").(string)
		if strings.Contains(info, fmt.Sprintf("master_port:%d\r", to.Port())) {
			replica = s
		}
	}
	if replica == nil {
		t.Fatalf("no replica of %s", to.Addr())
	}
	to.Kill()
	killed := time.Now()
	waitFor(t, 30*time.Second, "the replica's promotion", func() bool {
		info, _ := replica.Do(ctx, "INFO", "replication").(string)
		return strings.Contains(info, "role:master")
	})
	promoted := time.Now()
	t.Logf("the cluster promoted the replica %v after the kill", promoted.Sub(killed).Round(time.Millisecond))
	time.Sleep(2*time.Second + faultBound)
	l.end()
	checkPhase(t, "master killed, until promotion", summarize(l.between(killed.Add(faultBound), promoted)), "unavailable", "allowed")
	recovered(t, l, promoted)
}

// waitFor polls cond every 50ms until it holds, or fails the test after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
	}
}
