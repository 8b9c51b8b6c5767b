package server

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

//go:embed heartbeat.lua
var heartbeatSource string

var heartbeatScript = redis.NewScript(heartbeatSource)

// heartbeatTTL is how long a replica counts as live after its last beat (one a second).
const heartbeatTTL = 5 * time.Second

// replicas discovers how many replicas share the store, for failure.mode local: each one beats
// in a sorted set under the prefix at every health ping while Redis is up, and the number of
// members beaten within heartbeatTTL is the divisor of the local share. While Redis is down the
// last number stays in force. Its methods are called by one goroutine (watchStore).
type replicas struct {
	client redis.UniversalClient
	key    string
	id     string
	gauge  prometheus.Gauge
	last   int
	log    *zap.Logger
}

func newReplicas(client redis.UniversalClient, prefix string, reg prometheus.Registerer, log *zap.Logger) *replicas {
	host, _ := os.Hostname()
	var b [6]byte
	rand.Read(b[:]) //nolint:errcheck // never fails
	r := &replicas{
		client: client,
		key:    prefix + "replicas",
		id:     host + "-" + hex.EncodeToString(b[:]),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "llm_ratelimit_replicas",
			Help: "Live replicas discovered through the store's heartbeat; failure.mode local divides each limit by it.",
		}),
		log: log,
	}
	reg.MustRegister(r.gauge)
	return r
}

// beat records this replica and returns the number of live ones (0 on error).
func (r *replicas) beat(ctx context.Context) int {
	n, err := heartbeatScript.Run(ctx, r.client, []string{r.key}, r.id, heartbeatTTL.Milliseconds()).Int()
	if err != nil || n <= 0 {
		return 0
	}
	if n != r.last {
		r.log.Info("replicas sharing the store", zap.Int("replicas", n), zap.Int("was", r.last))
		r.last = n
	}
	r.gauge.Set(float64(n))
	return n
}

// leave removes this replica at shutdown, so that the others' share grows at once.
func (r *replicas) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	r.client.ZRem(ctx, r.key, r.id) //nolint:errcheck // best effort; the beat expires anyway
}
