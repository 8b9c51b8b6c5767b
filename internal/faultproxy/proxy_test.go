package faultproxy

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echo starts a loopback echo server.
func echo(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				for {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					c.Write(buf[:n]) //nolint:errcheck // test echo
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(addr string, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout)) //nolint:errcheck // net.Conn
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func TestModes(t *testing.T) {
	t.Parallel()
	p, err := New(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Fatalf("pass: %v", err)
	}
	p.SetLatency(100 * time.Millisecond)
	if d, err := roundTrip(p.Addr(), time.Second); err != nil || d < 200*time.Millisecond {
		t.Errorf("latency: %v %v, want >= 200ms (both ways)", d, err)
	}
	p.SetLatency(0)
	p.SetMode(Refuse)
	if _, err := roundTrip(p.Addr(), time.Second); err == nil {
		t.Error("refuse: round trip succeeded")
	}
	p.SetMode(Blackhole)
	start := time.Now()
	if _, err := roundTrip(p.Addr(), 200*time.Millisecond); err == nil {
		t.Error("blackhole: round trip succeeded")
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Errorf("blackhole: %v after %v, want a timeout", err, time.Since(start))
	}
	p.SetMode(Pass)
	if _, err := roundTrip(p.Addr(), time.Second); err != nil {
		t.Fatalf("pass again: %v", err)
	}
	// Every connection is closed once its client is gone.
	deadline := time.Now().Add(2 * time.Second)
	for p.Open() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.Open(); n != 0 {
		t.Errorf("%d connections still open", n)
	}
}
