package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
	"github.com/llm-ratelimit/llm-ratelimit/internal/replay"
	"github.com/llm-ratelimit/llm-ratelimit/internal/server"
)

const replayUsage = `usage: ext-authz replay -config LIMITS [flags] FILE...
       ext-authz replay -generate FILE [-rps N] [-duration D] [-tenants-n N] [-seed S]
Replays decision logs (-decision-log) against LIMITS offline, on a virtual clock, and reports
per rule, tenant and model what was allowed, held and denied. The FILEs are merged by time:
rotated files (FILE.2 FILE.1 FILE) and the logs of several replicas alike.
`

// replayCmd runs the replay command.
// replayMemory is the heap a replay grows to before it collects garbage (GOGC or GOMEMLIMIT set:
// theirs instead).
const replayMemory = 1 << 30

func replayCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, replayUsage); fs.PrintDefaults() }
	limits := fs.String("config", "", "limits file to replay against (required)")
	diff := fs.String("diff", "", "a second limits file: both side by side on the same traffic")
	provLimits := fs.String("provider-limits", "", "provider limits file: count the 429s the provider's own limits would have sent")
	speed := fs.Float64("speed", 1, "compress recorded times by this factor (2: the same traffic in half the time)")
	tenants := fs.String("tenants", "", "comma-separated tenants to replay (default: all)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	svg := fs.String("svg", "", "write an SVG chart of admitted tokens per second against each limit to this file")
	gen := fs.String("generate", "", "write a generated decision log to this file instead of replaying")
	rps := fs.Float64("rps", 100, "with -generate: requests per second")
	dur := fs.Duration("duration", 24*time.Hour, "with -generate: how long the traffic lasts")
	genTenants := fs.Int("tenants-n", 20, "with -generate: how many tenants")
	seed := fs.Uint64("seed", 1, "with -generate: the seed (same seed, same file)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the replay to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *gen != "" {
		f, err := os.Create(*gen)
		if err != nil {
			return err
		}
		n, err := replay.Generate(f, replay.Traffic{Start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Duration: *dur,
			RPS: *rps, Tenants: *genTenants, Seed: *seed})
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("replay: generate: %w", err)
		}
		fmt.Fprintf(stdout, "%s: %d decisions\n", *gen, n)
		return nil
	}
	if *limits == "" || fs.NArg() == 0 {
		fs.Usage()
		return exitCode(2)
	}
	opts := replay.Options{Speed: *speed}
	if *speed <= 0 {
		return fmt.Errorf("replay: -speed %v must be positive", *speed)
	}
	if *tenants != "" {
		opts.Tenants = map[string]bool{}
		for _, t := range strings.Split(*tenants, ",") {
			opts.Tenants[strings.TrimSpace(t)] = true
		}
	}
	if *provLimits != "" {
		p, err := replay.LoadProviderLimits(*provLimits)
		if err != nil {
			return err
		}
		opts.Provider = p
	}
	_, gogc := os.LookupEnv("GOGC")
	_, limit := os.LookupEnv("GOMEMLIMIT")
	if !gogc && !limit {
		// A replay's live heap is small (the buckets, a few seconds of reservations, the report)
		// and it allocates per line: collecting only once the heap holds replayMemory, rather
		// than each time it doubles, takes about a third of its CPU off (docs/performance.md).
		// A live heap near the limit still collects, as the runtime does under any limit.
		debug.SetGCPercent(-1)
		debug.SetMemoryLimit(replayMemory)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rep, err := replayFiles(*limits, opts, fs.Args())
	if err != nil {
		return err
	}
	if *svg != "" {
		var b bytes.Buffer
		if err := rep.WriteSVG(&b); err != nil {
			return err
		}
		if err := os.WriteFile(*svg, b.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if *diff != "" {
		other, err := replayFiles(*diff, opts, fs.Args())
		if err != nil {
			return err
		}
		return replay.WriteDiff(stdout, rep, other, *limits, *diff)
	}
	if *asJSON {
		data, err := rep.JSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", data)
		return err
	}
	return rep.WriteTable(stdout)
}

// replayFiles replays files against the limits file at path.
func replayFiles(path string, opts replay.Options, files []string) (*replay.Report, error) {
	c, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	set, err := server.SettlementOf(c)
	if err != nil {
		return nil, err
	}
	opts.Config, opts.Settlement = c, &set
	e, err := replay.New(opts)
	if err != nil {
		return nil, err
	}
	readers := make([]io.Reader, 0, len(files))
	defer func() {
		for _, r := range readers {
			r.(*os.File).Close()
		}
	}()
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		readers = append(readers, f)
	}
	if err := e.Merge(readers, files); err != nil {
		return nil, err
	}
	rep := e.Finish()
	if rep.Errors > 0 {
		return rep, errors.New("replay: the filter failed on some decisions")
	}
	return rep, nil
}
