package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/llm-ratelimit/llm-ratelimit/internal/authzwire"
	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/decisionlog"
	"github.com/llm-ratelimit/llm-ratelimit/internal/filter"
	"github.com/llm-ratelimit/llm-ratelimit/internal/learn"
	"github.com/llm-ratelimit/llm-ratelimit/internal/reconcile"
	"github.com/llm-ratelimit/llm-ratelimit/internal/tracing"
)

// Options are the deploy-time settings of the service. cmd/ext-authz fills them from flags and
// environment variables; zero values are not defaults, the caller sets every field it needs.
type Options struct {
	// ConfigPath is the limits file, reloaded when it changes; empty: the embedded example.
	ConfigPath string
	// GRPCAddr is the gRPC listen address (host:port; port 0 picks a free one).
	GRPCAddr string
	// AdminAddr is the admin HTTP listen address; empty disables it.
	AdminAddr string
	// RedisURL is the shared store (see bucket.NewClient); empty: the in-memory store.
	RedisURL string
	// RedisPrefix starts every Redis key.
	RedisPrefix string
	// RedisTimeout is the Redis dial, read and write timeout. Must be positive with RedisURL.
	RedisTimeout time.Duration
	// RedisPoolSize is the number of Redis connections per node; 0 keeps go-redis's default
	// (10 per CPU).
	RedisPoolSize int
	// RedisBatch, when positive, coalesces concurrent decisions into Redis pipelines of at most
	// this many script calls (bucket.RedisOptions.MaxBatch); 0 sends each on its own.
	RedisBatch int
	// DrainTimeout is how long in-flight checks may take after ctx ends in Serve.
	DrainTimeout time.Duration
	// MaxRecvBytes is the largest CheckRequest accepted.
	MaxRecvBytes int
	// AdminToken is the bearer token the admin API's changes need (POST /v1/buckets/reset);
	// empty refuses every change with 403. Reads need none.
	AdminToken string
	// Pprof serves /debug/pprof on the admin port.
	Pprof bool
	// TLSCert and TLSKey, when set, serve gRPC over TLS (PEM files, reloaded when they change).
	TLSCert, TLSKey string
	// TLSClientCA, when set with TLSCert, requires and verifies client certificates signed by
	// one of its CAs (mTLS between Envoy and the service).
	TLSClientCA string
	// RedisCA is a PEM bundle of the CAs trusted for rediss:// servers, in place of the system
	// roots; empty: the system roots.
	RedisCA string
	// BreakerFailures and BreakerOpenFor configure the store's circuit breaker (see
	// filter.BreakerOptions); zero keeps its defaults.
	BreakerFailures int
	BreakerOpenFor  time.Duration
	// CheckTimeout is the longest one attempt of a check may take: Envoy's per-try timeout
	// (filter.Options.CheckTimeout); 0: the grpc-timeout Envoy sends alone. A limits file with a
	// max_wait that cannot be honoured within it is rejected, at start-up and on reload.
	CheckTimeout time.Duration
	// PricingSlots is filter.Options.PricingSlots: exact counts of large bodies at once (0:
	// GOMAXPROCS; negative: unbounded, always exact).
	PricingSlots int
	// DecisionLog is the file the decision log writes ("-": stdout; empty: no log), rotated at
	// DecisionLogMaxBytes with DecisionLogKeep old files kept (internal/decisionlog).
	DecisionLog         string
	DecisionLogMaxBytes int64
	DecisionLogKeep     int
	// Tracing is the OpenTelemetry tracing of decisions and settlements (internal/tracing);
	// off with no Endpoint.
	Tracing tracing.Options
}

// store is what the service needs of a bucket store.
type store interface {
	filter.Limiter
	reconcile.Store
	Ping(ctx context.Context) error
}

var (
	_ store = (*bucket.Redis)(nil)
	_ store = (*bucket.Memory)(nil)
	// The admin API peeks and resets through the breaker, which asks its store for these.
	_ filter.Inspector = (*bucket.Redis)(nil)
	_ filter.Inspector = (*bucket.Memory)(nil)
)

