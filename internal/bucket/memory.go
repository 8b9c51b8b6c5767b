package bucket

import (
	"context"
	"math"
	"sync"
	"time"
)

// Constants shared with bucket.lua (which holds its own copies; the conformance suite proves
// they agree).
const (
	expiryMarginMS = 1000
	dayUS          = 86400e6
	epsilon        = 1e-14
	busyUS         = 1e6
)

// MemoryOptions configures a Memory store.
type MemoryOptions struct {
	// Now is the clock, at microsecond resolution like Redis TIME; nil means time.Now.
	Now func() time.Time
}

// Memory keeps buckets in process memory with exactly the semantics of the Redis store (it mirrors
// bucket.lua operation by operation, in the same float64 arithmetic). It is the embedded default
// for a single replica. It is safe for concurrent use; one mutex serialises decisions, as the
// script does on a Redis server.
type Memory struct {
	now func() time.Time

	mu      sync.Mutex
	buckets map[memKey]*memBucket
	writes  uint // drives the incremental expiry sweep
}

type memKey struct {
	tag, name string
	alg, slot byte
}

// memBucket is one stored bucket, the fields of its Redis hash.
type memBucket struct {
	expires float64 // microseconds; gone once the clock passes it, like a Redis TTL
	level   float64 // token bucket: level at ts
	ts      float64
	slots   []slot  // sliding window: admitted amount per sub-window, by index
	used    float64 // quota: used in period (debt above limit)
	period  float64
	leases  map[string]float64 // concurrency: lease id -> expiry (µs)
}

type slot struct{ idx, amount float64 }

// NewMemory returns an empty in-memory store.
func NewMemory(opts MemoryOptions) *Memory {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, buckets: make(map[memKey]*memBucket)}
}

// Ping always succeeds unless ctx is done.
func (m *Memory) Ping(ctx context.Context) error { return ctx.Err() }

