package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/llm-ratelimit/llm-ratelimit/internal/bucket"
)

// replicas counts the replicas sharing the Redis store, for failure.mode local, through the
// store's heartbeat (bucket.Redis.Heartbeat): the count divides the local share. While Redis is
// down the last count stays in force. Its methods are called by one goroutine (watchStore).
type replicas struct {
	store *bucket.Redis
	id    string
	gauge prometheus.Gauge
	last  int
	log   *zap.Logger
}

func newReplicas(store *bucket.Redis, reg prometheus.Registerer, log *zap.Logger) *replicas {
	host, _ := os.Hostname()
	var b [6]byte
	rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	r := &replicas{
		store: store,
		id:    host + "-" + hex.EncodeToString(b[:]),
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
	n, err := r.store.Heartbeat(ctx, r.id)
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
	r.store.Leave(ctx, r.id) //nolint:errcheck // best effort; the beat expires anyway
}
