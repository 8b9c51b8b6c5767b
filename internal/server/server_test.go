package server

import (
	"net"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"
)

// goroutinesBack waits until no more goroutines run than before (those New started end
// asynchronously once stopped), and fails the test if they do not within a few seconds.
func goroutinesBack(t *testing.T, before int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Errorf("%s: %d goroutines, %d before: New or Close leaked some", what, runtime.NumGoroutine(), before)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// listenable fails the test if addr cannot be bound again: a listener leaked.
func listenable(t *testing.T, addr, what string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Errorf("%s: %s still bound: %v", what, addr, err)
		return
	}
	l.Close()
}

// Every way New can fail after it opened something releases it all, and Close releases a
// server that was never served: no gRPC stream workers, listeners or store left behind.
// Not parallel: it counts the process's goroutines.
func TestNewReleasesOnError(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	base := Options{MaxRecvBytes: 1 << 20, DrainTimeout: time.Second}
	for _, tc := range []struct {
		name string
		set  func(o *Options)
	}{
		{"grpc listen", func(o *Options) { o.GRPCAddr = taken.Addr().String() }},
		{"admin listen", func(o *Options) { o.GRPCAddr, o.AdminAddr = free(), taken.Addr().String() }},
		{"tls files", func(o *Options) { o.GRPCAddr, o.TLSCert, o.TLSKey = free(), "missing.pem", "missing.pem" }},
		{"client CA alone", func(o *Options) { o.GRPCAddr, o.TLSClientCA = free(), "ca.pem" }},
		{"max_wait beyond the attempt", func(o *Options) {
			o.GRPCAddr, o.ConfigPath, o.CheckTimeout = free(), "testdata/max_wait.yaml", 100*time.Millisecond
		}},
	} {
		o := base
		tc.set(&o)
		before := runtime.NumGoroutine()
		if s, err := New(o, zap.NewNop()); err == nil {
			s.Close()
			t.Fatalf("%s: New succeeded", tc.name)
		}
		goroutinesBack(t, before, tc.name)
		if o.GRPCAddr != taken.Addr().String() {
			listenable(t, o.GRPCAddr, tc.name)
		}
	}

	o := base
	o.GRPCAddr, o.AdminAddr = "127.0.0.1:0", "127.0.0.1:0"
	before := runtime.NumGoroutine()
	s, err := New(o, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, adminAddr := s.GRPCAddr().String(), s.adminLis.Addr().String()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	goroutinesBack(t, before, "Close")
	listenable(t, grpcAddr, "Close")
	listenable(t, adminAddr, "Close")
}