// Take decides req like Redis.Take.
func (m *Memory) Take(ctx context.Context, req *Request) (Result, error) {
	if err := req.validate(); err != nil {
		return Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var work [MaxBuckets]loaded
	bs := work[:len(req.Buckets)]

	m.mu.Lock()
	defer m.mu.Unlock()
	clock := m.now()
	now := float64(clock.UnixMicro())
	for i := range bs {
		b := &req.Buckets[i]
		m.load(&bs[i], memKey{req.Tag, b.Name, b.Code(), b.Slot}, paramsOf(b, b.Cost, clock), now, req.Lease)
	}

	outcome, blocking, wait := Allowed, -1, 0.0
	busy := false
	for i := range bs {
		b := &bs[i]
		b.decide(now)
		if b.impossible && outcome != Impossible {
			outcome, blocking = Impossible, i
		}
		if outcome != Impossible && b.wait > wait {
			wait, blocking = b.wait, i
		}
		busy = busy || b.busy
	}
	if outcome != Impossible && wait > 0 {
		if maxWait := float64(req.MaxWait / time.Microsecond); maxWait > 0 && wait <= maxWait && !busy {
			outcome = Delayed
		} else {
			outcome = Denied
		}
	}
	if outcome == Impossible {
		wait = 0
	}
	if outcome == Allowed || outcome == Delayed {
		for i := range bs {
			b := &bs[i]
			if b.p.amount <= 0 {
				continue
			}
			switch b.p.alg {
			case CodeConcurrency:
				b.leaseAdd(req.Lease, now+b.p.period)
			case CodeTokenBucket:
				b.level -= b.p.amount
			case CodeSlidingWindow:
				b.slotAdd(now+wait, b.p.amount)
			default:
				b.used += b.p.amount
			}
			m.store(b, now)
		}
	}

	at := now
	if outcome == Delayed {
		at += wait
	}
	res := Result{Outcome: outcome, Wait: durationUS(int64(wait)), Blocking: blocking, At: time.UnixMicro(int64(at)), Buckets: make([]State, len(bs))}
	for i := range bs {
		b := &bs[i]
		res.Buckets[i] = State{
			Remaining: int64(b.remaining()),
			Limit:     int64(b.p.cap),
			Reset:     durationUS(int64(b.reset(now))),
			Wait:      durationUS(int64(b.wait)),
		}
	}
	return res, nil
}

// Adjust applies adj like Redis.Adjust.
func (m *Memory) Adjust(ctx context.Context, tag string, adj []Adjustment) error {
	lease, at, err := validateAdjustments(adj)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	last := math.Inf(1) // the newest sub-window index a refund may take from
	m.mu.Lock()
	defer m.mu.Unlock()
	clock := m.now()
	now := float64(clock.UnixMicro())
	var b loaded
	for i := range adj {
		a := &adj[i]
		b = loaded{}
		m.load(&b, memKey{tag, a.Name, a.Code(), a.Slot}, paramsOf(&a.Spec, a.Delta, clock), now, lease)
		d := b.p.amount
		switch b.p.alg {
		case CodeConcurrency:
			// ZREM: the lease goes, nothing else is written (a set left empty is deleted).
			if d > 0 && lease != "" && b.entry != nil {
				delete(b.entry.leases, lease)
				if len(b.entry.leases) == 0 {
					delete(m.buckets, b.key)
				}
			}
			continue
		case CodeTokenBucket:
			b.level = min(b.level+d, b.p.cap)
		case CodeSlidingWindow:
			if d < 0 {
				b.slotAdd(now, -d)
				break
			}
			// A refund leaves the sub-window its cost was counted in, then older ones (see
			// Adjustment.At); at unknown, the most recent first.
			if !at.IsZero() {
				last = math.Floor(float64(at.UnixMicro()) / b.w)
			}
			for x := len(b.slots) - 1; x >= 0 && d > 0; x-- {
				if b.slots[x].idx > last {
					continue
				}
				take := min(b.slots[x].amount, d)
				b.slots[x].amount -= take
				d -= take
				b.sum -= take
			}
		default:
			b.used = max(0, b.used-d)
		}
		m.store(&b, now)
	}
	return nil
}

// Lower applies lv like Redis.Lower.
func (m *Memory) Lower(ctx context.Context, tag string, lv []Level) error {
	if err := validateLevels(lv); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	clock := m.now()
	now := float64(clock.UnixMicro())
	var b loaded
	for i := range lv {
		l := &lv[i]
		if l.Algorithm == Concurrency {
			continue
		}
		b = loaded{}
		m.load(&b, memKey{tag, l.Name, l.Code(), l.Slot}, paramsOf(&l.Spec, l.Remaining, clock), now, "")
		d := b.current() - b.p.amount
		if d <= 0 {
			continue
		}
		switch b.p.alg {
		case CodeTokenBucket:
			b.level = b.p.amount
		case CodeSlidingWindow:
			b.slotAdd(now, d)
		default:
			b.used += d
		}
		m.store(&b, now)
	}
	return nil
}

// Peek reads specs like Redis.Peek: nothing is written, not even the removal of an expired
// entry (which reads as absent, as in Redis).
func (m *Memory) Peek(ctx context.Context, tag string, specs []Spec) ([]Snapshot, error) {
	specs, err := peekSpecs(tag, specs)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	clock := m.now()
	now := float64(clock.UnixMicro())
	out := make([]Snapshot, len(specs))
	for i := range specs {
		sp := &specs[i]
		b := loaded{peek: true}
		m.load(&b, memKey{tag, sp.Name, sp.Code(), sp.Slot}, paramsOf(sp, 0, clock), now, "")
		out[i] = Snapshot{Remaining: int64(b.remaining()), Limit: int64(b.p.cap), Reset: durationUS(int64(b.reset(now)))}
		if b.p.alg == CodeConcurrency {
			out[i].Leases = int64(b.cnt)
		}
	}
	return out, nil
}

// Reset makes specs full like Redis.Reset: a token bucket in a shared key takes the key's other
// slots with it.
func (m *Memory) Reset(ctx context.Context, tag string, specs []Spec) error {
	specs, err := peekSpecs(tag, specs)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range specs {
		sp := &specs[i]
		if sp.Slot == 0 {
			delete(m.buckets, memKey{tag, sp.Name, sp.Code(), 0})
			continue
		}
		for slot := byte(1); slot <= MaxSlots; slot++ {
			delete(m.buckets, memKey{tag, sp.Name, sp.Code(), slot})
		}
	}
	return nil
}

// loaded is one bucket of a call, as of now, before anything is written.
type loaded struct {
	p     params
	key   memKey
	entry *memBucket // nil when absent

	level, ts float64 // token bucket

	w, k  float64 // sliding window: sub-window length and current index
	slots []slot  // live sub-windows (aliases entry.slots until written)
	sum   float64

	used, per float64 // quota

	cnt, first, last float64 // concurrency: live leases, earliest and latest expiry (0: none)
	leases           map[string]float64

	wait       float64
	impossible bool
	busy       bool
	// peek: load leaves an expired entry in place (Peek writes nothing).
	peek bool
}

// load reads key as bucket.lua does; lease is the call's lease ("" for none).
func (m *Memory) load(b *loaded, key memKey, p params, now float64, lease string) {
	b.p, b.key = p, key
	e := m.buckets[key]
	if e != nil && now > e.expires {
		if !b.peek {
			delete(m.buckets, key)
		}
		e = nil
	}
	b.entry = e
	switch p.alg {
	case CodeConcurrency:
		if e == nil {
			break
		}
		b.leases = e.leases
		for _, exp := range e.leases {
			if exp <= now {
				continue
			}
			b.cnt++
			if b.first == 0 || exp < b.first {
				b.first = exp
			}
			b.last = max(b.last, exp)
		}
		if exp, ok := e.leases[lease]; ok && lease != "" && exp > now {
			b.cnt--
		}
	case CodeTokenBucket:
		if e == nil {
			b.level, b.ts = p.cap, now
		} else {
			b.level, b.ts = e.level, e.ts
			if now > b.ts {
				b.level = b.level + (now-b.ts)*p.limit/p.period
				b.ts = now
			}
		}
		if b.level > p.cap {
			b.level = p.cap
		}
	case CodeSlidingWindow:
		b.w = math.Ceil(p.period / SlidingWindows)
		b.k = math.Floor(now / b.w)
		if e != nil {
			first := 0
			for first < len(e.slots) && e.slots[first].idx < b.k-SlidingWindows {
				first++
			}
			b.slots = e.slots[first:]
			for _, s := range b.slots {
				b.sum += s.amount
			}
		}
	default:
		cur := periodOf(p.alg, now, p.period)
		if e == nil {
			b.used, b.per = 0, cur
		} else {
			b.used, b.per = e.used, e.period
			if b.per < cur {
				b.used = max(0, b.used-p.limit*(cur-b.per))
				b.per = cur
			}
		}
	}
}

// decide sets b.wait, or b.impossible, for a take.
func (b *loaded) decide(now float64) {
	need := b.p.amount + b.p.reserve
	b.wait = 0
	switch {
	case need > b.p.cap:
		b.impossible = true
	case b.p.alg == CodeConcurrency:
		if b.cnt+need > b.p.cap {
			b.busy = true
			b.wait = busyUS
			if b.first != 0 {
				b.wait = max(1, min(b.first-now, busyUS))
			}
		}
	case b.p.alg == CodeTokenBucket:
		if b.level < need-float64(b.p.cap*epsilon) {
			b.wait = math.Ceil((need - b.level) * b.p.period / b.p.limit)
		}
	case b.p.alg == CodeSlidingWindow:
		if b.sum+need > b.p.cap {
			left := b.sum
			for _, s := range b.slots {
				left -= s.amount
				if left+need <= b.p.cap {
					b.wait = (s.idx+SlidingWindows+1)*b.w - now
					break
				}
			}
		}
	default:
		if b.used+need > b.p.cap {
			ahead := math.Ceil((b.used + need - b.p.cap) / b.p.limit)
			b.wait = periodStart(b.p.alg, b.per+ahead, b.p.period) - now
		}
	}
}

// slotAdd adds amount to the sub-window holding time at, copying the slots before the first write.
func (b *loaded) slotAdd(at, amount float64) {
	idx := math.Floor(at / b.w)
	b.sum += amount
	pos := len(b.slots)
	for x := range b.slots {
		if b.slots[x].idx == idx {
			b.slots[x].amount += amount
			return
		}
		if b.slots[x].idx > idx {
			pos = x
			break
		}
	}
	b.slots = append(b.slots, slot{})
	copy(b.slots[pos+1:], b.slots[pos:])
	b.slots[pos] = slot{idx, amount}
}

// leaseAdd takes (or renews) lease until exp, copying the entry's leases before the first write.
func (b *loaded) leaseAdd(lease string, exp float64) {
	leases := make(map[string]float64, len(b.leases)+1)
	for k, v := range b.leases {
		leases[k] = v
	}
	leases[lease] = exp
	b.leases = leases
	b.cnt++
	if b.first == 0 || exp < b.first {
		b.first = exp
	}
	b.last = max(b.last, exp)
}

// current is what a provider's report is compared with: remaining, unrounded.
func (b *loaded) current() float64 {
	switch b.p.alg {
	case CodeTokenBucket:
		return b.level
	case CodeSlidingWindow:
		return b.p.cap - b.sum
	}
	return b.p.cap - b.used
}

// remaining is the reported level, rounded down.
func (b *loaded) remaining() float64 {
	switch b.p.alg {
	case CodeConcurrency:
		return b.p.cap - b.cnt
	case CodeTokenBucket:
		return math.Floor(b.level + float64(b.p.cap*epsilon))
	case CodeSlidingWindow:
		return b.p.cap - b.sum
	}
	return b.p.cap - b.used
}

// reset is the time until the bucket is full (a quota: until its next period).
func (b *loaded) reset(now float64) float64 {
	switch b.p.alg {
	case CodeConcurrency:
		if b.last == 0 {
			return 0
		}
		return b.last - now
	case CodeTokenBucket:
		if b.level >= b.p.cap {
			return 0
		}
		return math.Ceil((b.p.cap - b.level) * b.p.period / b.p.limit)
	case CodeSlidingWindow:
		if len(b.slots) == 0 {
			return 0
		}
		return (b.slots[len(b.slots)-1].idx+SlidingWindows+1)*b.w - now
	}
	return periodStart(b.p.alg, b.per+1, b.p.period) - now
}

// store writes b back, or deletes it when full, with its expiry.
func (m *Memory) store(b *loaded, now float64) {
	full := false
	switch b.p.alg {
	case CodeConcurrency:
		// ZREMRANGEBYSCORE of the expired leases, then the set is gone when empty.
		live := make(map[string]float64, len(b.leases))
		for k, exp := range b.leases {
			if exp > now {
				live[k] = exp
			}
		}
		b.leases = live
		full = len(live) == 0
	case CodeTokenBucket:
		full = b.level >= b.p.cap
	case CodeSlidingWindow:
		full = b.sum <= 0
	default:
		full = b.used <= 0
	}
	if full {
		delete(m.buckets, b.key)
		return
	}
	e := b.entry
	if e == nil {
		e = new(memBucket)
		m.buckets[b.key] = e
		b.entry = e
	}
	switch b.p.alg {
	case CodeConcurrency:
		e.leases = b.leases
		e.expires = now + (math.Ceil(b.reset(now)/1000)+expiryMarginMS)*1000
		return
	case CodeTokenBucket:
		e.level, e.ts = b.level, b.ts
	case CodeSlidingWindow:
		// Keep the live, non-empty sub-windows, in a slice of the entry's own.
		kept := e.slots[:0]
		if len(b.slots) > cap(e.slots) {
			kept = make([]slot, 0, len(b.slots))
		}
		for _, s := range b.slots {
			if s.amount > 0 {
				kept = append(kept, s)
			}
		}
		e.slots = kept
		b.slots = kept
	default:
		e.used, e.period = b.used, b.per
	}
	live := b.reset(now)
	if b.p.alg == CodeDaily || b.p.alg == CodeMonthly {
		live = periodStart(b.p.alg, b.per+math.Ceil(b.used/b.p.limit), b.p.period) - now
	}
	e.expires = now + (math.Ceil(live/1000)+expiryMarginMS)*1000
	m.writes++
	if m.writes%64 == 0 {
		m.sweep(now)
	}
}

// sweep deletes a few expired buckets, like Redis's active expiry: Go's map iteration starts at a
// random place, so repeated sweeps sample the whole map.
func (m *Memory) sweep(now float64) {
	n := 0
	for k, e := range m.buckets {
		if now > e.expires {
			delete(m.buckets, k)
		}
		if n++; n == 16 {
			return
		}
	}
}

// periodOf is the index of the calendar period holding t in the zone packed in z
// (zoneOffsets): local days, or months since year 0.
func periodOf(alg byte, t, z float64) float64 {
	off, _ := unpackZone(z)
	day := math.Floor((t + off) / dayUS)
	if alg == CodeDaily {
		return day
	}
	y, m := civil(day)
	return y*12 + m - 1
}

// periodStart is the first microsecond of calendar period p in the zone packed in z, whose
// offset at the next period's start it takes.
func periodStart(alg byte, p, z float64) float64 {
	_, off := unpackZone(z)
	if alg == CodeDaily {
		return p*dayUS - off
	}
	y := math.Floor(p / 12)
	return firstDay(y, p-y*12+1)*dayUS - off
}

// civil converts days since 1970-01-01 to (year, month) in the proleptic Gregorian calendar
// (H. Hinnant's civil_from_days), in floats like bucket.lua.
func civil(days float64) (y, m float64) {
	z := days + 719468
	era := math.Floor(z / 146097)
	doe := z - era*146097
	yoe := math.Floor((doe - math.Floor(doe/1460) + math.Floor(doe/36524) - math.Floor(doe/146096)) / 365)
	doy := doe - (365*yoe + math.Floor(yoe/4) - math.Floor(yoe/100))
	mp := math.Floor((5*doy + 2) / 153)
	m = mp + 3
	if mp >= 10 {
		m = mp - 9
	}
	y = yoe + era*400
	if m <= 2 {
		y++
	}
	return y, m
}

// firstDay is the number of days from 1970-01-01 to the first day of (y, m) (days_from_civil).
func firstDay(y, m float64) float64 {
	if m <= 2 {
		y--
	}
	era := math.Floor(y / 400)
	yoe := y - era*400
	mp := m - 3
	if m <= 2 {
		mp = m + 9
	}
	doy := math.Floor((153*mp + 2) / 5)
	doe := yoe*365 + math.Floor(yoe/4) - math.Floor(yoe/100) + doy
	return era*146097 + doe - 719468
}