// Server is a running service: built by New, run by Serve. Its methods are safe for concurrent
// use.
type Server struct {
	opts     *Options
	tracing  *tracing.Tracing
	log      *zap.Logger
	reg      *prometheus.Registry
	filter   *filter.Filter
	rec      *reconcile.Server
	store    store
	closer   func() error
	grpc     *grpc.Server
	health   *health.Server
	grpcLis  net.Listener
	adminLis net.Listener
	ready    atomic.Bool
	storeUp  prometheus.Gauge
	reloads  *prometheus.CounterVec
	breaker  *filter.Breaker
	// redis is the Redis store; nil with the in-memory store.
	redis *bucket.Redis
	// replicas discovers the live replicas through Redis; nil with the in-memory store.
	replicas *replicas
	// learn is the learned estimate ratios, shared through the store's Redis (else in memory).
	learn *learn.Shared
	// decisions is the decision log; nil when off.
	decisions *decisionlog.Log
}

// learnRefresh is how often the learned ratios are written and read back (internal/learn), two
// pipelines each time, off the request path: a ratio learned behind one replica prices on every
// other within about twice this, which bounds what a sudden change of a provider's counts is
// admitted at its old price (docs/pricing.md).
const learnRefresh = 250 * time.Millisecond

// learnTTL is how long a learned ratio no settlement wrote stays in Redis: its weight is long
// below any sample floor by then.
const learnTTL = 24 * time.Hour

