package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/server"
)

// parseServe reads the deploy-time settings: flags, with environment variables as defaults.
func parseServe(args []string, stderr io.Writer) (*server.Options, string, error) {
	o := &server.Options{}
	var logLevel string
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.ConfigPath, "config", envOr("CONFIG", ""), "limits file (YAML), reloaded when it changes; default: the embedded example (env CONFIG)")
	fs.StringVar(&o.GRPCAddr, "grpc-addr", envOr("GRPC_ADDR", "127.0.0.1:9001"), "gRPC listen address for Envoy (env GRPC_ADDR; use :9001 in a container)")
	fs.StringVar(&o.AdminAddr, "admin-addr", envOr("ADMIN_ADDR", "127.0.0.1:9090"), "admin HTTP listen address: /metrics /healthz /readyz and the admin API /v1/ (env ADMIN_ADDR; empty disables)")
	fs.StringVar(&o.RedisURL, "redis-url", envOr("REDIS_URL", ""), "shared store: redis://, rediss://, Sentinel or Cluster URL; empty: in-memory store, one replica (env REDIS_URL)")
	fs.StringVar(&o.RedisPrefix, "redis-prefix", envOr("REDIS_PREFIX", "llmrl:"), "prefix of every Redis key (env REDIS_PREFIX)")
	fs.DurationVar(&o.RedisTimeout, "redis-timeout", 50*time.Millisecond, "Redis dial, read and write timeout; keep it well under Envoy's ext_authz timeout")
	fs.IntVar(&o.RedisBatch, "redis-batch", 32, "coalesce concurrent decisions into Redis pipelines of at most this many decisions (one FCALL per provider, each decision atomic on its own); 0: one round trip and one FCALL per decision")
	fs.StringVar(&logLevel, "log-level", envOr("LOG_LEVEL", "info"), "debug, info, warn or error (env LOG_LEVEL); debug logs one line per decision")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", 10*time.Second, "on SIGTERM, how long in-flight checks may take before the server stops")
	fs.IntVar(&o.MaxRecvBytes, "max-recv-bytes", config.DefaultMaxRecvBytes, "largest CheckRequest accepted (keep it above Envoy's max_request_bytes plus headers)")
	fs.BoolVar(&o.Pprof, "pprof", false, "serve /debug/pprof on the admin port")
	tokenFile := fs.String("admin-token-file", "", "file holding the bearer token the admin API's changes need (POST /v1/buckets/reset); or env ADMIN_TOKEN; neither: changes are refused")
	fs.StringVar(&o.TLSCert, "tls-cert", envOr("TLS_CERT", ""), "PEM certificate of the gRPC port; with -tls-key serves TLS, reloaded when the files change (env TLS_CERT)")
	fs.StringVar(&o.TLSKey, "tls-key", envOr("TLS_KEY", ""), "PEM private key of -tls-cert (env TLS_KEY)")
	fs.StringVar(&o.TLSClientCA, "tls-client-ca", envOr("TLS_CLIENT_CA", ""), "PEM CA bundle: require client certificates signed by it (mTLS; env TLS_CLIENT_CA)")
	fs.StringVar(&o.RedisCA, "redis-ca", envOr("REDIS_CA", ""), "PEM CA bundle trusted for rediss:// in place of the system roots (env REDIS_CA)")
	fs.IntVar(&o.BreakerFailures, "breaker-failures", 3, "store failures in a row that open the circuit breaker (the failure policy then applies without calling the store)")
	fs.DurationVar(&o.BreakerOpenFor, "breaker-open-for", 500*time.Millisecond, "how long the breaker stays open before one request probes the store again")
	fs.DurationVar(&o.CheckTimeout, "check-timeout", time.Second, "the longest one check attempt may take: Envoy's per-try timeout (the ext_authz retry_back_off.max_interval), or its ext_authz timeout if lower; holds and pricing end within it, and a max_wait it cannot honour is rejected; 0: Envoy's grpc-timeout alone")
	fs.IntVar(&o.PricingSlots, "pricing-slots", 0, "exact counts of large bodies (64 KiB or more) at once; a large body finding none free is priced at its upper bound at once; 0: GOMAXPROCS; -1: unbounded, every body counted exactly however long it takes")
	fs.StringVar(&o.DecisionLog, "decision-log", envOr("DECISION_LOG", ""), "write one JSON line per decision and per settlement to this file (- for stdout), for ext-authz replay; never a prompt, a body or a credential; empty: off (env DECISION_LOG)")
	fs.Int64Var(&o.DecisionLogMaxBytes, "decision-log-max-bytes", 100<<20, "rotate the decision log when it reaches this size")
	fs.IntVar(&o.DecisionLogKeep, "decision-log-keep", 5, "rotated decision log files kept (FILE.1 the newest); 0: none")
	fs.StringVar(&o.Tracing.Endpoint, "otlp-endpoint", envOr("OTEL_EXPORTER_OTLP_ENDPOINT", ""), "trace decisions and settlements to this OTLP/gRPC collector (host:port, or http://host:port for plain gRPC); empty: no tracing (env OTEL_EXPORTER_OTLP_ENDPOINT)")
	fs.BoolVar(&o.Tracing.Insecure, "otlp-insecure", false, "speak plain gRPC to the OTLP collector (a sidecar or node agent) rather than TLS")
	fs.Float64Var(&o.Tracing.Ratio, "trace-ratio", 1, "share of traces sampled that the caller's traceparent did not decide (0 to 1)")
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	var err error
	if o.Tracing.Endpoint, o.Tracing.Insecure, err = otlpEndpoint(o.Tracing.Endpoint, o.Tracing.Insecure); err != nil {
		return nil, "", err
	}
	if o.Tracing.Ratio < 0 || o.Tracing.Ratio > 1 {
		return nil, "", fmt.Errorf("serve: -trace-ratio %v must be between 0 and 1", o.Tracing.Ratio)
	}
	if o.Tracing.Endpoint != "" && o.Tracing.Ratio == 0 {
		return nil, "", errors.New("serve: -trace-ratio 0 samples nothing: leave -otlp-endpoint empty to turn tracing off")
	}
	if o.AdminToken, err = adminToken(*tokenFile, os.Getenv("ADMIN_TOKEN")); err != nil {
		return nil, "", err
	}
	if fs.NArg() > 0 {
		return nil, "", fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if o.RedisTimeout <= 0 {
		return nil, "", errors.New("serve: -redis-timeout must be positive")
	}
	if o.RedisBatch < 0 {
		return nil, "", errors.New("serve: -redis-batch must not be negative")
	}
	if o.BreakerFailures < 1 || o.BreakerOpenFor <= 0 {
		return nil, "", errors.New("serve: -breaker-failures must be at least 1 and -breaker-open-for positive")
	}
	if o.CheckTimeout < 0 {
		return nil, "", errors.New("serve: -check-timeout must not be negative")
	}
	if o.MaxRecvBytes < 64<<10 {
		return nil, "", errors.New("serve: -max-recv-bytes must be at least 65536")
	}
	return o, logLevel, nil
}

