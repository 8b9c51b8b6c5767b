package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redisstats"
	"github.com/llm-ratelimit/llm-ratelimit/internal/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "loadgen:", err)
		}
		os.Exit(2)
	}
}

type options struct {
	addr, store, redisURL, configPath  string
	decisionLog                        string
	load                               load
	rounds                             int
	body, models                       string
	tenants, conns, distinct           int
	conversations                      int
	deny                               float64
	floors                             string
	timeout, redisTimeout              time.Duration
	redisPool, redisBatch              int
	jsonPath, cpuProfile, floorProfile string
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "", "a running ext-authz gRPC address; default: start the service in process")
	fs.StringVar(&o.store, "store", "redis", "store of the in-process service: redis or memory")
	fs.StringVar(&o.redisURL, "redis-url", "", "Redis of the service and of the evalsha floor; default: start redis-server from PATH")
	fs.StringVar(&o.configPath, "config", "", "limits file of the in-process service; default: the embedded bench.yaml (2 buckets per request)")
	fs.StringVar(&o.decisionLog, "decision-log", "", "the in-process service's decision log (as ext-authz -decision-log); empty: off")
	fs.IntVar(&o.load.concurrency, "c", 64, "concurrent requests (workers)")
	fs.Float64Var(&o.load.rate, "rate", 0, "fixed arrival rate per second (open loop, at most -c in flight); 0: closed loop")
	fs.DurationVar(&o.load.duration, "d", 10*time.Second, "measured duration of each run")
	fs.IntVar(&o.rounds, "rounds", 5, "slices of -d per run; the floors and the service take turns, one slice each per round")
	fs.DurationVar(&o.load.warmup, "warmup", 2*time.Second, "unmeasured warm-up before each run")
	fs.StringVar(&o.body, "body", "1k", "chat body sizes, mixed uniformly: e.g. 1k or 1k,8k,64k")
	fs.StringVar(&o.models, "models", "gpt-4o,gpt-4o-mini,gpt-4.1-mini,claude-sonnet-4-5", "models, mixed uniformly (claude-* are Anthropic messages)")
	fs.IntVar(&o.tenants, "tenants", 100, "tenants that are never limited")
	fs.Float64Var(&o.deny, "deny", 0.05, "share of requests from tenants whose budget is spent (denied with 429)")
	fs.IntVar(&o.distinct, "distinct", 1024, "distinct requests generated and cycled through")
	fs.IntVar(&o.conversations, "conversations", 0, "0: each body is one new user message of prose; N: bodies are turns of N ongoing conversations (a system prompt and earlier messages resent, a new last message)")
	fs.IntVar(&o.conns, "conns", 2, "gRPC client connections (Envoy keeps one per worker thread)")
	fs.StringVar(&o.floors, "floors", "noop,evalsha", "floors to measure: noop, evalsha, both or none (empty)")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "deadline of each Check, like Envoy's ext_authz timeout")
	fs.DurationVar(&o.redisTimeout, "redis-timeout", 50*time.Millisecond, "the in-process service's Redis timeout (as ext-authz -redis-timeout)")
	fs.IntVar(&o.redisPool, "redis-pool", 0, "the in-process service's Redis connections; 0: go-redis's default")
	fs.IntVar(&o.redisBatch, "redis-batch", 32, "the in-process service's Redis pipeline size (as ext-authz -redis-batch); 0: one call per round trip")
	fs.StringVar(&o.jsonPath, "json", "-", "write the figures as JSON to this file; - : after the table on stdout; empty: not at all")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of one more slice of the service alone (in process: samples labelled side=service or side=tool)")
	fs.StringVar(&o.floorProfile, "floor-cpuprofile", "", "write a CPU profile of one more slice of the no-op floor alone (samples labelled side=floor or side=tool)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var errs []error
	if o.load.concurrency < 1 {
		errs = append(errs, errors.New("-c must be at least 1"))
	}
	if o.load.duration <= 0 {
		errs = append(errs, errors.New("-d must be positive"))
	}
	if o.rounds < 1 {
		errs = append(errs, errors.New("-rounds must be at least 1"))
	}
	if o.store != "redis" && o.store != "memory" {
		errs = append(errs, fmt.Errorf("-store %q: want redis or memory", o.store))
	}
	if o.deny < 0 || o.deny > 1 {
		errs = append(errs, errors.New("-deny must be between 0 and 1"))
	}
	if o.conversations < 0 {
		errs = append(errs, errors.New("-conversations must not be negative"))
	}
	if o.tenants < 1 || o.conns < 1 || o.distinct < 1 {
		errs = append(errs, errors.New("-tenants, -conns and -distinct must be at least 1"))
	}
	for f := range strings.SplitSeq(o.floors, ",") {
		if f != "" && f != "noop" && f != "evalsha" {
			errs = append(errs, fmt.Errorf("-floors: unknown floor %q", f))
		}
	}
	return o, errors.Join(errs...)
}