// New loads the configuration, connects the store and binds the listeners. Serve runs the
// service; until then the caller must Close it if it gives up. On an error, New has released
// whatever it opened (store client, gRPC workers, listeners).
func New(o Options, log *zap.Logger) (_ *Server, err error) {
	if o.RedisURL != "" && o.RedisTimeout <= 0 {
		return nil, errors.New("server: the Redis timeout must be positive")
	}
	s := &Server{opts: &o, log: log, reg: prometheus.NewRegistry()}
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	s.storeUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_ratelimit_store_up", Help: "1 while the shared store answers pings."})
	s.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "llm_ratelimit_config_reloads_total", Help: "Configuration reloads by result (ok, rejected)."}, []string{"result"})
	s.reg.MustRegister(s.storeUp, s.reloads)
	defer func() {
		if err != nil {
			s.release() //nolint:errcheck // err is the error to report
		}
	}()

	cfg, err := LoadConfig(o.ConfigPath)
	if err != nil {
		return nil, err
	}
	pol, err := NewPolicy(cfg)
	if err != nil {
		return nil, err
	}

	var fallback filter.Limiter
	var learned learn.Store = learn.NewMemory(nil)
	if o.RedisURL == "" {
		s.store = bucket.NewMemory(bucket.MemoryOptions{})
		s.closer = func() error { return nil }
		log.Info("store: in memory (one replica; set REDIS_URL to share budgets across replicas)")
	} else {
		copts := bucket.ClientOptions{
			DialTimeout: o.RedisTimeout, ReadTimeout: o.RedisTimeout, WriteTimeout: o.RedisTimeout,
			// No retries: a decision whose reply was lost may have been applied, and retrying it
			// could charge twice; a retry would also multiply the timeout during an outage.
			MaxRetries: -1,
			PoolSize:   o.RedisPoolSize,
		}
		if o.RedisCA != "" {
			pool, err := loadPool(o.RedisCA)
			if err != nil {
				return nil, fmt.Errorf("store: %w", err)
			}
			copts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
		}
		client, err := bucket.NewClient(o.RedisURL, copts)
		if err != nil {
			return nil, fmt.Errorf("store: %w", err)
		}
		s.redis = bucket.NewRedis(client, bucket.RedisOptions{Prefix: o.RedisPrefix, MaxBatch: o.RedisBatch})
		s.store = s.redis
		s.closer = client.Close
		learned = learn.NewRedis(client, o.RedisPrefix, learnTTL)
		s.replicas = newReplicas(s.redis, s.reg, log)
		fallback = bucket.NewMemory(bucket.MemoryOptions{})
		log.Info("store: redis", zap.String("prefix", o.RedisPrefix), zap.Duration("timeout", o.RedisTimeout))
	}

	s.learn = learn.NewShared(learned, learn.SharedOptions{Policy: cfg.Learn})
	s.reg.MustRegister(learn.NewCollector(s.learn))

	var frec filter.Recorder
	var rrec reconcile.Recorder
	if o.DecisionLog != "" {
		s.decisions, err = decisionlog.Open(decisionlog.Options{Path: o.DecisionLog, MaxBytes: o.DecisionLogMaxBytes,
			Keep: o.DecisionLogKeep, Registerer: s.reg})
		if err != nil {
			return nil, err
		}
		frec, rrec = s.decisions, s.decisions
		log.Info("decision log", zap.String("path", o.DecisionLog))
	}
	s.tracing, err = tracing.New(context.Background(), o.Tracing)
	if err != nil {
		return nil, err
	}
	if s.tracing != nil {
		log.Info("tracing: OTLP", zap.String("endpoint", o.Tracing.Endpoint), zap.Float64("ratio", o.Tracing.Ratio))
	}
	s.breaker = filter.NewBreaker(s.store, filter.BreakerOptions{
		Failures: o.BreakerFailures, OpenFor: o.BreakerOpenFor, Logger: log, Registerer: s.reg,
	})
	s.filter, err = filter.New(pol, filter.Options{
		Limiter:  s.breaker,
		Fallback: fallback,
		Logger:   log,
		Metrics:  filter.NewMetrics(s.reg),
		// Dial, write and read each have the Redis timeout; a Check waits for the store at most
		// twice that, pool waits, Sentinel look-ups and redirections included.
		StoreTimeout: 2 * o.RedisTimeout,
		CheckTimeout: o.CheckTimeout,
		PricingSlots: o.PricingSlots,
		Recorder:     frec,
		Tracer:       s.tracing.Tracer(),
		Learner:      s.learn,
	})
	if err != nil {
		return nil, err
	}
	if err := cfg.CheckMaxWait(s.filter.HoldLimit(), orDefault(o.ConfigPath, "embedded example")); err != nil {
		return nil, err
	}

	gopts := GRPCOptions(o.MaxRecvBytes)
	if o.TLSCert != "" || o.TLSKey != "" {
		certs, err := newCertReloader(o.TLSCert, o.TLSKey, o.TLSClientCA, log)
		if err != nil {
			return nil, err
		}
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(certs.ServerConfig())))
		log.Info("grpc: TLS", zap.Bool("client_auth", o.TLSClientCA != ""))
	} else if o.TLSClientCA != "" {
		return nil, errors.New("server: a client CA needs a server certificate and key")
	}
	s.grpc = grpc.NewServer(gopts...)
	authzwire.Register(s.grpc, s.filter.CheckBytes)
	// The response path (Envoy's ext_proc filter) on the same port: refunds, lease releases and
	// provider feedback.
	set, err := SettlementOf(cfg)
	if err != nil {
		return nil, err
	}
	s.rec, err = reconcile.New(reconcile.Options{Store: s.store, Logger: log, Metrics: reconcile.NewMetrics(s.reg), Settlement: &set,
		Recorder: rrec, Tracer: s.tracing.Tracer(), Learner: s.learn})
	if err != nil {
		return nil, err
	}
	extprocv3.RegisterExternalProcessorServer(s.grpc, s.rec)
	s.health = health.NewServer()
	s.setServing(false)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)

	if s.grpcLis, err = net.Listen("tcp", o.GRPCAddr); err != nil {
		return nil, fmt.Errorf("grpc listen: %w", err)
	}
	if o.AdminAddr != "" {
		if s.adminLis, err = net.Listen("tcp", o.AdminAddr); err != nil {
			return nil, fmt.Errorf("admin listen: %w", err)
		}
	}
	return s, nil
}

// release closes what New opened so far, the last first: the listeners, the gRPC server (whose
// stream workers run from its creation) and the store's client. It returns the store's error.
func (s *Server) release() error {
	if s.adminLis != nil {
		s.adminLis.Close()
	}
	if s.grpcLis != nil {
		s.grpcLis.Close()
	}
	if s.grpc != nil {
		s.grpc.Stop()
	}
	s.closeDecisions()
	s.closeTracing()
	if s.closer != nil {
		return s.closer()
	}
	return nil
}