// otlpEndpoint is the collector's host:port of an -otlp-endpoint given as host:port or as a URL
// (OTEL_EXPORTER_OTLP_ENDPOINT's form): http:// is plain gRPC, https:// TLS.
func otlpEndpoint(v string, insecure bool) (string, bool, error) {
	if v == "" || !strings.Contains(v, "://") {
		return v, insecure, nil
	}
	u, err := url.Parse(v)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false, fmt.Errorf("serve: -otlp-endpoint %q: want host:port, http://host:port or https://host:port", v)
	}
	return u.Host, insecure || u.Scheme == "http", nil
}

// adminToken is the admin API's token: the content of file, surrounding white space removed, or
// env (ADMIN_TOKEN); "" when neither is set. Both, or an empty file, is an error. The token never
// appears in a message.
func adminToken(file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	if env != "" {
		return "", errors.New("serve: set -admin-token-file or ADMIN_TOKEN, not both")
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("serve: -admin-token-file: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("serve: -admin-token-file %s is empty", file)
	}
	return token, nil
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

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	o, logLevel, err := parseServe(args, stderr)
	if err != nil {
		return err
	}
	log, err := newLogger(logLevel, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr
	s, err := server.New(*o, log)
	if err != nil {
		log.Error("start-up failed", zap.Error(err))
		return err
	}
	return s.Serve(ctx)
}
