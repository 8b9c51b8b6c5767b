package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/llm-ratelimit/llm-ratelimit/internal/faultproxy"
	"github.com/llm-ratelimit/llm-ratelimit/internal/redistest"
)

// Fault tests: real ext-authz processes, a real redis-server behind a fault proxy. Each fault
// is checked for: every Check answered within faultBound with the configured policy, the breaker
// making the outage cheap, recovery within recoveryBound of Redis returning, and no goroutine or
// connection leak. Figures are logged (go test -v -run Fault ./cmd/ext-authz/) and reported in
// docs/operations.md.

const (
	faultTimeout = 50 * time.Millisecond // -redis-timeout of the processes under test
	// faultBound is the longest a Check may take during a fault: the Redis timeout plus a margin
	// for a race-enabled process on two shared, busy cores; half Envoy's ext_authz timeout (1s).
	// Without the race detector the slowest Check of every fault is about 2 x the timeout.
	faultBound = faultTimeout + 450*time.Millisecond
	// recoveryBound is the longest from Redis answering again to the first decision it takes.
	recoveryBound = time.Second
)

const faultLimits = `
failure: {mode: %s, replicas: 1}
rules:
  - name: big
    tokens: {limit: 1000000000, period: minute}
`

// sample is one Check of a load run.
type sample struct {
	at       time.Time // when it was sent
	took     time.Duration
	decision string
	cost     float64 // tokens debited (the decision's cost), 0 for an RPC error
	err      error
}