// closeTracing exports the spans still pending and stops tracing.
func (s *Server) closeTracing() {
	if err := s.tracing.Shutdown(context.Background()); err != nil {
		s.log.Warn("tracing", zap.Error(err))
	}
}

// closeDecisions writes out and closes the decision log, once the checks are done.
func (s *Server) closeDecisions() {
	if s.decisions == nil {
		return
	}
	if err := s.decisions.Close(); err != nil {
		s.log.Warn("decision log", zap.Error(err))
	}
	if n := s.decisions.Dropped(); n > 0 {
		s.log.Warn("decision log: records dropped (buffer full)", zap.Uint64("dropped", n))
	}
}

// GRPCOptions are the service's gRPC server settings, shared with the load tool's no-op floor
// server so that the floor measures the same gRPC.
func GRPCOptions(maxRecvBytes int) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRecvBytes),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		// Each Check runs on a long-lived worker goroutine whose stack has already grown to
		// what pricing and protobuf need, instead of a new goroutine growing (copying) its
		// stack on every call; gRPC starts a goroutine as before when all are busy.
		grpc.NumStreamWorkers(StreamWorkers),
		grpc.ForceServerCodecV2(authzwire.Codec()),
	}
}

// StreamWorkers is the number of gRPC worker goroutines: about the decisions in flight at once
// on a busy replica (Envoy's concurrent checks), each keeping a stack of a few tens of KiB.
const StreamWorkers = 256

// LoadConfig reads the limits file at path, or the embedded example when path is empty.
func LoadConfig(path string) (*config.Config, error) {
	if path == "" {
		return config.Default()
	}
	return config.Load(path)
}

// GRPCAddr is the address the gRPC listener is bound to.
func (s *Server) GRPCAddr() net.Addr { return s.grpcLis.Addr() }

// Filter is the decision filter the server serves.
func (s *Server) Filter() *filter.Filter { return s.filter }

// Close releases the listeners, the gRPC server and the store of a server that was never
// Served.
func (s *Server) Close() error { return s.release() }

// setServing flips the gRPC health status of the server and of the Authorization service.
func (s *Server) setServing(ok bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ok {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(authv3.Authorization_ServiceDesc.ServiceName, st)
	s.health.SetServingStatus(extprocv3.ExternalProcessor_ServiceDesc.ServiceName, st)
	s.ready.Store(ok)
}

// Serve runs until ctx ends, then drains: health turns NOT_SERVING, in-flight checks get up to
// the drain timeout, and the server stops.
func (s *Server) Serve(ctx context.Context) error {
	defer s.closer() //nolint:errcheck // closing at exit
	s.log.Info("serving", zap.String("grpc", s.grpcLis.Addr().String()), zap.Stringer("admin", addrOf(s.adminLis)),
		zap.String("config", orDefault(s.opts.ConfigPath, "embedded example")))

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
	go s.learn.Run(bg, learnRefresh, func(err error) {
		s.log.Debug("learned ratios: store unreachable, static estimates until it answers", zap.Error(err))
	})
	if s.opts.ConfigPath != "" {
		go s.watchConfig(bg)
	}
	if path := s.filter.Policy().Config.PlansFile; path != "" {
		go s.watchPlans(bg, path)
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.log.Info("draining", zap.Duration("timeout", s.opts.DrainTimeout))
	stopBG()
	s.setServing(false)
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.opts.DrainTimeout):
		s.log.Warn("drain timeout: stopping with checks in flight")
		s.grpc.Stop()
	}
	if admin != nil {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		admin.Shutdown(sctx) //nolint:errcheck // best effort at exit
		cancel()
	}
	if s.replicas != nil {
		s.replicas.leave()
	}
	s.closeDecisions()
	s.closeTracing()
	s.log.Info("stopped")
	return err
}

