package tracing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of the service's spans.
const Name = "github.com/llm-ratelimit/llm-ratelimit"

// Options configures tracing.
type Options struct {
	// Endpoint is the OTLP/gRPC collector (host:port). Empty: tracing is off.
	Endpoint string
	// Insecure speaks plain gRPC to the collector (a sidecar or a node-local agent); otherwise
	// TLS with the system's roots.
	Insecure bool
	// Ratio is the share of traces sampled that no parent decided (0 to 1); a request whose
	// traceparent says sampled is always traced, one that says not sampled never. Default 1.
	Ratio float64
	// Service is the service.name resource attribute. Default "llm-ratelimit".
	Service string
	// Exporter, when set, replaces the OTLP exporter (tests: the SDK's in-memory exporter),
	// spans exported synchronously.
	Exporter sdktrace.SpanExporter
}

// Tracing is a running tracer provider.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// New starts tracing as opts says; nil (and no error) when it is off.
func New(ctx context.Context, opts Options) (*Tracing, error) {
	if opts.Endpoint == "" && opts.Exporter == nil {
		return nil, nil
	}
	if opts.Ratio < 0 || opts.Ratio > 1 {
		return nil, fmt.Errorf("tracing: ratio %v must be between 0 and 1", opts.Ratio)
	}
	if opts.Ratio == 0 {
		opts.Ratio = 1
	}
	if opts.Service == "" {
		opts.Service = "llm-ratelimit"
	}
	var export sdktrace.TracerProviderOption
	if opts.Exporter != nil {
		export = sdktrace.WithSyncer(opts.Exporter)
	} else {
		eo := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(opts.Endpoint)}
		if opts.Insecure {
			eo = append(eo, otlptracegrpc.WithInsecure())
		}
		// The exporter connects lazily and retries on its own: a collector that is not up yet
		// costs spans, never the start-up or a decision.
		exp, err := otlptracegrpc.New(ctx, eo...)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter to %s: %w", opts.Endpoint, err)
		}
		export = sdktrace.WithBatcher(exp)
	}
	res := resource.NewSchemaless(semconv.ServiceName(opts.Service))
	tp := sdktrace.NewTracerProvider(export, sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.Ratio))))
	return &Tracing{provider: tp}, nil
}

// Tracer is the service's tracer; nil when t is (tracing off).
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.provider.Tracer(Name)
}

// Shutdown exports what is pending, within ctx (at most 5 s), and stops.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := t.provider.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("tracing: spans still pending at shutdown: %w", err)
	}
	return err
}

// Parent is ctx carrying the remote span of a W3C traceparent (and its tracestate), as Envoy
// passes the application's: the parent of the spans started from it. A missing or malformed
// traceparent leaves ctx as it is (the spans start a trace of their own).
func Parent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier{traceparent, tracestate})
}

// carrier is the two headers of the W3C trace context, without a map.
type carrier struct{ parent, state string }

func (c carrier) Get(key string) string {
	switch key {
	case "traceparent":
		return c.parent
	case "tracestate":
		return c.state
	}
	return ""
}

func (c carrier) Set(string, string) {}

func (c carrier) Keys() []string { return []string{"traceparent", "tracestate"} }
