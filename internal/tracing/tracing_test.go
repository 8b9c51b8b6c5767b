package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestOffIsNil(t *testing.T) {
	tr, err := New(context.Background(), Options{})
	if err != nil || tr != nil {
		t.Fatalf("New without an endpoint = %v, %v; want nil, nil", tr, err)
	}
	if tr.Tracer() != nil || tr.Shutdown(context.Background()) != nil {
		t.Error("a nil Tracing must give no tracer and shut down cleanly")
	}
	for _, r := range []float64{-0.1, 1.5} {
		if _, err := New(context.Background(), Options{Endpoint: "127.0.0.1:4317", Ratio: r}); err == nil {
			t.Errorf("ratio %v accepted", r)
		}
	}
}

// A well-formed traceparent becomes the remote parent; a malformed or absent one leaves the
// context without a span (the spans start their own trace).
func TestParent(t *testing.T) {
	for _, tc := range []struct {
		tp   string
		want bool
	}{
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
		{"", false},
		{"00-not-a-trace-01", false},
		{"00-00000000000000000000000000000000-00f067aa0ba902b7-01", false},
		{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + string(make([]byte, 1<<16)), false},
	} {
		sc := trace.SpanContextFromContext(Parent(context.Background(), tc.tp, "vendor=1"))
		if sc.IsValid() != tc.want || (tc.want && !sc.IsRemote()) {
			t.Errorf("traceparent %.60q: valid %v remote %v, want %v", tc.tp, sc.IsValid(), sc.IsRemote(), tc.want)
		}
	}
}