// watchStore pings the store every second (every 250ms while the breaker is open), unless a
// decision reached it since the last round: the service becomes ready once the store answered,
// and llm_ratelimit_store_up follows it. In failure.mode local it also beats the replica
// heartbeat, whose count divides the limits during an outage. During a later
// outage the service stays ready so that its failure policy (not Envoy's) decides, and a
// successful ping lets the breaker probe at once. On Redis Cluster, an open breaker also reloads
// the slot map: go-redis does so on MOVED, but not when a dead master stops answering and its
// replica takes over.
func (s *Server) watchStore(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	var last time.Time // when the previous round started
	for {
		start := time.Now()
		open := s.breaker.State() != filter.BreakerClosed
		pctx, cancel := context.WithTimeout(ctx, max(s.opts.RedisTimeout*4, 200*time.Millisecond))
		if open && s.redis != nil {
			s.redis.ReloadTopology(pctx)
		}
		var err error
		// A decision that reached the store since the last round says what a ping would: a busy
		// replica sends exactly one command per decision (docs/performance.md).
		if open || !s.ready.Load() || !s.filter.StoreAnsweredSince(last) {
			err = s.store.Ping(pctx)
		}
		// The replica count only divides limits in failure.mode local: no heartbeat otherwise.
		if err == nil && s.replicas != nil && s.filter.CountsReplicas() {
			if n := s.replicas.beat(pctx); n > 0 {
				s.filter.SetReplicas(n)
			}
		}
		cancel()
		last = start
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			s.storeUp.Set(1)
			s.breaker.Healthy()
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
		if open {
			t.Reset(250 * time.Millisecond)
		} else {
			t.Reset(time.Second)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// watchConfig reloads the limits file when it changes; a rejected file leaves the old one.
func (s *Server) watchConfig(ctx context.Context) {
	err := config.Watch(ctx, s.opts.ConfigPath, config.WatchOptions{
		OnLoad: func(c *config.Config) {
			pol, err := NewPolicy(c)
			var set reconcile.Settlement
			if err == nil {
				set, err = SettlementOf(c)
			}
			if err == nil {
				err = c.CheckMaxWait(s.filter.HoldLimit(), s.opts.ConfigPath)
			}
			if err != nil {
				s.reloads.WithLabelValues("rejected").Inc()
				s.log.Error("config reload rejected", zap.Error(err))
				return
			}
			s.filter.SetPolicy(pol)
			s.learn.SetPolicy(c.Learn)
			if err := s.rec.SetSettlement(set); err != nil {
				s.log.Error("config reload: settlement rejected; the previous one stays", zap.Error(err))
			}
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

// watchPlans reloads tenant_plans.file (path) when it changes: the tenants' plans change with
// the next decision, the rest of the policy stays. A rejected file leaves the previous
// assignments; so does a limits file that no longer names path (its own reload read the new one).
func (s *Server) watchPlans(ctx context.Context, path string) {
	err := config.Watch(ctx, path, config.WatchOptions{
		Load: func(data []byte) (*config.Config, error) {
			var out *config.Config
			err := s.filter.UpdatePolicy(func(p *filter.Policy) (*filter.Policy, error) {
				if p.Config.PlansFile != path {
					return nil, fmt.Errorf("config: tenant_plans.file is no longer %s: restart to watch the new file", path)
				}
				c, err := p.Config.WithAssignments(data)
				if err != nil {
					return nil, err
				}
				out = c
				return &filter.Policy{Config: c, Estimator: p.Estimator}, nil
			})
			return out, err
		},
		OnLoad: func(c *config.Config) {
			s.reloads.WithLabelValues("ok").Inc()
			s.log.Info("tenant plans reloaded", zap.String("file", path), zap.Int("tenants", c.Assigned()))
		},
		OnError: func(err error) {
			s.reloads.WithLabelValues("rejected").Inc()
			s.log.Error("tenant plans reload rejected; the previous assignments stay", zap.Error(err))
		},
	})
	if err != nil {
		s.log.Error("tenant plans watch failed: changes need a restart", zap.Error(err))
	}
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))
	s.adminAPI(mux)
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
	if s.opts.Pprof {
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
