package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
)

// serveOptions are the deploy-time settings: flags, with environment variables as defaults.
type serveOptions struct {
	configPath   string
	grpcAddr     string
	adminAddr    string
	redisURL     string
	redisPrefix  string
	redisTimeout time.Duration
	logLevel     string
	drainTimeout time.Duration
	maxRecvBytes int
	pprof        bool
}

func parseServe(args []string, stderr io.Writer) (*serveOptions, error) {
	o := &serveOptions{}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.configPath, "config", envOr("CONFIG", ""), "limits file (YAML), reloaded when it changes; default: the embedded example (env CONFIG)")
	fs.StringVar(&o.grpcAddr, "grpc-addr", envOr("GRPC_ADDR", "127.0.0.1:9001"), "gRPC listen address for Envoy (env GRPC_ADDR; use :9001 in a container)")
	fs.StringVar(&o.adminAddr, "admin-addr", envOr("ADMIN_ADDR", "127.0.0.1:9090"), "admin HTTP listen address: /metrics /healthz /readyz (env ADMIN_ADDR; empty disables)")
	fs.StringVar(&o.redisURL, "redis-url", envOr("REDIS_URL", ""), "shared store: redis://, rediss://, Sentinel or Cluster URL; empty: in-memory store, one replica (env REDIS_URL)")
	fs.StringVar(&o.redisPrefix, "redis-prefix", envOr("REDIS_PREFIX", "llmrl:"), "prefix of every Redis key (env REDIS_PREFIX)")
	fs.DurationVar(&o.redisTimeout, "redis-timeout", 50*time.Millisecond, "Redis dial, read and write timeout; keep it well under Envoy's ext_authz timeout")
	fs.StringVar(&o.logLevel, "log-level", envOr("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL); debug logs one line per decision")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 10*time.Second, "on SIGTERM, how long in-flight checks may take before the server stops")
	fs.IntVar(&o.maxRecvBytes, "max-recv-bytes", config.DefaultMaxRecvBytes, "largest CheckRequest accepted (keep it above Envoy's max_request_bytes plus headers)")
	fs.BoolVar(&o.pprof, "pprof", false, "serve /debug/pprof on the admin port")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if o.redisTimeout <= 0 {
		return nil, errors.New("serve: -redis-timeout must be positive")
	}
	if o.maxRecvBytes < 64<<10 {
		return nil, errors.New("serve: -max-recv-bytes must be at least 65536")
	}
	return o, nil
}

func newLogger(level string, w io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), lvl)
	return zap.New(core), nil
}

// store is what the service needs of a bucket store.
type store interface {
	filter.Limiter
	Ping(ctx context.Context) error
}

var (
	_ store = (*bucket.Redis)(nil)
	_ store = (*bucket.Memory)(nil)
)

// server is a running service: built by newServer, run by Serve.
type server struct {
	opts     *serveOptions
	log      *zap.Logger
	reg      *prometheus.Registry
	filter   *filter.Filter
	store    store
	closer   func() error
	grpc     *grpc.Server
	health   *health.Server
	grpcLis  net.Listener
	adminLis net.Listener
	ready    atomic.Bool
	storeUp  prometheus.Gauge
	reloads  *prometheus.CounterVec
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(o.logLevel, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr
	s, err := newServer(o, log)
	if err != nil {
		log.Error("start-up failed", zap.Error(err))
		return err
	}
	return s.Serve(ctx)
}

// newServer loads the configuration, connects the store and binds the listeners.
func newServer(o *serveOptions, log *zap.Logger) (*server, error) {
	s := &server{opts: o, log: log, reg: prometheus.NewRegistry()}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.storeUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_ratelimit_store_up", Help: "1 while the shared store answers pings."})
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_config_reloads_total", Help: "Configuration reloads by result (ok, rejected)."}, []string{"result"})
	s.reg.MustRegister(s.storeUp, s.reloads)

	cfg, err := loadConfig(o.configPath)
	if err != nil {
		return nil, err
	}
	pol, err := newPolicy(cfg)
	if err != nil {
		return nil, err
	}

	var fallback filter.Limiter
	if o.redisURL == "" {
		s.store = bucket.NewMemory(bucket.MemoryOptions{})
		s.closer = func() error { return nil }
		log.Info("store: in memory (one replica; set REDIS_URL to share budgets across replicas)")
	} else {
		client, err := bucket.NewClient(o.redisURL, bucket.ClientOptions{
			DialTimeout: o.redisTimeout, ReadTimeout: o.redisTimeout, WriteTimeout: o.redisTimeout,
			// No retries: a decision whose reply was lost may have been applied, and retrying it
			// could charge twice; a retry would also multiply the timeout during an outage.
			MaxRetries: -1,
		})
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		s.store = bucket.NewRedis(client, bucket.RedisOptions{Prefix: o.redisPrefix})
		s.closer = client.Close
		fallback = bucket.NewMemory(bucket.MemoryOptions{})
		log.Info("store: redis", zap.String("prefix", o.redisPrefix), zap.Duration("timeout", o.redisTimeout))
	}

	s.filter, err = filter.New(pol, filter.Options{
		Limiter:  s.store,
		Fallback: fallback,
		Logger:   log,
		Metrics:  filter.NewMetrics(s.reg),
	})
	if err != nil {
		return nil, err
	}

	s.grpc = grpc.NewServer(
		grpc.MaxRecvMsgSize(o.maxRecvBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	authv3.RegisterAuthorizationServer(s.grpc, s.filter)
	s.health = health.NewServer()
	s.setServing(false)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	if s.grpcLis, err = net.Listen("tcp", o.grpcAddr); err != nil {
		s.closer()
		return nil, fmt.Errorf("grpc listen: %w", err)
	}
	if o.adminAddr != "" {
		if s.adminLis, err = net.Listen("tcp", o.adminAddr); err != nil {
			s.grpcLis.Close()
			s.closer()
			return nil, fmt.Errorf("admin listen: %w", err)
		}
	}
	return s, nil
}

func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default()
	}
	return config.Load(path)
}

// setServing flips the gRPC health status of the server and of the Authorization service.
func (s *server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, st)
	s.ready.Store(ok)
}

