package redisstats

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Calls reads INFO commandstats of the node c talks to: calls per command, named as Redis names
// them ("evalsha", "config|resetstat"). Commands a script runs count too.
func Calls(ctx context.Context, c redis.UniversalClient) (map[string]int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisstats: commandstats line %q", line)
		}
		out[name] = n
	}
	return out, nil
}

// CPU reads INFO cpu of the node c talks to: the CPU time redis-server has used, user and
// system, all threads.
func CPU(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for line := range strings.Lines(info) {
		name, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "used_cpu_sys" && name != "used_cpu_user") {
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, fmt.Errorf("redisstats: INFO cpu line %q", line)
		}
		total += x
	}
	return time.Duration(total * float64(time.Second)), nil
}
