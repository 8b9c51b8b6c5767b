package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

func sockAddr(ip string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

// Outcomes of one call.
const (
	outAllowed     = iota
	outDenied      // 429
	outOtherDenied // any other denial (413, 503, 500)
	outError       // the RPC or the Redis call failed
	numOutcomes
)

// caller makes one call: a Check, or a bare EVALSHA.
type caller func(ctx context.Context, r *rawRequest) int

// rawCodec sends a rawRequest's bytes as they are and decodes replies as protobuf; its name is
// "proto", so the server sees an ordinary protobuf call.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	if r, ok := v.(*rawRequest); ok {
		return r.data, nil
	}
	return proto.Marshal(v.(proto.Message))
}
func (rawCodec) Unmarshal(data []byte, v any) error {
	if o, ok := v.(*outcome); ok {
		return o.parse(data)
	}
	return proto.Unmarshal(data, v.(proto.Message))
}
func (rawCodec) Name() string { return "proto" }

var _ encoding.Codec = rawCodec{}

// checkCaller sends Checks over conns (round robin by worker) and classifies the answers.
func checkCaller(conns []*grpc.ClientConn, timeout time.Duration) caller {
	opt := grpc.ForceCodec(rawCodec{})
	var mu sync.Mutex
	next := 0
	pick := func() *grpc.ClientConn {
		mu.Lock()
		defer mu.Unlock()
		next++
		return conns[next%len(conns)]
	}
	return func(ctx context.Context, r *rawRequest) int {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var o outcome
		if err := pick().Invoke(ctx, "/envoy.service.auth.v3.Authorization/Check", r, &o, opt); err != nil {
			return outError
		}
		switch {
		case o.status == 0:
			return outAllowed
		case o.httpStatus == 429:
			return outDenied
		}
		return outOtherDenied
	}
}

// outcome is what the tool reads of a CheckResponse: status.code and
// denied_response.status.code. Reading only these (instead of decoding the whole answer, its
// dynamic metadata included) keeps the tool's CPU, which competes with the server's on one
// machine, the same for the floor's tiny answers and the service's rich ones.
type outcome struct {
	status, httpStatus int64
}

// parse reads an encoded envoy.service.auth.v3.CheckResponse.
func (o *outcome) parse(b []byte) error {
	status, err := field(b, 1) // google.rpc.Status status = 1
	if err != nil {
		return err
	}
	if o.status, err = varintField(status, 1); err != nil { // int32 code = 1
		return err
	}
	denied, err := field(b, 2) // DeniedHttpResponse denied_response = 2
	if err != nil {
		return err
	}
	hs, err := field(denied, 1) // type.v3.HttpStatus status = 1
	if err != nil {
		return err
	}
	o.httpStatus, err = varintField(hs, 1) // StatusCode code = 1
	return err
}

// field returns the last length-delimited field num of message b (nil when absent).
func field(b []byte, num protowire.Number) ([]byte, error) {
	var out []byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil, protowire.ParseError(l)
			}
			out, b = v, b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return out, nil
}

// varintField returns the last varint field num of message b (0 when absent).
func varintField(b []byte, num protowire.Number) (int64, error) {
	var out uint64
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
		if n == num && typ == protowire.VarintType {
			v, l := protowire.ConsumeVarint(b)
			if l < 0 {
				return 0, protowire.ParseError(l)
			}
			out, b = v, b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return 0, protowire.ParseError(l)
		}
		b = b[l:]
	}
	return int64(out), nil
}

// dial opens n client connections to addr (Envoy keeps one per worker thread).
func dial(addr string, n int) ([]*grpc.ClientConn, error) {
	var conns []*grpc.ClientConn
	for range n {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
		if err != nil {
			return nil, err
		}
		c.Connect()
		conns = append(conns, c)
	}
	return conns, nil
}

// load is how a run drives its target.
type load struct {
	concurrency int
	rate        float64 // arrivals per second; 0: closed loop, each worker sends back to back
	duration    time.Duration
	warmup      time.Duration
}

// result is one run's figures.
type result struct {
	Name        string        `json:"name"`
	Concurrency int           `json:"concurrency"`
	Rate        float64       `json:"rate,omitempty"`
	Duration    time.Duration `json:"duration_ns"`
	Requests    int           `json:"requests"`
	Throughput  float64       `json:"throughput_per_s"`
	P50         time.Duration `json:"p50_ns"`
	P90         time.Duration `json:"p90_ns"`
	P99         time.Duration `json:"p99_ns"`
	Max         time.Duration `json:"max_ns"`
	Allowed     int           `json:"allowed"`
	Denied      int           `json:"denied_429"`
	OtherDenied int           `json:"denied_other"`
	Errors      int           `json:"errors"`
	Dropped     int           `json:"dropped,omitempty"`
	LoadAvg     [2]float64    `json:"loadavg_1m_min_max"`
}