// report is everything one invocation measured.
type report struct {
	Machine  machine        `json:"machine"`
	Settings map[string]any `json:"settings"`
	Runs     []result       `json:"runs"`
	Ratios   map[string]any `json:"ratios"`
	Redis    *redisCommands `json:"redis_commands,omitempty"`
	Profile  *profiled      `json:"profile,omitempty"`
	// FloorProfile is the number of requests in the slice -floor-cpuprofile profiled.
	FloorProfile *int `json:"floor_profile_requests,omitempty"`
}

// profiled describes the slice of the service that -cpuprofile profiled: the decisions made and
// the CPU redis-server spent meanwhile (INFO cpu), which the profile of this process cannot show.
type profiled struct {
	Decisions      int    `json:"decisions"`
	RedisCPUMillis *int64 `json:"redis_cpu_ms,omitempty"` // nil: not measured (no Redis store)
}

type machine struct {
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	CPU        string `json:"cpu"`
	Go         string `json:"go"`
	OS         string `json:"os"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	sizes, err := parseSizes(o.body)
	if err != nil {
		return err
	}
	w := &workload{sizes: sizes, models: strings.Split(o.models, ","), tenants: o.tenants, deny: o.deny, seed: 1,
		conversations: o.conversations}
	reqs, err := w.requests(o.distinct)
	if err != nil {
		return err
	}
	floors := map[string]bool{}
	for f := range strings.SplitSeq(o.floors, ",") {
		floors[f] = f != ""
	}

	// Redis: the service's store (in process, -store redis) and the evalsha floor's.
	var rdb redis.UniversalClient
	needRedis := (o.addr == "" && o.store == "redis") || floors["evalsha"] || o.redisURL != ""
	if needRedis {
		if o.redisURL == "" {
			url, stop, err := startRedis(ctx)
			if err != nil {
				return err
			}
			defer stop()
			o.redisURL = url
		}
		if rdb, err = bucket.NewClient(o.redisURL, bucket.ClientOptions{PoolSize: o.redisPool}); err != nil {
			return err
		}
		defer rdb.Close()
	}

	// The service under test.
	target := o.addr
	if target == "" {
		var stop func()
		var addr string
		// The service's goroutines carry the label side=service in CPU profiles, the tool's
		// side=tool (goroutines inherit labels): docs/performance.md splits the profile with them.
		pprof.Do(ctx, pprof.Labels("side", "service"), func(ctx context.Context) {
			stop, addr, err = startService(ctx, o)
		})
		if err != nil {
			return err
		}
		defer stop()
		target = addr
	}
	var conns []*grpc.ClientConn
	pprof.Do(ctx, pprof.Labels("side", "tool"), func(context.Context) { conns, err = dial(target, o.conns) })
	if err != nil {
		return err
	}
	defer closeAll(conns)
	if err := waitServing(ctx, conns[0]); err != nil {
		return err
	}

	rep := &report{
		Machine: machine{CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPU: cpuModel(), Go: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH},
		Settings: map[string]any{"concurrency": o.load.concurrency, "rate": o.load.rate, "duration": o.load.duration.String(),
			"warmup": o.load.warmup.String(), "rounds": o.rounds, "body": o.body, "models": w.models, "tenants": o.tenants, "deny": o.deny,
			"conns": o.conns, "redis_pool": o.redisPool, "redis_batch": o.redisBatch, "store": storeName(o), "target": targetName(o), "distinct_requests": o.distinct, "conversations": o.conversations},
		Ratios: map[string]any{},
	}
	fmt.Fprintf(stderr, "loadgen: %d workers, %s per run, body %s, %d tenants, %.0f%% denials, store %s\n",
		o.load.concurrency, o.load.duration, o.body, o.tenants, 100*o.deny, storeName(o))

	// The floors and the service take turns in short slices (rounds), so that the load of the
	// rest of the machine weighs on all of them alike; the ratios compare like with like.
	var all []*series
	var noopS, evalS *series
	if floors["noop"] {
		var addr string
		var stop func()
		pprof.Do(ctx, pprof.Labels("side", "floor"), func(context.Context) {
			addr, stop, err = startNoop(config.DefaultMaxRecvBytes)
		})
		if err != nil {
			return err
		}
		defer stop()
		// The floor's client connections are the tool's, as the service's are (their transport
		// goroutines inherit the label).
		var nc []*grpc.ClientConn
		pprof.Do(ctx, pprof.Labels("side", "tool"), func(context.Context) { nc, err = dial(addr, o.conns) })
		if err != nil {
			return err
		}
		defer closeAll(nc)
		noopS = &series{name: "noop floor", call: checkCaller(nc, o.timeout)}
		all = append(all, noopS)
	}
	if floors["evalsha"] && rdb != nil {
		evalS = &series{name: "evalsha floor", call: evalshaCaller(rdb)}
		all = append(all, evalS)
	}
	ours := &series{name: "ext-authz", call: checkCaller(conns, o.timeout)}
	all = append(all, ours)
	for _, s := range all {
		warm(ctx, o.load, reqs, s.call)
	}
	slice := o.load.duration / time.Duration(o.rounds)
	var sent redisCommands
	for range o.rounds {
		for _, s := range all {
			var before map[string]int64
			var cpu0 time.Duration
			if s == ours && rdb != nil && o.store == "redis" {
				if before, err = redisstats.Calls(ctx, rdb); err != nil {
					return err
				}
				if cpu0, err = redisstats.CPU(ctx, rdb); err != nil {
					return err
				}
			}
			s.slice(ctx, o.load, reqs, slice)
			if before != nil {
				after, err := redisstats.Calls(ctx, rdb)
				if err != nil {
					return err
				}
				cpu1, err := redisstats.CPU(ctx, rdb)
				if err != nil {
					return err
				}
				sent.add(diffStats(before, after))
				sent.cpu += cpu1 - cpu0
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	var noopRes, evalRes *result
	for _, s := range all {
		r := s.result(o.load)
		rep.Runs = append(rep.Runs, r)
		fmt.Fprintln(stderr, "loadgen:", r)
		switch s {
		case noopS:
			noopRes = &r
		case evalS:
			evalRes = &r
		}
	}
	res := rep.Runs[len(rep.Runs)-1]
	if sent.Sent != nil {
		sent.perDecision(res.Requests)
		rep.Redis = &sent
	}

	// Each profile is of one more slice of its run alone, so that no other run is in it.
	if o.cpuProfile != "" {
		var cpu0, cpu1 time.Duration
		measure := rdb != nil && o.store == "redis"
		if measure {
			if cpu0, err = redisstats.CPU(ctx, rdb); err != nil {
				return err
			}
		}
		n, err := profileSlice(ctx, o.cpuProfile, o.load, reqs, ours.call, max(slice, 5*time.Second))
		if err != nil {
			return err
		}
		rep.Profile = &profiled{Decisions: n}
		if measure {
			if cpu1, err = redisstats.CPU(ctx, rdb); err != nil {
				return err
			}
			ms := (cpu1 - cpu0).Milliseconds()
			rep.Profile.RedisCPUMillis = &ms
		}
	}
	if o.floorProfile != "" && noopS != nil {
		n, err := profileSlice(ctx, o.floorProfile, o.load, reqs, noopS.call, max(slice, 5*time.Second))
		if err != nil {
			return err
		}
		rep.FloorProfile = &n
	}

	if noopRes != nil && noopRes.Throughput > 0 && noopRes.P99 > 0 {
		rep.Ratios["throughput_vs_noop"] = round3(res.Throughput / noopRes.Throughput)
		// Decided answers only (allowed or 429): a 503 from a Redis timeout or an open circuit
		// breaker is cheap and must not pass for speed.
		if res.Requests > 0 {
			decided := float64(res.Allowed+res.Denied) / float64(res.Requests)
			rep.Ratios["decided_throughput_vs_noop"] = round3(decided * res.Throughput / noopRes.Throughput)
		}
		rep.Ratios["p99_vs_noop"] = round3(float64(res.P99) / float64(noopRes.P99))
		rep.Ratios["p50_vs_noop"] = round3(float64(res.P50) / float64(noopRes.P50))
	}
	if evalRes != nil && evalRes.Throughput > 0 && evalRes.P99 > 0 {
		rep.Ratios["throughput_vs_evalsha"] = round3(res.Throughput / evalRes.Throughput)
		rep.Ratios["p99_vs_evalsha"] = round3(float64(res.P99) / float64(evalRes.P99))
	}
	printTable(stdout, rep)
	if o.jsonPath != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if o.jsonPath == "-" {
			fmt.Fprintf(stdout, "%s\n", b)
		} else if err := os.WriteFile(o.jsonPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if res.Requests == 0 {
		return errors.New("the service answered no request")
	}
	return nil
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

func storeName(o *options) string {
	if o.addr != "" {
		return "as the target's"
	}
	return o.store
}

func targetName(o *options) string {
	if o.addr != "" {
		return o.addr
	}
	return "in process"
}

// startService runs the service in process (internal/server, as cmd/ext-authz serve does).
func startService(ctx context.Context, o *options) (stop func(), addr string, err error) {
	cfgPath := o.configPath
	dir := ""
	if cfgPath == "" {
		if dir, err = os.MkdirTemp("", "loadgen"); err != nil {
			return nil, "", err
		}
		cfgPath = filepath.Join(dir, "bench.yaml")
		if err := os.WriteFile(cfgPath, benchConfig, 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, "", err
		}
	}
	so := server.Options{
		ConfigPath: cfgPath, GRPCAddr: "127.0.0.1:0", RedisPrefix: "loadgen:",
		RedisTimeout: o.redisTimeout, RedisPoolSize: o.redisPool, RedisBatch: o.redisBatch, DrainTimeout: time.Second,
		MaxRecvBytes: config.DefaultMaxRecvBytes, DecisionLog: o.decisionLog,
	}
	if o.store == "redis" {
		so.RedisURL = o.redisURL
	}
	s, err := server.New(so, zap.NewNop())
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		s.Serve(sctx) //nolint:errcheck // ends with cancel
		close(done)
	}()
	return func() {
		cancel()
		<-done
		if dir != "" {
			os.RemoveAll(dir)
		}
	}, s.GRPCAddr().String(), nil
}

// waitServing waits until the service reports SERVING (its store answered).
func waitServing(ctx context.Context, conn *grpc.ClientConn) error {
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the service is not SERVING: %v %v", resp.GetStatus(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func closeAll(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// printTable writes the runs and the ratios for people.
func printTable(w io.Writer, rep *report) {
	fmt.Fprintf(w, "machine: %d CPUs (%s), GOMAXPROCS %d, %s %s\n", rep.Machine.CPUs, rep.Machine.CPU, rep.Machine.GOMAXPROCS, rep.Machine.Go, rep.Machine.OS)
	s := rep.Settings
	fmt.Fprintf(w, "load: concurrency %v, rate %v/s (0: closed loop), %v per run in %v interleaved slices after %v warm-up, body %v, %v tenants, deny share %v, %v gRPC conns, store %v, target %v\n\n",
		s["concurrency"], s["rate"], s["duration"], s["rounds"], s["warmup"], s["body"], s["tenants"], s["deny"], s["conns"], s["store"], s["target"])
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\trequests\tper second\tp50\tp90\tp99\tmax\tallowed\t429\tother denied\terrors\tload 1m (min-max)\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.2f-%.2f\t\n", r.Name, r.Requests, r.Throughput,
			ms(r.P50), ms(r.P90), ms(r.P99), ms(r.Max), r.Allowed, r.Denied, r.OtherDenied, r.Errors, r.LoadAvg[0], r.LoadAvg[1])
	}
	tw.Flush()
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		bars := []struct{ key, bar string }{
			{"throughput_vs_noop", "bar >= 0.5"}, {"decided_throughput_vs_noop", "allowed and 429 only"},
			{"p99_vs_noop", "bar <= 3"}, {"p50_vs_noop", ""},
			{"throughput_vs_evalsha", ""}, {"p99_vs_evalsha", ""},
		}
		for _, b := range bars {
			if v, ok := rep.Ratios[b.key]; ok {
				fmt.Fprintf(w, "%-27s %6.3f  %s\n", b.key, v, b.bar)
			}
		}
	}
	if rc := rep.Redis; rc != nil {
		fmt.Fprintf(w, "\nredis commands sent per decision: %.4f (bar <= 1)  sent %v  in scripts %v\n", rc.PerDecision, rc.Sent, rc.InScript)
		fmt.Fprintf(w, "redis-server CPU per decision: %.1f us (INFO cpu over the service's slices)\n", rc.CPUPerDecision)
	}
	if p := rep.Profile; p != nil {
		fmt.Fprintf(w, "profiled slice: %d decisions", p.Decisions)
		if p.RedisCPUMillis != nil {
			fmt.Fprintf(w, ", redis-server CPU %d ms", *p.RedisCPUMillis)
		}
		fmt.Fprintln(w)
	}
	if n := rep.FloorProfile; n != nil {
		fmt.Fprintf(w, "profiled floor slice: %d requests\n", *n)
	}
	fmt.Fprintln(w)
}

// profileSlice writes a CPU profile of one slice of call, whose client side is labelled
// side=tool, and returns the number of requests answered in it.
func profileSlice(ctx context.Context, path string, l load, reqs []*rawRequest, call caller, d time.Duration) (int, error) {
	prof, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	if err := pprof.StartCPUProfile(prof); err != nil {
		prof.Close()
		return 0, err
	}
	s := &series{call: call}
	pprof.Do(ctx, pprof.Labels("side", "tool"), func(ctx context.Context) {
		s.slice(ctx, l, reqs, d)
	})
	pprof.StopCPUProfile()
	return len(s.lats), prof.Close()
}
