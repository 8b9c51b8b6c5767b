package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/redis/go-redis/v9"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"

	"github.com/llm-ratelimit/llm-ratelimit/internal/server"
)

// noop is the first floor: an ext_authz server with the service's gRPC settings that answers
// OK without looking at the request. Its figures are the cost of gRPC itself on this machine.
type noop struct {
	authv3.UnimplementedAuthorizationServer
}

var okResponse = &authv3.CheckResponse{
	Status:       &rpcstatus.Status{},
	HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
}

func (noop) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return okResponse, nil
}

// startNoop serves the no-op floor on a free loopback port until stop is called.
func startNoop(maxRecvBytes int) (addr string, stop func(), err error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	s := grpc.NewServer(server.GRPCOptions(maxRecvBytes)...)
	authv3.RegisterAuthorizationServer(s, noop{})
	go s.Serve(lis) //nolint:errcheck // ends with Stop
	return lis.Addr().String(), s.Stop, nil
}

// floorScript is the second floor: a minimal one-bucket decision (a fixed-window counter), the
// least a Redis limiter can do in one script call. Its figures are the cost of one Redis round
// trip (EVALSHA) on this machine.
var floorScript = redis.NewScript(`local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == tonumber(ARGV[1]) then redis.call('PEXPIRE', KEYS[1], 60000) end
return n`)

// evalshaCaller runs the floor script on the request's tenant key.
func evalshaCaller(c redis.UniversalClient) caller {
	return func(ctx context.Context, r *rawRequest) int {
		if err := floorScript.Run(ctx, c, []string{"loadgen:floor:{" + r.tenant + "}"}, 1).Err(); err != nil {
			return outError
		}
		return outAllowed
	}
}

// startRedis starts redis-server (from PATH) on a free loopback port, persisting nothing.
func startRedis(ctx context.Context) (url string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("no -redis-url and %w: install redis-server or use -store memory", err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	dir, err := os.MkdirTemp("", "loadgen-redis")
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() {
		cmd.Process.Kill() //nolint:errcheck // may have exited
		cmd.Wait()         //nolint:errcheck // killed
		os.RemoveAll(dir)
	}
	url = fmt.Sprintf("redis://127.0.0.1:%d", port)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if err := c.Ping(ctx).Err(); err == nil {
			return url, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, errors.New("redis-server did not answer within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// inScript are the commands the scripts run inside a script call (bucket.lua, the floor's, the
// service's replica heartbeat): Redis counts them in commandstats, but they are not round trips.
var inScript = map[string]bool{"time": true, "mget": true, "set": true, "hgetall": true, "hset": true, "hdel": true, "del": true,
	"pexpire": true, "incrby": true, "zadd": true, "zcard": true, "zcount": true, "zrem": true, "zremrangebyscore": true,
	"zrangebyscore": true, "zrevrange": true, "zscore": true}

// redisCommands summarizes the commandstats difference of a run.
type redisCommands struct {
	// Sent are the commands clients sent (FCALL, EVALSHA, EVAL, PING...), by name; in-script commands
	// and the tool's own INFO are left out.
	Sent map[string]int64 `json:"sent"`
	// InScript are the commands the scripts ran, by name.
	InScript map[string]int64 `json:"in_script"`
	// PerDecision is the sent commands per decision.
	PerDecision float64 `json:"sent_per_decision"`
	// CPUPerDecision is redis-server's CPU (user and system, INFO cpu) per decision, in
	// microseconds: the script's cost, which a profile of the service does not show.
	CPUPerDecision float64 `json:"cpu_us_per_decision"`
	cpu            time.Duration
}

func diffStats(before, after map[string]int64) redisCommands {
	rc := redisCommands{Sent: map[string]int64{}, InScript: map[string]int64{}}
	for name, n := range after {
		d := n - before[name]
		if d == 0 || name == "info" {
			continue
		}
		if inScript[name] {
			rc.InScript[name] = d
			continue
		}
		rc.Sent[name] = d
	}
	return rc
}

// add sums o into rc.
func (rc *redisCommands) add(o redisCommands) {
	if rc.Sent == nil {
		rc.Sent, rc.InScript = map[string]int64{}, map[string]int64{}
	}
	for k, v := range o.Sent {
		rc.Sent[k] += v
	}
	for k, v := range o.InScript {
		rc.InScript[k] += v
	}
}

// perDecision sets PerDecision for that many decisions.
func (rc *redisCommands) perDecision(decisions int) {
	var sent int64
	for _, v := range rc.Sent {
		sent += v
	}
	if decisions > 0 {
		rc.PerDecision = float64(sent) / float64(decisions)
		rc.CPUPerDecision = round3(float64(rc.cpu.Microseconds()) / float64(decisions))
	}
}

// loadAvg is the 1-minute load average (0 where /proc/loadavg does not exist).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}
