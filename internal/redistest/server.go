package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long a process may take to say it is ready.
const startTimeout = 15 * time.Second

// portAttempts is how many free ports StartServer tries: another process may take the port
// between the moment it is found free and the moment redis-server binds it.
const portAttempts = 5

// Option configures StartServer, StartSentinel or StartCluster.
type Option func(*config)

type config struct {
	password string
	user     string
	tls      bool
	args     []string
	replicas int
}

// WithPassword protects the server with requirepass; URL and Client carry the password.
func WithPassword(password string) Option {
	return func(c *config) { c.password = password }
}

// WithUser creates the ACL user name with the password and every permission, and disables the
// default user, so that every connection must authenticate as name. URL and Client carry the
// credentials.
func WithUser(name, password string) Option {
	return func(c *config) { c.user, c.password = name, password }
}

// WithTLS serves TLS only, with a certificate for 127.0.0.1 signed by a fresh CA;
// Server.TLSConfig trusts that CA and URL uses the rediss scheme.
func WithTLS() Option {
	return func(c *config) { c.tls = true }
}

// WithArgs appends redis-server command-line configuration, such as "--maxmemory", "10mb".
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// WithReplicas gives each master of a StartCluster n replicas; other constructors ignore it.
func WithReplicas(n int) Option {
	return func(c *config) { c.replicas = n }
}

// Server is one redis-server process (or a Sentinel). Its methods are safe for concurrent use.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	cfg  config
	ca   *tls.Config // client TLS config when cfg.tls
	args func(port int) []string
	mark string // log line that means ready

	mu   sync.Mutex
	port int
	proc *process
}

// process is one run of the binary.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and its output is drained
	mu   *sync.Mutex
	log  *bytes.Buffer // guarded by mu
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// StartServer starts a redis-server on a free loopback port, persisting nothing, and kills it when
// the test ends. It fails the test if redis-server is missing or does not start.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	s := newServer(t, "redis-server", cfg)
	s.args = func(port int) []string { return s.serverArgs(port) }
	s.start(0)
	return s
}

func newServer(t testing.TB, name string, cfg config) *Server {
	t.Helper()
	bin := lookPath(t, name)
	s := &Server{t: t, bin: bin, dir: t.TempDir(), cfg: cfg, mark: "Ready to accept connections"}
	if cfg.tls {
		ca, err := writeTLSFiles(s.dir)
		if err != nil {
			t.Fatalf("redistest: TLS certificates: %v", err)
		}
		s.ca = ca
	}
	t.Cleanup(s.Kill)
	return s
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found: run make deps (%v)", name, err)
	}
	return bin
}

// serverArgs is the command line of a plain redis-server on port.
func (s *Server) serverArgs(port int) []string {
	args := []string{
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "notice",
	}
	if s.cfg.tls {
		args = append(args,
			"--port", "0",
			"--tls-port", strconv.Itoa(port),
			"--tls-cert-file", filepath.Join(s.dir, "server.crt"),
			"--tls-key-file", filepath.Join(s.dir, "server.key"),
			"--tls-ca-cert-file", filepath.Join(s.dir, "ca.crt"),
			"--tls-auth-clients", "no",
		)
	} else {
		args = append(args, "--port", strconv.Itoa(port))
	}
	switch {
	case s.cfg.user != "":
		args = append(args, "--user", s.cfg.user, "on", ">"+s.cfg.password, "~*", "&*", "+@all",
			"--user", "default", "off")
	case s.cfg.password != "":
		args = append(args, "--requirepass", s.cfg.password)
	}
	return append(args, s.cfg.args...)
}

// start runs the process on port, or on a free port when port is 0 (retrying when another process
// takes the port first).
func (s *Server) start(port int) {
	s.t.Helper()
	attempts := portAttempts
	if port != 0 {
		attempts = 1
	}
	var lastErr error
	for range attempts {
		p := port
		if p == 0 {
			var err error
			if p, err = freePort(); err != nil {
				s.t.Fatalf("redistest: %v", err)
			}
		}
		proc, err := s.run(p)
		if err == nil {
			s.mu.Lock()
			s.port, s.proc = p, proc
			s.mu.Unlock()
			return
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) {
			break
		}
	}
	s.t.Fatalf("redistest: start %s: %v", filepath.Base(s.bin), lastErr)
}

var errAddrInUse = errors.New("address already in use")

// run starts the binary on port and waits for its ready line.
func (s *Server) run(port int) (*process, error) {
	cmd := exec.Command(s.bin, s.args(port)...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = sysProcAttr()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: new(bytes.Buffer), mu: new(sync.Mutex)}
	ready := make(chan struct{})
	go func() {
		// Drain the output for the whole life of the process, so that it never blocks on a full
		// pipe, and keep it for failure messages.
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.log.WriteString(line)
			p.log.WriteByte('\n')
			p.mu.Unlock()
			if !signalled && strings.Contains(line, s.mark) {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = cmd.Wait()
		close(p.done)
	}()
	select {
	case <-ready:
		return p, nil
	case <-p.done:
		out := p.output()
		if strings.Contains(out, "Address already in use") {
			return nil, fmt.Errorf("port %d: %w", port, errAddrInUse)
		}
		return nil, fmt.Errorf("exited before ready: %s\n%s", cmd.ProcessState, out)
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("not ready after %v:\n%s", startTimeout, p.output())
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's host:port on loopback.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port is the server's TCP (or TLS) port.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// URL is redis://[user:password@]127.0.0.1:port, or rediss:// with WithTLS.
func (s *Server) URL() string {
	u := url.URL{Scheme: "redis", Host: s.Addr()}
	if s.cfg.tls {
		u.Scheme = "rediss"
	}
	if s.cfg.password != "" {
		u.User = url.UserPassword(s.cfg.user, s.cfg.password)
	}
	return u.String()
}

// TLSConfig is a client configuration that trusts the server's certificate; nil without WithTLS.
func (s *Server) TLSConfig() *tls.Config {
	if s.ca == nil {
		return nil
	}
	return s.ca.Clone()
}

// Dir is the server's working directory.
func (s *Server) Dir() string { return s.dir }

// Log returns what the server has logged so far.
func (s *Server) Log() string {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return ""
	}
	return p.output()
}

// Client returns a go-redis client for the server (with its credentials and TLS), closed when the
// test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:      s.Addr(),
		Username:  s.cfg.user,
		Password:  s.cfg.password,
		TLSConfig: s.TLSConfig(),
	})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server with SIGKILL and waits for it to exit. It is a no-op when the server is not
// running. Data is lost: the server persists nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Restart kills the server if it is running and starts it again, empty, on the same port with the
// same configuration (so clients reconnect to the same address). Its script cache is empty.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start(s.Port())
}

// Running reports whether the process is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Do runs one command on the server with a fresh connection and returns its reply; it fails the
// test on error. It is meant for set-up and inspection (CONFIG SET, MEMORY USAGE, DEBUG ...).
func (s *Server) Do(ctx context.Context, args ...any) any {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(), Username: s.cfg.user, Password: s.cfg.password, TLSConfig: s.TLSConfig(),
		MaxRetries: -1, PoolSize: 1,
	})
	defer c.Close()
	v, err := c.Do(ctx, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		s.t.Fatalf("redistest: %v on %s: %v", args, s.Addr(), err)
	}
	return v
}