// load sends Checks from a few goroutines (moderate load: each pauses 2ms between checks)
// until stop is called, recording every answer.
type load struct {
	mu      sync.Mutex
	samples []sample
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

func startLoad(t *testing.T, p *proc, workers int) *load {
	t.Helper()
	return startLoadOf(t, p, workers, chatRequest("gpt-4o", 10, nil))
}

// startLoadOf is startLoad sending req.
func startLoadOf(t *testing.T, p *proc, workers int, req *authv3.CheckRequest) *load {
	t.Helper()
	client := authv3.NewAuthorizationClient(p.dial(t))
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{stop: cancel}
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				start := time.Now()
				// Envoy's ext_authz timeout.
				cctx, ccancel := context.WithTimeout(ctx, time.Second)
				resp, err := client.Check(cctx, req)
				ccancel()
				if ctx.Err() != nil {
					return
				}
				s := sample{at: start, took: time.Since(start), err: err}
				if err == nil {
					s.decision = resp.GetDynamicMetadata().GetFields()["decision"].GetStringValue()
					s.cost = resp.GetDynamicMetadata().GetFields()["cost"].GetNumberValue()
				}
				l.mu.Lock()
				l.samples = append(l.samples, s)
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

func (l *load) end() { l.stop(); l.wg.Wait() }

// doneBefore returns the samples answered before t.
func (l *load) doneBefore(t time.Time) []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sample
	for _, s := range l.samples {
		if s.at.Add(s.took).Before(t) {
			out = append(out, s)
		}
	}
	return out
}

// between returns the samples sent in [from, to).
func (l *load) between(from, to time.Time) []sample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sample
	for _, s := range l.samples {
		if !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// firstAfter returns when the first sample with decision was sent after from.
func (l *load) firstAfter(from time.Time, decision string) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	best, ok := time.Time{}, false
	for _, s := range l.samples {
		if s.at.After(from) && s.decision == decision && (!ok || s.at.Before(best)) {
			best, ok = s.at, true
		}
	}
	return best, ok
}

// summary describes a phase: count, decisions, errors, latency percentiles.
type summary struct {
	n         int
	decisions map[string]int
	errors    int
	p50, p99  time.Duration
	max       time.Duration
}

func summarize(ss []sample) summary {
	sum := summary{n: len(ss), decisions: map[string]int{}}
	var d []time.Duration
	for _, s := range ss {
		if s.err != nil {
			sum.errors++
		} else {
			sum.decisions[s.decision]++
		}
		d = append(d, s.took)
	}
	if len(d) == 0 {
		return sum
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	sum.p50, sum.p99, sum.max = d[len(d)/2], d[len(d)*99/100], d[len(d)-1]
	return sum
}

func (s summary) String() string {
	return fmt.Sprintf("%d checks %v errors %d; p50 %v p99 %v max %v", s.n, s.decisions, s.errors,
		s.p50.Round(time.Microsecond), s.p99.Round(time.Microsecond), s.max.Round(time.Microsecond))
}

// checkPhase asserts that every check of a phase got one of the decisions within faultBound.
func checkPhase(t *testing.T, name string, s summary, decisions ...string) {
	t.Helper()
	t.Logf("%s: %v", name, s)
	if s.n == 0 {
		t.Errorf("%s: no checks", name)
	}
	if s.errors > 0 {
		t.Errorf("%s: %d checks failed as RPCs", name, s.errors)
	}
	if s.max > faultBound {
		t.Errorf("%s: a check took %v, above %v", name, s.max, faultBound)
	}
	for d := range s.decisions {
		if !contains(decisions, d) {
			t.Errorf("%s: decision %q, want only %v", name, d, decisions)
		}
	}
}

// mostly asserts that at least frac of a phase's decisions are want. While the store is up, a
// Check may still time out on a machine stalled by other jobs (the race detector, two shared
// cores), and three timeouts in a row open the breaker for 500ms: that is the product working,
// so the healthy phases demand a majority, not all. Without the race detector they are all exact.
func mostly(t *testing.T, name string, s summary, want string, frac float64) {
	t.Helper()
	if s.n > 0 && float64(s.decisions[want]) < frac*float64(s.n) {
		t.Errorf("%s: %d of %d decisions %q, want at least %.0f%%", name, s.decisions[want], s.n, want, 100*frac)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// scrapeMetrics reads the process's /metrics: every sample line, name{labels} -> value.
func scrapeMetrics(t *testing.T, p *proc) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// resources are what a leak would grow.
type resources struct{ goroutines, fds float64 }

func resourcesOf(t *testing.T, p *proc) resources {
	m := scrapeMetrics(t, p)
	return resources{m["go_goroutines"], m["process_open_fds"]}
}

// noLeak waits up to 5s for the goroutines and file descriptors to come back near before.
func noLeak(t *testing.T, p *proc, before resources) {
	t.Helper()
	var now resources
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		now = resourcesOf(t, p)
		if now.goroutines <= before.goroutines+5 && now.fds <= before.fds+5 {
			break
		}
	}
	t.Logf("goroutines %v -> %v, open fds %v -> %v", before.goroutines, now.goroutines, before.fds, now.fds)
	if now.goroutines > before.goroutines+5 || now.fds > before.fds+5 {
		t.Errorf("leak: goroutines %v -> %v, open fds %v -> %v", before.goroutines, now.goroutines, before.fds, now.fds)
	}
}

// faultSetup is a Redis behind a fault proxy.
func faultSetup(t *testing.T) (*redistest.Server, *faultproxy.Proxy) {
	t.Helper()
	redis := redistest.StartServer(t)
	px, err := faultproxy.New(redis.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return redis, px
}

func startFaultProc(t *testing.T, mode string, px *faultproxy.Proxy, ready bool) *proc {
	t.Helper()
	cfg := writeFile(t, "limits.yaml", fmt.Sprintf(faultLimits, mode))
	args := []string{"-config", cfg, "-redis-url", "redis://" + px.Addr(), "-redis-prefix", t.Name() + ":",
		"-redis-timeout", faultTimeout.String()}
	if ready {
		return startProc(t, args...)
	}
	return startUnready(t, args...)
}

// recovered asserts that the first allowed decision came within recoveryBound of back, and
// that everything sent from then on was allowed.
func recovered(t *testing.T, l *load, back time.Time) {
	t.Helper()
	first, ok := l.firstAfter(back, "allowed")
	if !ok {
		t.Fatal("no allowed decision after the store came back")
	}
	t.Logf("recovery: first allowed decision %v after the store came back", first.Sub(back).Round(time.Millisecond))
	if first.Sub(back) > recoveryBound {
		t.Errorf("recovery took %v, above %v", first.Sub(back), recoveryBound)
	}
	// A check already past the breaker when Redis came back may still fail; give it the timeout.
	after := summarize(l.between(first.Add(faultBound), time.Now()))
	checkPhase(t, "after recovery", after, "allowed", "unavailable", "local", "fail_open")
	mostly(t, "after recovery", after, "allowed", 0.8)
}

// Redis down when the service starts: NOT_SERVING (Envoy sends nothing), yet every Check is
// answered at once by the failure policy; SERVING and exact decisions within a second of Redis
// appearing.
func TestFaultRedisDownAtStartup(t *testing.T) {
	t.Parallel()
	redis, px := faultSetup(t)
	redis.Kill()
	p := startFaultProc(t, "deny", px, false)
	l := startLoad(t, p, 4)
	time.Sleep(2 * time.Second)
	back := time.Now()
	checkPhase(t, "redis down at start-up", summarize(l.between(time.Time{}, back)), "unavailable")
	redis.Restart()
	p.waitServing(t)
	t.Logf("SERVING %v after redis started", time.Since(back).Round(time.Millisecond))
	time.Sleep(time.Second + faultBound)
	l.end()
	recovered(t, l, back)
	m := scrapeMetrics(t, p)
	t.Logf("breaker: %v fast failures, %v store timeouts, %v store errors", m[`llm_ratelimit_errors_total{reason="breaker_open"}`],
		m[`llm_ratelimit_errors_total{reason="store_timeout"}`], m[`llm_ratelimit_errors_total{reason="store_error"}`])
}

// Redis killed under load, then restarted empty (no buckets, no script cache): local decisions
// during the outage, each fast; exact decisions within a second of the restart; no leak.
func TestFaultRedisKilledAndRestartedEmpty(t *testing.T) {
	t.Parallel()
	redis, px := faultSetup(t)
	p := startFaultProc(t, "local", px, true)
	l := startLoad(t, p, 4)
	time.Sleep(time.Second)
	before := resourcesOf(t, p)
	conns := px.Open()
	killing := time.Now()
	redis.Kill()
	killed := time.Now()
	time.Sleep(3 * time.Second)
	back := time.Now()
	redis.Restart()
	time.Sleep(time.Second + faultBound)
	l.end()
	pre := summarize(l.doneBefore(killing))
	checkPhase(t, "before the kill", pre, "allowed", "local")
	mostly(t, "before the kill", pre, "allowed", 0.5)
	checkPhase(t, "redis killed", summarize(l.between(killed.Add(faultBound), back)), "local")
	recovered(t, l, back)
	m := scrapeMetrics(t, p)
	t.Logf("breaker: %v fast failures, %v store timeouts, %v store errors; proxy connections %d -> %d",
		m[`llm_ratelimit_errors_total{reason="breaker_open"}`], m[`llm_ratelimit_errors_total{reason="store_timeout"}`],
		m[`llm_ratelimit_errors_total{reason="store_error"}`], conns, px.Open())
	if m[`llm_ratelimit_store_breaker_state`] != 0 {
		t.Errorf("breaker state %v after recovery", m[`llm_ratelimit_store_breaker_state`])
	}
	noLeak(t, p, before)
}

// Redis slower than the timeout, then blackholed: each Check pays at most one timeout, the
// breaker turns the outage into fast failures (a few store calls per interval, not one per
// request), and the service recovers within a second.
func TestFaultRedisSlowAndBlackholed(t *testing.T) {
	t.Parallel()
	_, px := faultSetup(t)
	p := startFaultProc(t, "allow", px, true)
	l := startLoad(t, p, 4)
	time.Sleep(time.Second)
	before := resourcesOf(t, p)
	m0 := scrapeMetrics(t, p)
	// Each phase starts once the fault is in place, and recovery is timed from just before
	// the fault ends: a stalled test goroutine can only make the figures worse.
	px.SetLatency(4 * faultTimeout)
	px.DropAll() // the pool's connections are re-dialled through the slow path
	slow := time.Now()
	time.Sleep(3 * time.Second)
	px.SetLatency(0)
	px.SetMode(faultproxy.Blackhole)
	hole := time.Now()
	time.Sleep(3 * time.Second)
	back := time.Now()
	px.SetMode(faultproxy.Pass)
	time.Sleep(time.Second + faultBound)
	l.end()
	checkPhase(t, "redis slow (200ms > 50ms timeout)", summarize(l.between(slow.Add(faultBound), hole)), "fail_open")
	checkPhase(t, "redis blackholed", summarize(l.between(hole.Add(faultBound), back)), "fail_open")
	recovered(t, l, back)
	m := scrapeMetrics(t, p)
	failed := m[`llm_ratelimit_errors_total{reason="store_timeout"}`] + m[`llm_ratelimit_errors_total{reason="store_error"}`] -
		m0[`llm_ratelimit_errors_total{reason="store_timeout"}`] - m0[`llm_ratelimit_errors_total{reason="store_error"}`]
	fast := m[`llm_ratelimit_errors_total{reason="breaker_open"}`]
	t.Logf("breaker: %v decisions failed fast, %v paid a store timeout or error over 6s of outage", fast, failed)
	// 6s of outage with a 500ms breaker: about 12 probes plus the 4 in flight when it opened and
	// the 3 that opened it; far below one per request.
	if failed > 40 || fast < 10*failed {
		t.Errorf("the breaker did not make the outage cheap: %v store failures, %v fast", failed, fast)
	}
	noLeak(t, p, before)
}
