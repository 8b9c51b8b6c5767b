package redistest_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartServer(t)
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if got := s.Do(ctx, "CONFIG", "GET", "save"); !strings.Contains(strings.TrimSpace(toString(got)), "save") {
		t.Fatalf("CONFIG GET save = %v", got)
	}

	addr := s.Addr()
	s.Kill()
	if s.Running() {
		t.Fatal("Running after Kill")
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Fatal("a killed server still accepts connections")
	}
	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("Restart moved the server from %s to %s", addr, s.Addr())
	}
	// Nothing is persisted: the key is gone after the restart.
	if err := c.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET after restart: err = %v, want redis.Nil", err)
	}
}

func toString(v any) string {
	switch v := v.(type) {
	case []any:
		var b strings.Builder
		for _, e := range v {
			b.WriteString(toString(e))
			b.WriteByte(' ')
		}
		return b.String()
	case map[any]any:
		var b strings.Builder
		for k, e := range v {
			b.WriteString(toString(k) + " " + toString(e) + " ")
		}
		return b.String()
	case string:
		return v
	}
	return ""
}

func TestServerAuth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opt  redistest.Option
		url  string
	}{
		{"password", redistest.WithPassword("s3cret"), "redis://:s3cret@"},
		{"user", redistest.WithUser("alice", "pa55"), "redis://alice:pa55@"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := redistest.StartServer(t, tc.opt)
			if !strings.HasPrefix(s.URL(), tc.url) {
				t.Errorf("URL() = %q, want prefix %q", s.URL(), tc.url)
			}
			if err := s.Client().Ping(ctx).Err(); err != nil {
				t.Errorf("PING with credentials: %v", err)
			}
			anon := redis.NewClient(&redis.Options{Addr: s.Addr()})
			defer anon.Close()
			if err := anon.Set(ctx, "k", "v", 0).Err(); err == nil {
				t.Error("SET without credentials succeeded")
			}
		})
	}
}

func TestServerTLS(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartServer(t, redistest.WithTLS())
	if !strings.HasPrefix(s.URL(), "rediss://") {
		t.Errorf("URL() = %q, want rediss://", s.URL())
	}
	if err := s.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(ctx).Err(); err == nil {
		t.Error("PING without TLS succeeded on a TLS-only server")
	}
}

func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := redistest.StartServer(t)
	s := redistest.StartSentinel(t, m, "main")
	addr, err := s.Client().Do(ctx, "SENTINEL", "get-master-addr-by-name", "main").StringSlice()
	if err != nil {
		t.Fatalf("SENTINEL get-master-addr-by-name: %v", err)
	}
	if got := strings.Join(addr, ":"); got != m.Addr() {
		t.Errorf("sentinel master = %s, want %s", got, m.Addr())
	}
	if want := "redis+sentinel://" + s.Addr() + "/main"; s.URL() != want {
		t.Errorf("URL() = %q, want %q", s.URL(), want)
	}
}

func TestCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := redistest.StartCluster(t)
	if len(c.Nodes) != 3 {
		t.Fatalf("%d nodes, want 3", len(c.Nodes))
	}
	cl := c.Client()
	// Keys spread over every master.
	for i := range 30 {
		k := "key" + string(rune('a'+i))
		if err := cl.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	for _, s := range c.Nodes {
		n, err := s.Client().DBSize(ctx).Result()
		if err != nil || n == 0 {
			t.Errorf("node %s holds %d keys (err %v), want some", s.Addr(), n, err)
		}
	}
	if !strings.HasPrefix(c.URL(), "redis+cluster://127.0.0.1:") || strings.Count(c.URL(), ",") != 2 {
		t.Errorf("URL() = %q", c.URL())
	}
}