// warm drives call with reqs for l.warmup, unmeasured: connections, caches, the script cache
// and the Go heap settle.
func warm(ctx context.Context, l load, reqs []*rawRequest, call caller) {
	if l.warmup > 0 {
		wctx, cancel := context.WithTimeout(ctx, l.warmup)
		drive(wctx, l, reqs, call)
		cancel()
	}
}

// series accumulates the slices of one target's run: interleaving short slices of every
// target (see run) exposes them to the same load from the rest of the machine.
type series struct {
	name    string
	call    caller
	lats    []time.Duration
	outs    [numOutcomes]int
	dropped int
	elapsed time.Duration
	load    [2]float64 // lowest and highest 1-minute load average seen
}

// slice drives s.call with reqs for d and adds the figures to s.
func (s *series) slice(ctx context.Context, l load, reqs []*rawRequest, d time.Duration) {
	la := loadAvg()
	if s.elapsed == 0 || la < s.load[0] {
		s.load[0] = la
	}
	s.load[1] = max(s.load[1], la)
	mctx, cancel := context.WithTimeout(ctx, d)
	start := time.Now()
	lats, outs, dropped := drive(mctx, l, reqs, s.call)
	s.elapsed += time.Since(start)
	cancel()
	s.lats = append(s.lats, lats...)
	for i := range outs {
		s.outs[i] += outs[i]
	}
	s.dropped += dropped
	s.load[1] = max(s.load[1], loadAvg())
}

// result returns the figures of every slice together.
func (s *series) result(l load) result {
	res := result{Name: s.name, Concurrency: l.concurrency, Rate: l.rate, Duration: s.elapsed, LoadAvg: s.load}
	res.Requests = len(s.lats)
	if s.elapsed > 0 {
		res.Throughput = float64(len(s.lats)) / s.elapsed.Seconds()
	}
	res.Allowed, res.Denied, res.OtherDenied, res.Errors = s.outs[outAllowed], s.outs[outDenied], s.outs[outOtherDenied], s.outs[outError]
	res.Dropped = s.dropped
	slices.Sort(s.lats)
	res.P50, res.P90, res.P99 = quantile(s.lats, 0.50), quantile(s.lats, 0.90), quantile(s.lats, 0.99)
	if len(s.lats) > 0 {
		res.Max = s.lats[len(s.lats)-1]
	}
	return res
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(math.Ceil(q*float64(len(sorted))))-1)]
}

// drive runs the workers until ctx ends and collects every completed call's latency (calls cut
// short by the end of the run are not counted). In closed loop, a latency is from send to
// answer; at a fixed rate it is from the scheduled arrival, so that queueing in the tool counts
// (no coordinated omission), and arrivals that find the queue full are dropped and counted.
func drive(ctx context.Context, l load, reqs []*rawRequest, call caller) ([]time.Duration, [numOutcomes]int, int) {
	type worker struct {
		lats []time.Duration
		outs [numOutcomes]int
	}
	ws := make([]worker, l.concurrency)
	var arrivals chan time.Time
	dropped := 0
	if l.rate > 0 {
		arrivals = make(chan time.Time, max(int(l.rate), 1024))
	}
	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &ws[i]
			k := i * 7919
			for {
				var sent time.Time
				if arrivals != nil {
					select {
					case <-ctx.Done():
						return
					case sent = <-arrivals:
					}
				} else {
					if ctx.Err() != nil {
						return
					}
					sent = time.Now()
				}
				k++
				out := call(context.WithoutCancel(ctx), reqs[k%len(reqs)])
				w.lats = append(w.lats, time.Since(sent))
				w.outs[out]++
			}
		}()
	}
	if arrivals != nil {
		// Every millisecond, schedule the arrivals that are due.
		start := time.Now()
		interval := time.Duration(float64(time.Second) / l.rate)
		tick := time.NewTicker(time.Millisecond)
		i := 0
	gen:
		for {
			for now := time.Now(); ; i++ {
				at := start.Add(time.Duration(i) * interval)
				if at.After(now) {
					break
				}
				select {
				case arrivals <- at:
				default:
					dropped++
				}
			}
			select {
			case <-ctx.Done():
				break gen
			case <-tick.C:
			}
		}
		tick.Stop()
	}
	wg.Wait()
	var lats []time.Duration
	var outs [numOutcomes]int
	for i := range ws {
		lats = append(lats, ws[i].lats...)
		for j := range outs {
			outs[j] += ws[i].outs[j]
		}
	}
	return lats, outs, dropped
}

func (r result) String() string {
	return fmt.Sprintf("%s: %d requests, %.0f/s, p50 %v p99 %v", r.Name, r.Requests, r.Throughput, r.P50, r.P99)
}