// Serve runs until ctx ends, then drains: health turns NOT_SERVING, in-flight checks get up to
// the drain timeout, and the server stops.
func (s *server) Serve(ctx context.Context) error {
	defer s.closer() //nolint:errcheck // closing at exit
	s.log.Info("serving", zap.String("grpc", s.grpcLis.Addr().String()), zap.Stringer("admin", addrOf(s.adminLis)),
		zap.String("config", orDefault(s.opts.configPath, "embedded example")))

	errc := make(chan error, 2)
	go func() { errc <- s.grpc.Serve(s.grpcLis) }()
	var admin *http.Server
	if s.adminLis != nil {
		admin = &http.Server{Handler: s.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := admin.Serve(s.adminLis); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("admin: %w", err)
			}
		}()
	}
	bg, stopBG := context.WithCancel(context.Background())
	defer stopBG()
	go s.watchStore(bg)
	if s.opts.configPath != "" {
		go s.watchConfig(bg)
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.log.Info("draining", zap.Duration("timeout", s.opts.drainTimeout))
	stopBG()
	s.setServing(false)
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.opts.drainTimeout):
		s.log.Warn("drain timeout: stopping with checks in flight")
		s.grpc.Stop()
	}
	if admin != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		admin.Shutdown(sctx) //nolint:errcheck // best effort at exit
		cancel()
	}
	s.log.Info("stopped")
	return err
}

// watchStore pings the store every second: the service becomes ready once the store answered,
// and llm_ratelimit_store_up follows it. During a later outage the service stays ready so that
// its failure policy (not Envoy's) decides.
func (s *server) watchStore(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, max(s.opts.redisTimeout*4, 200*time.Millisecond))
		err := s.store.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			s.storeUp.Set(1)
			if !s.ready.Load() {
				s.setServing(true)
				s.log.Info("ready")
			}
		} else {
			s.storeUp.Set(0)
			if !s.ready.Load() {
				s.log.Warn("store not reachable yet", zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchConfig reloads the limits file when it changes; a rejected file leaves the old one.
func (s *server) watchConfig(ctx context.Context) {
	err := config.Watch(ctx, s.opts.configPath, config.WatchOptions{
		OnLoad: func(c *config.Config) {
			pol, err := newPolicy(c)
			if err != nil {
				s.reloads.WithLabelValues("rejected").Inc()
				s.log.Error("config reload rejected", zap.Error(err))
				return
			}
			s.filter.SetPolicy(pol)
			s.reloads.WithLabelValues("ok").Inc()
			s.log.Info("config reloaded", zap.Int("rules", len(c.Rules)))
		},
		OnError: func(err error) {
			s.reloads.WithLabelValues("rejected").Inc()
			s.log.Error("config reload rejected; the previous configuration stays", zap.Error(err))
		},
	})
	if err != nil {
		s.log.Error("config watch failed: changes need a restart", zap.Error(err))
	}
}

func (s *server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok\n") //nolint:errcheck // best effort
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n") //nolint:errcheck // best effort
	})
	if s.opts.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

func addrOf(l net.Listener) fmt.Stringer {
	if l == nil {
		return stringer("disabled")
	}
	return l.Addr()
}

type stringer string

func (s stringer) String() string { return string(s) }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
