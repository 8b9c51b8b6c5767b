package redistest

import (
	"context"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterTimeout bounds cluster creation and convergence.
const clusterTimeout = 30 * time.Second

// Cluster is a Redis Cluster of 3 masters (and WithReplicas(n) replicas each) on loopback, created
// with redis-cli --cluster create. Its methods are safe for concurrent use.
type Cluster struct {
	t   testing.TB
	cfg config
	// Nodes are the cluster's processes: the masters first, then the replicas, in the order given to
	// redis-cli (which assigns the slots 0-5460, 5461-10922 and 10923-16383 to the masters in order).
	Nodes []*Server
}

// StartCluster starts 3 cluster-enabled redis-server processes (3 x (1 + replicas) with
// WithReplicas), creates the cluster with redis-cli --cluster create, and waits until every node
// reports cluster_state:ok with all 16384 slots assigned. The processes are killed when the test
// ends. Options other than WithReplicas apply to every node (WithTLS is not supported).
func StartCluster(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.tls {
		t.Fatal("redistest: StartCluster does not support WithTLS")
	}
	cli := lookPath(t, "redis-cli")
	c := &Cluster{t: t, cfg: cfg}
	n := 3 * (1 + cfg.replicas)
	for range n {
		c.Nodes = append(c.Nodes, startClusterNode(t, cfg))
	}

	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.replicas), "--cluster-yes")
	if cfg.user != "" {
		args = append(args, "--user", cfg.user)
	}
	if cfg.password != "" {
		args = append(args, "--pass", cfg.password, "--no-auth-warning")
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitReady(ctx)
	return c
}

func startClusterNode(t testing.TB, cfg config) *Server {
	t.Helper()
	s := newServer(t, "redis-server", cfg)
	// The cluster bus needs a second free port; it is picked again only when the client port
	// changes, so that Restart keeps both.
	var bus, busFor int
	s.args = func(port int) []string {
		if busFor != port {
			p, err := freePort()
			if err != nil {
				p = 0 // redis-server then fails to start and the error names the port
			}
			bus, busFor = p, port
		}
		args := append(s.serverArgs(port),
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "3000",
		)
		if cfg.user != "" {
			args = append(args, "--masteruser", cfg.user)
		}
		if cfg.password != "" {
			args = append(args, "--masterauth", cfg.password)
		}
		return args
	}
	s.start(0)
	return s
}

// waitReady polls every node until it reports a healthy cluster with all slots assigned and, for
// replicas, a live link to their master.
func (c *Cluster) waitReady(ctx context.Context) {
	c.t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i, s := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: s.Addr(), Username: c.cfg.user, Password: c.cfg.password})
		replica := i >= 3
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			ok := err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_slots_ok:16384")
			if ok && replica {
				repl, err := cl.Info(ctx, "replication").Result()
				ok = err == nil && strings.Contains(repl, "master_link_status:up")
			}
			if ok {
				break
			}
			select {
			case <-ctx.Done():
				_ = cl.Close()
				c.t.Fatalf("redistest: cluster node %s not ready: %v (last error %v)\n%s", s.Addr(), ctx.Err(), err, info)
			case <-tick.C:
			}
		}
		_ = cl.Close()
	}
}

// Addrs are the host:port of every node, masters first.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr()
	}
	return addrs
}

// URL is redis+cluster://[user:password@]host1:port1,host2:port2,... listing every node.
func (c *Cluster) URL() string {
	u := url.URL{Scheme: "redis+cluster", Host: strings.Join(c.Addrs(), ",")}
	if c.cfg.password != "" {
		u.User = url.UserPassword(c.cfg.user, c.cfg.password)
	}
	return u.String()
}

// Client returns a go-redis cluster client for the cluster, closed when the test ends.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: c.Addrs(), Username: c.cfg.user, Password: c.cfg.password,
	})
	c.t.Cleanup(func() { _ = cl.Close() })
	return cl
}
