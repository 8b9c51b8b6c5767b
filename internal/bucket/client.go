package bucket

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientOptions tunes the client NewClient builds. Zero values keep go-redis's defaults (dial 5 s,
// read and write 3 s, 10 connections per CPU); the service sets timeouts below Envoy's ext_authz
// timeout.
type ClientOptions struct {
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// PoolSize is the number of connections per node.
	PoolSize int
	// MaxRetries is how often a command failing on a network error is retried; 0 keeps go-redis's
	// default (3), -1 disables retries.
	MaxRetries int
	// TLSConfig is the base TLS configuration of the rediss schemes, for example to trust a private
	// CA (RootCAs) or present a client certificate. When its ServerName is empty each connection
	// verifies the host it dials. Nil means the system roots.
	TLSConfig *tls.Config
	// SentinelUsername and SentinelPassword authenticate to the Sentinels when they differ from the
	// URL's credentials, which are the data nodes'.
	SentinelUsername string
	SentinelPassword string
}

const (
	defaultPort         = "6379"
	defaultSentinelPort = "26379"
)

// NewClient builds a go-redis client from a URL:
//
//	redis://[[user]:password@]host[:port][/db]                              one node
//	redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/master[/db]  Sentinel: the hosts are Sentinels, master is the monitored name
//	redis+cluster://[[user]:password@]host[:port][,host[:port]...]           Redis Cluster: the hosts are seed nodes
//
// Each scheme has a TLS variant: rediss, rediss+sentinel, rediss+cluster. The port defaults to
// 6379 (26379 for Sentinels), db to 0 (a cluster has only db 0). The credentials in the URL are
// the data nodes' (ACL user and password, or just a password); Sentinels use
// ClientOptions.SentinelUsername and SentinelPassword. Query parameters are rejected: timeouts and
// pool sizes come from opts, so the configuration has one place for them. Multi-host URLs take
// host names or IPv4 addresses; an IPv6 literal ([::1]:6379) works in a single-host URL only.
//
// Errors never include the password. Connections are made lazily: use Ping to check the server.
func NewClient(rawURL string, opts ClientOptions) (redis.UniversalClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return nil, fmt.Errorf("bucket: redis URL: %v", err)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("bucket: redis URL %s: query parameters and fragments are not supported; set timeouts in the configuration", u.Redacted())
	}
	if u.Opaque != "" || u.Host == "" {
		return nil, fmt.Errorf("bucket: redis URL %s: want scheme://host", u.Redacted())
	}
	base, secure := "?", false
	switch u.Scheme {
	case "redis", "redis+sentinel", "redis+cluster":
		base = strings.TrimPrefix(u.Scheme, "redis")
	case "rediss", "rediss+sentinel", "rediss+cluster":
		base, secure = strings.TrimPrefix(u.Scheme, "rediss"), true
	}
	var tlsConfig *tls.Config
	if secure {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if opts.TLSConfig != nil {
			tlsConfig = opts.TLSConfig.Clone()
			if tlsConfig.MinVersion == 0 {
				tlsConfig.MinVersion = tls.VersionTLS12
			}
		}
	}
	user, password := u.User.Username(), ""
	if p, ok := u.User.Password(); ok {
		password = p
	}
	path := strings.Trim(u.Path, "/")

	switch base {
	case "":
		addrs, err := hostList(u, defaultPort)
		if err != nil {
			return nil, err
		}
		if len(addrs) != 1 {
			return nil, fmt.Errorf("bucket: redis URL %s: %d hosts; list several only with redis+sentinel or redis+cluster", u.Redacted(), len(addrs))
		}
		db, err := parseDB(u, path)
		if err != nil {
			return nil, err
		}
		return redis.NewClient(&redis.Options{
			Addr: addrs[0], Username: user, Password: password, DB: db, TLSConfig: tlsConfig,
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
			PoolSize: opts.PoolSize, MaxRetries: opts.MaxRetries, ContextTimeoutEnabled: true,
		}), nil
	case "+sentinel":
		addrs, err := hostList(u, defaultSentinelPort)
		if err != nil {
			return nil, err
		}
		master, dbPart, _ := strings.Cut(path, "/")
		if master == "" {
			return nil, fmt.Errorf("bucket: redis URL %s: want the master name as the path, /name[/db]", u.Redacted())
		}
		db, err := parseDB(u, dbPart)
		if err != nil {
			return nil, err
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: master, SentinelAddrs: addrs,
			SentinelUsername: opts.SentinelUsername, SentinelPassword: opts.SentinelPassword,
			Username: user, Password: password, DB: db, TLSConfig: tlsConfig,
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
			PoolSize: opts.PoolSize, MaxRetries: opts.MaxRetries, ContextTimeoutEnabled: true,
		}), nil
	case "+cluster":
		addrs, err := hostList(u, defaultPort)
		if err != nil {
			return nil, err
		}
		if db, err := parseDB(u, path); err != nil || db != 0 {
			return nil, fmt.Errorf("bucket: redis URL %s: a cluster has only db 0", u.Redacted())
		}
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: addrs, Username: user, Password: password, TLSConfig: tlsConfig,
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
			PoolSize: opts.PoolSize, MaxRetries: opts.MaxRetries, ContextTimeoutEnabled: true,
		}), nil
	}
	return nil, fmt.Errorf("bucket: redis URL %s: unknown scheme %q; want redis, rediss, redis+sentinel, rediss+sentinel, redis+cluster or rediss+cluster", u.Redacted(), u.Scheme)
}

// hostList splits the URL's comma-separated hosts, adding the default port where it is missing.
func hostList(u *url.URL, port string) ([]string, error) {
	var addrs []string
	for h := range strings.SplitSeq(u.Host, ",") {
		host, p, err := net.SplitHostPort(h)
		if err != nil {
			host, p = strings.Trim(h, "[]"), port
		}
		if host == "" {
			return nil, fmt.Errorf("bucket: redis URL %s: empty host", u.Redacted())
		}
		if n, err := strconv.Atoi(p); err != nil || n <= 0 || n > 65535 {
			return nil, fmt.Errorf("bucket: redis URL %s: bad port %q", u.Redacted(), p)
		}
		addrs = append(addrs, net.JoinHostPort(host, p))
	}
	return addrs, nil
}

func parseDB(u *url.URL, s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	db, err := strconv.Atoi(s)
	if err != nil || db < 0 {
		return 0, fmt.Errorf("bucket: redis URL %s: bad database number %q", u.Redacted(), s)
	}
	return db, nil
}
