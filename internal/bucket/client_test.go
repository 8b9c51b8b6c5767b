package bucket

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// TestNewClient connects with every URL form to real servers and runs a decision through each.
func TestNewClient(t *testing.T) {
	t.Parallel()
	plain := redistest.StartServer(t)
	password := redistest.StartServer(t, redistest.WithPassword("pa55"))
	user := redistest.StartServer(t, redistest.WithUser("alice", "s3cret"))
	secure := redistest.StartServer(t, redistest.WithTLS())
	sentinel := redistest.StartSentinel(t, password, "main")
	cluster := redistest.StartCluster(t)

	for _, tc := range []struct {
		name string
		url  string
		opts ClientOptions
		db   string // the db the connection must be on ("" = skip the check)
	}{
		{"single", plain.URL(), ClientOptions{}, "0"},
		{"db", plain.URL() + "/3", ClientOptions{}, "3"},
		{"password", password.URL() + "/2", ClientOptions{}, "2"},
		{"acl_user", user.URL(), ClientOptions{}, "0"},
		{"tls", secure.URL(), ClientOptions{TLSConfig: secure.TLSConfig()}, "0"},
		{"sentinel", sentinel.URL() + "/1", ClientOptions{DialTimeout: time.Second}, "1"},
		{"cluster", cluster.URL(), ClientOptions{ReadTimeout: time.Second, PoolSize: 4}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := NewClient(tc.url, tc.opts)
			if err != nil {
				t.Fatalf("NewClient(%s): %v", tc.url, err)
			}
			defer c.Close()
			s := NewRedis(c, RedisOptions{Prefix: "rl:"})
			if err := s.Ping(ctx); err != nil {
				t.Fatalf("Ping: %v", err)
			}
			if res := take(t, s, req(tokenBucket("a", 10, time.Minute, 4))); res.Buckets[0].Remaining != 6 {
				t.Fatalf("Take: %+v", res)
			}
			if tc.db != "" {
				info, err := c.Do(ctx, "CLIENT", "INFO").Text()
				if err != nil || !strings.Contains(info, " db="+tc.db+" ") {
					t.Fatalf("CLIENT INFO = %q (%v), want db=%s", info, err, tc.db)
				}
			}
		})
	}

	t.Run("failures", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		for name, tc := range map[string]struct {
			url  string
			opts ClientOptions
		}{
			"wrong password": {strings.Replace(password.URL(), "pa55", "wrong", 1), ClientOptions{}},
			"untrusted TLS":  {secure.URL(), ClientOptions{}},
			"plain to TLS":   {"redis://" + secure.Addr(), ClientOptions{ReadTimeout: 200 * time.Millisecond}},
		} {
			c, err := NewClient(tc.url, tc.opts)
			if err != nil {
				t.Fatalf("%s: NewClient: %v", name, err)
			}
			if err := NewRedis(c, RedisOptions{}).Ping(ctx); err == nil {
				t.Errorf("%s: Ping succeeded", name)
			}
			_ = c.Close()
		}
	})
}

func TestNewClientRejects(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"",
		"localhost:6379",
		"http://:hunter2@localhost",
		"redis://:hunter2@a:1,b:2",
		"redis://:hunter2@localhost/x",
		"redis://:hunter2@localhost/-1",
		"redis://:hunter2@localhost:99999",
		"redis://:hunter2@localhost?dial_timeout=1",
		"redis+cluster://:hunter2@a,b/1",
		"redis+sentinel://:hunter2@a,b",
		"redis+sentinel://:hunter2@a/main/x",
		"redis://:hunter2@%zz",
		"redis://:hunter2@",
	} {
		c, err := NewClient(u, ClientOptions{})
		if err == nil {
			_ = c.Close()
			t.Errorf("NewClient(%q) accepted", u)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("NewClient(%q) error reveals the password: %v", u, err)
		}
	}
	// Defaults: port 6379, Sentinel port 26379.
	for u, want := range map[string][]string{
		"redis://h":                      {"h:6379"},
		"rediss://h:7000/1":              {"h:7000"},
		"redis+cluster://a,b:7001":       {"a:6379", "b:7001"},
		"redis+sentinel://a,b:5000/main": {"a:26379", "b:5000"},
	} {
		c, err := NewClient(u, ClientOptions{})
		if err != nil {
			t.Errorf("NewClient(%q): %v", u, err)
			continue
		}
		var got []string
		switch c := c.(type) {
		case *redis.Client:
			got = []string{c.Options().Addr}
			if strings.HasPrefix(u, "rediss") && c.Options().TLSConfig == nil {
				t.Errorf("NewClient(%q): no TLS", u)
			}
		case *redis.ClusterClient:
			got = c.Options().Addrs
		}
		if strings.Contains(u, "sentinel") {
			got = want // the FailoverClient does not expose its Sentinel addresses
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("NewClient(%q) addresses %v, want %v", u, got, want)
		}
		_ = c.Close()
	}
}
