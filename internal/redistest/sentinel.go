package redistest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel is a Redis Sentinel process monitoring one master. Its methods are safe for concurrent
// use.
type Sentinel struct {
	*Server
	master *Server
	name   string
}

// StartSentinel starts redis-server --sentinel on a free loopback port, monitoring master under
// name with a quorum of 1, and kills it when the test ends. The master's credentials are given to
// the sentinel; the sentinel itself needs none.
func StartSentinel(t testing.TB, master *Server, name string) *Sentinel {
	t.Helper()
	if master.cfg.tls {
		t.Fatal("redistest: StartSentinel does not support a TLS master")
	}
	s := newServer(t, "redis-server", config{})
	s.mark = "+monitor master"
	conf := filepath.Join(s.dir, "sentinel.conf")
	s.args = func(port int) []string {
		// Sentinel rewrites its configuration file, so it is written afresh for every start.
		// A master silent for 1s is down, and a failover may be retried after 5s, so that
		// failover tests take seconds rather than Sentinel's default minutes.
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %q\nsentinel monitor %s 127.0.0.1 %d 1\n"+
			"sentinel down-after-milliseconds %s 1000\nsentinel failover-timeout %s 5000\n",
			port, s.dir, name, master.Port(), name, name)
		if master.cfg.user != "" {
			text += fmt.Sprintf("sentinel auth-user %s %s\n", name, master.cfg.user)
		}
		if master.cfg.password != "" {
			text += fmt.Sprintf("sentinel auth-pass %s %s\n", name, master.cfg.password)
		}
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Errorf("redistest: write sentinel.conf: %v", err)
		}
		return []string{conf, "--sentinel"}
	}
	s.start(0)
	return &Sentinel{Server: s, master: master, name: name}
}

// Name is the monitored master's name.
func (s *Sentinel) Name() string { return s.name }

// URL is redis+sentinel://[user:password@]127.0.0.1:port/name, where the credentials are the
// master's.
func (s *Sentinel) URL() string {
	u := url.URL{Scheme: "redis+sentinel", Host: s.Addr(), Path: "/" + s.name}
	if s.master.cfg.password != "" {
		u.User = url.UserPassword(s.master.cfg.user, s.master.cfg.password)
	}
	return u.String()
}

// StartReplica starts a redis-server replicating master (with master's credentials and options),
// waits until its link to the master is up, and kills it when the test ends. A Sentinel started
// on master discovers it and can promote it.
func StartReplica(t testing.TB, master *Server) *Server {
	t.Helper()
	if master.cfg.tls {
		t.Fatal("redistest: StartReplica does not support a TLS master")
	}
	s := newServer(t, "redis-server", master.cfg)
	s.args = func(port int) []string {
		args := append(s.serverArgs(port), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
		if master.cfg.user != "" {
			args = append(args, "--masteruser", master.cfg.user)
		}
		if master.cfg.password != "" {
			args = append(args, "--masterauth", master.cfg.password)
		}
		return args
	}
	s.start(0)
	deadline := time.Now().Add(startTimeout)
	for {
		info, _ := s.Do(context.Background(), "INFO", "replication").(string)
		if strings.Contains(info, "master_link_status:up") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s never linked to %s:\n%s", s.Addr(), master.Addr(), info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
