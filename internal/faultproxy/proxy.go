package faultproxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int32

const (
	// Pass forwards traffic (after the configured latency).
	Pass Mode = iota
	// Refuse closes every new connection at once (a server that is down); existing ones are
	// dropped when the mode is set.
	Refuse
	// Blackhole accepts connections and reads them, but forwards nothing and answers nothing (a
	// partitioned or frozen server): clients see timeouts, not errors.
	Blackhole
)

// Proxy forwards loopback TCP connections to a target. Its methods are safe for concurrent use.
type Proxy struct {
	target  string
	lis     net.Listener
	mode    atomic.Int32
	latency atomic.Int64 // nanoseconds added before each chunk is forwarded, both ways

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	total  atomic.Int64
}

// New listens on a free loopback port and forwards to target (host:port).
func New(target string) (*Proxy, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, lis: lis, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.lis.Addr().String() }

// SetTarget changes where new connections go (existing ones are left alone).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
}

// SetLatency delays every forwarded chunk by d, both ways.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// SetMode switches the mode. Refuse and Blackhole drop the connections already open, so that
// the fault applies to every connection at once; leaving Blackhole drops the connections it
// swallowed, which were never connected upstream.
func (p *Proxy) SetMode(m Mode) {
	old := Mode(p.mode.Swap(int32(m)))
	if m != Pass || old == Blackhole {
		p.DropAll()
	}
}

// DropAll closes every open connection (clients see a reset).
func (p *Proxy) DropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Open is the number of connections open now, counting both sides.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted is the number of client connections accepted so far.
func (p *Proxy) Accepted() int64 { return p.total.Load() }

// Close stops listening, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	err := p.lis.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return
		}
		p.total.Add(1)
		if Mode(p.mode.Load()) == Refuse || !p.track(c) {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *Proxy) handle(c net.Conn) {
	defer p.wg.Done()
	defer p.untrack(c)
	if Mode(p.mode.Load()) == Blackhole {
		io.Copy(io.Discard, c) //nolint:errcheck // until the client or DropAll closes it
		return
	}
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	up, err := net.DialTimeout("tcp", target, time.Second)
	if err != nil {
		return
	}
	if !p.track(up) {
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { p.pipe(up, c); done <- struct{}{} }()
	go func() { p.pipe(c, up); done <- struct{}{} }()
	<-done
	// One side ended: end the other.
	c.Close()
	up.Close()
	<-done
}

// pipe copies src to dst chunk by chunk, applying the latency and the mode to every chunk.
func (p *Proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
			}
			if Mode(p.mode.Load()) != Pass {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
