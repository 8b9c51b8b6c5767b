package filter

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// levelInterval is the interval over which llm_ratelimit_bucket_level_ratio takes its minimum.
// The gauge reports the last complete interval, so that any number of scrapers read the same
// value and none resets it for the others.
const levelInterval = 10 * time.Second

// levelKey names one series of the gauge: a rule's buckets of one kind and window. Rule names
// come from the limits file, kinds and windows from its limits: the label set is bounded by the
// configuration, never by tenants or models.
type levelKey struct {
	rule   string
	kind   byte
	window uint8
}

// levelSlot holds the lowest level of the interval being measured (cur) and of the one before
// (prev), each packed as interval number << 32 | level in millionths of the capacity.
type levelSlot struct {
	cur, prev atomic.Uint64
}

// observe lowers the slot's level for interval iv to ppm.
func (s *levelSlot) observe(iv uint32, ppm uint32) {
	v := uint64(iv)<<32 | uint64(ppm)
	for {
		old := s.cur.Load()
		switch oiv := uint32(old >> 32); {
		case oiv == iv:
			if uint32(old) <= ppm || s.cur.CompareAndSwap(old, v) {
				return
			}
		case oiv > iv:
			return // a decision of an earlier interval, late: the interval is already done
		default:
			if s.cur.CompareAndSwap(old, v) {
				s.prev.Store(old)
				return
			}
		}
	}
}

// last is the level of the complete interval iv-1, if any decision was made in it.
func (s *levelSlot) last(iv uint32) (ppm uint32, ok bool) {
	for _, v := range [2]uint64{s.cur.Load(), s.prev.Load()} {
		if uint32(v>>32) == iv-1 {
			return uint32(v), true
		}
	}
	return 0, false
}

// levels is a Prometheus collector of the lowest level that decisions saw in each rule's
// buckets: a near-limit signal per rule, without a tenant's or a model's label. Safe for
// concurrent use.
type levels struct {
	desc  *prometheus.Desc
	now   func() time.Time
	mu    sync.RWMutex
	slots map[levelKey]*levelSlot
}

func newLevels() *levels {
	return &levels{
		desc: prometheus.NewDesc("llm_ratelimit_bucket_level_ratio",
			"The lowest level, as a share of the capacity (0 empty or in debt, 1 full), that a decision saw in any bucket of the rule, "+
				"kind and window over the last complete 10 s interval; absent when no decision saw one.",
			[]string{"rule", "kind", "window"}, nil),
		now:   time.Now,
		slots: map[levelKey]*levelSlot{},
	}
}

// interval numbers t's 10 s interval.
func interval(t time.Time) uint32 { return uint32(t.UnixNano() / int64(levelInterval)) }

// observe records a bucket's level after a decision at t: remaining of capacity.
func (l *levels) observe(k levelKey, t time.Time, remaining, capacity int64) {
	if capacity <= 0 {
		return
	}
	ppm := uint32(0)
	if remaining >= capacity {
		ppm = 1e6
	} else if remaining > 0 {
		ppm = uint32(remaining * 1e6 / capacity)
	}
	l.mu.RLock()
	s := l.slots[k]
	l.mu.RUnlock()
	if s == nil {
		l.mu.Lock()
		if s = l.slots[k]; s == nil {
			s = &levelSlot{}
			l.slots[k] = s
		}
		l.mu.Unlock()
	}
	s.observe(interval(t), ppm)
}

// Describe implements prometheus.Collector.
func (l *levels) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

// Collect implements prometheus.Collector: one gauge per rule, kind and window that decisions
// saw in the last complete interval. Slots idle for two intervals (a rule renamed or removed by
// a reload) are dropped.
func (l *levels) Collect(ch chan<- prometheus.Metric) {
	iv := interval(l.now())
	var idle []levelKey
	l.mu.RLock()
	for k, s := range l.slots {
		if ppm, ok := s.last(iv); ok {
			ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, float64(ppm)/1e6,
				k.rule, kindName(k.kind), strconv.Itoa(int(k.window)))
		} else if uint32(s.cur.Load()>>32)+2 < iv {
			idle = append(idle, k)
		}
	}
	l.mu.RUnlock()
	if len(idle) == 0 {
		return
	}
	l.mu.Lock()
	for _, k := range idle {
		if s := l.slots[k]; s != nil && uint32(s.cur.Load()>>32)+2 < iv {
			delete(l.slots, k)
		}
	}
	l.mu.Unlock()
}
