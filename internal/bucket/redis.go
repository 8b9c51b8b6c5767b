package bucket

import (
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed bucket.lua
var luaSource string

// lib is shared by every Redis store: its forms and hashes are computed once.
var lib = newLibrary("", luaSource, "")

// RedisOptions configures a Redis store.
type RedisOptions struct {
	// Prefix starts every key (for example "rl:"), so that several deployments or tests can share a
	// server. Braces are escaped: the hash tag is always the request's Tag.
	Prefix string
	// MaxBatch, when positive, coalesces the script calls of concurrent decisions into Redis
	// pipelines of at most MaxBatch calls, one FCALL per tag deciding that tag's calls one
	// after the other: fewer syscalls and script runs on both sides under load, each decision
	// still atomic and decided on its own. Zero sends each call on its own.
	MaxBatch int
	// MaxInFlight is how many pipelines may be in flight at once when MaxBatch is positive;
	// default 2.
	MaxInFlight int
}

// Redis keeps buckets in Redis (a single node, a Sentinel-managed master or a Redis Cluster) and
// decides with one FCALL of bucket.lua per call, or per tag of a batch (RedisOptions.MaxBatch).
// It is safe for concurrent use by any number of goroutines and processes: the script is atomic
// on the server.
type Redis struct {
	client redis.UniversalClient
	prefix string
	// replicasKey is the sorted set of live replicas (Heartbeat), under the prefix as given.
	replicasKey string
	lib         *library
	// now, when set, replaces the server's TIME inside the script; tests only (see redis_test.go).
	now func() time.Time
	// batch, when set, coalesces concurrent calls into pipelines (RedisOptions.MaxBatch).
	batch *batcher
}

// NewRedis returns a store on client. The client is the caller's to close.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	s := &Redis{client: client, prefix: cleanPrefix(opts.Prefix), replicasKey: opts.Prefix + "replicas", lib: lib}
	if opts.MaxBatch > 0 {
		if opts.MaxInFlight <= 0 {
			opts.MaxInFlight = 2
		}
		s.batch = &batcher{store: s, maxBatch: opts.MaxBatch, maxInFlight: opts.MaxInFlight, wake: make(chan struct{})}
	}
	return s
}

// Ping checks that Redis answers.
func (s *Redis) Ping(ctx context.Context) error {
	if err := s.client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("bucket: ping redis: %w", err)
	}
	return nil
}

// Take decides req in one round trip: every bucket pays its cost now (Allowed), or in advance
// within req.MaxWait (Delayed), or none does (Denied, Impossible). An over-limit request is a
// Result, never an error; errors are invalid requests (ErrInvalid), Redis failures and malformed
// replies (ErrReply). If the reply to a Take that Redis executed is lost, go-redis may retry it and
// debit twice: an over-charge, never an over-admission.
func (s *Redis) Take(ctx context.Context, req *Request) (Result, error) {
	if err := req.validate(); err != nil {
		return Result{}, err
	}
	n := len(req.Buckets)
	keys := s.keys(req.Tag, n, req.spec)

	var buf [512]byte
	v, err := s.run(ctx, req.Tag, keys, appendTake(buf[:0], req, len(keys), s.clock()))
	if err != nil {
		return Result{}, err
	}
	return parseTake(v, n)
}

// Adjust applies every adjustment in one round trip: a positive Delta refunds (never above
// capacity), a negative one charges (into debt if need be). tag must be the Request.Tag the
// buckets were taken under.
func (s *Redis) Adjust(ctx context.Context, tag string, adj []Adjustment) error {
	lease, at, err := validateAdjustments(adj)
	if err != nil {
		return err
	}
	spec := func(i int) *Spec { return &adj[i].Spec }
	keys := s.keys(tag, len(adj), spec)
	var buf [512]byte
	var atUS time.Duration
	if !at.IsZero() {
		atUS = time.Duration(at.UnixMicro()) * time.Microsecond
	}
	a := appendHeader(buf[:0], 'A', len(keys), atUS, lease)
	now := s.clock()
	for i := range adj {
		a = appendParams(a, paramsOf(&adj[i].Spec, adj[i].Delta, now), continues(spec, i))
	}
	return s.runCount(ctx, "adjust", tag, keys, a, len(adj))
}

// Lower brings every bucket of lv down to the level a provider reports, in one round trip: a
// bucket holding more than Level.Remaining is charged the difference, one holding less is left
// alone (see Level). tag must be the Request.Tag the buckets are taken under.
func (s *Redis) Lower(ctx context.Context, tag string, lv []Level) error {
	if err := validateLevels(lv); err != nil {
		return err
	}
	spec := func(i int) *Spec { return &lv[i].Spec }
	keys := s.keys(tag, len(lv), spec)
	var buf [512]byte
	a := appendHeader(buf[:0], 'L', len(keys), 0, "")
	now := s.clock()
	for i := range lv {
		a = appendParams(a, paramsOf(&lv[i].Spec, lv[i].Remaining, now), continues(spec, i))
	}
	return s.runCount(ctx, "lower", tag, keys, a, len(lv))
}

// Peek reads the state of every bucket of specs under tag, in one round trip, without writing
// anything: no key is created, changed or given another expiry. Costs, floors and leases are
// ignored. It is a call of its own, never coalesced with decisions (RedisOptions.MaxBatch).
func (s *Redis) Peek(ctx context.Context, tag string, specs []Spec) ([]Snapshot, error) {
	specs, err := peekSpecs(tag, specs)
	if err != nil {
		return nil, err
	}
	spec := func(i int) *Spec { return &specs[i] }
	keys := s.keys(tag, len(specs), spec)
	var buf [512]byte
	a := appendHeader(buf[:0], 'P', len(keys), 0, "")
	now := s.clock()
	for i := range specs {
		a = appendParams(a, paramsOf(&specs[i], 0, now), continues(spec, i))
	}
	replies, err := splitReplies(s.lib.run(ctx, s.client, keys, s.withClock([]any{string(a)})))
	if err != nil {
		return nil, err
	}
	if len(replies) != 1 {
		return nil, replyCountError(len(replies), 1)
	}
	v, err := callReply(replies[0])
	if err != nil {
		return nil, err
	}
	return parsePeek(v, len(specs))
}

// Reset makes every bucket of specs under tag full, deleting its key in one DEL (the keys share
// the tag's hash slot). A token bucket in a shared key (Spec.Slot) takes the key's other slots
// with it: the same rule's and scope's other first windows, which are full again too.
func (s *Redis) Reset(ctx context.Context, tag string, specs []Spec) error {
	specs, err := peekSpecs(tag, specs)
	if err != nil {
		return err
	}
	keys := s.keys(tag, len(specs), func(i int) *Spec { return &specs[i] })
	if err := s.client.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("bucket: reset: %w", err)
	}
	return nil
}

// peekSpecs validates the buckets of a Peek or Reset, returning a copy without costs, floors
// or leases.
func peekSpecs(tag string, specs []Spec) ([]Spec, error) {
	out := make([]Spec, len(specs))
	for i, sp := range specs {
		sp.Cost, sp.Floor = 0, 0
		out[i] = sp
	}
	r := Request{Tag: tag, Buckets: out}
	if err := r.validate(); err != nil {
		return nil, err
	}
	return out, nil
}

// parsePeek decodes the script's peek reply (4n little-endian int64s), checking its size.
func parsePeek(v any, n int) ([]Snapshot, error) {
	raw, ok := v.(string)
	if !ok || len(raw) != 8*4*n {
		return nil, fmt.Errorf("%w: peek returned %T of %d bytes, want %d", ErrReply, v, lenOf(v), 8*4*n)
	}
	num := func(i int) int64 { return int64(binary.LittleEndian.Uint64([]byte(raw[8*i : 8*i+8]))) }
	out := make([]Snapshot, n)
	for i := range n {
		j := 4 * i
		out[i] = Snapshot{Remaining: num(j), Limit: num(j + 1), Reset: durationUS(max(num(j+2), 0)), Leases: max(num(j+3), 0)}
	}
	return out, nil
}

// runCount runs an adjust or lower call of n buckets, whose reply is n.
func (s *Redis) runCount(ctx context.Context, op, tag string, keys []string, argv []byte, n int) error {
	v, err := s.run(ctx, tag, keys, argv)
	if err != nil {
		return err
	}
	if got, ok := v.(int64); !ok || got != int64(n) {
		return fmt.Errorf("%w: %s returned %v (%T), want %d", ErrReply, op, v, v, n)
	}
	return nil
}

// appendTake appends the script argument of a take of req, whose buckets are in nkeys keys: its
// header, then every bucket with its cost (a zoned quota's zone as of now).
func appendTake(a []byte, req *Request, nkeys int, now time.Time) []byte {
	a = appendHeader(a, 'T', nkeys, req.MaxWait, req.Lease)
	for i := range req.Buckets {
		b := &req.Buckets[i]
		a = appendParams(a, paramsOf(b, b.Cost, now), continues(req.spec, i))
	}
	return a
}

// appendHeader appends the call's header in the script's format (struct '<c1Bddc0'): the
// operation, the number of keys (at most MaxBuckets), max_wait in microseconds (an adjust's:
// the time its refunds were counted at, since the epoch), then the lease's length and bytes
// ("-" for none).
func appendHeader(a []byte, op byte, nkeys int, maxWait time.Duration, lease string) []byte {
	if lease == "" {
		lease = "-"
	}
	a = append(a, op, byte(nkeys))
	a = binary.LittleEndian.AppendUint64(a, math.Float64bits(float64(maxWait/time.Microsecond)))
	a = binary.LittleEndian.AppendUint64(a, math.Float64bits(float64(len(lease))))
	return append(a, lease...)
}

// keys builds the keys of a call's n buckets in one allocation (the keys share the backing
// string): one per bucket, but one for the buckets of a shared key next to each other
// (continues), as the script reads them.
func (s *Redis) keys(tag string, n int, spec func(int) *Spec) []string {
	var lens [MaxBuckets]int
	size, count := 0, 0
	for i := range n {
		if !continues(spec, i) {
			lens[count] = keyLen(s.prefix, tag, spec(i))
			size += lens[count]
			count++
		}
	}
	var all strings.Builder
	all.Grow(size)
	var scratch [256]byte
	for i := range n {
		if !continues(spec, i) {
			all.Write(appendKey(scratch[:0], s.prefix, tag, spec(i)))
		}
	}
	joined := all.String()
	keys := make([]string, count)
	start := 0
	for i := range count {
		keys[i] = joined[start : start+lens[i]]
		start += lens[i]
	}
	return keys
}

// run executes one call (keys and argument) of the script: alone, in a run of its own, or with
// MaxBatch coalesced with the concurrent calls of its tag: FCALL, or the script where the function
// cannot run (library).
func (s *Redis) run(ctx context.Context, tag string, keys []string, argv []byte) (any, error) {
	if s.batch != nil {
		return s.batch.do(ctx, tag, keys, string(argv))
	}
	replies, err := splitReplies(s.lib.run(ctx, s.client, keys, s.withClock([]any{string(argv)})))
	if err != nil {
		return nil, err
	}
	if len(replies) != 1 {
		return nil, replyCountError(len(replies), 1)
	}
	return callReply(replies[0])
}

// clock is the time a call's zoned quotas are placed in their zone at: the test clock's when
// set, else this process's, which the script's TIME matches within the clocks' skew (a zone's
// offset changes a few times a year: a skew of seconds misplaces only the calls of those
// seconds).
func (s *Redis) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// withClock appends the test clock's time, when set, to a run's arguments (see redis_test.go).
func (s *Redis) withClock(args []any) []any {
	if s.now != nil {
		t := s.now()
		args = append(args, t.Unix(), t.Nanosecond()/1000)
	}
	return args
}

// evalError is the error of a call that did not get its reply: Redis's, the network's or the
// caller's context's.
func evalError(err error) error {
	return fmt.Errorf("bucket: eval script: %w", err)
}

// splitReplies checks a script run's reply: one reply per call.
func splitReplies(v any, err error) ([]any, error) {
	if err != nil {
		return nil, evalError(err)
	}
	replies, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: script returned %T, want an array", ErrReply, v)
	}
	return replies, nil
}

func replyCountError(got, want int) error {
	return fmt.Errorf("%w: script returned %d replies for %d calls", ErrReply, got, want)
}

// callReply is one call's reply, or its error.
func callReply(v any) (any, error) {
	if err, ok := v.(error); ok {
		return nil, evalError(err)
	}
	return v, nil
}

// appendParams appends one bucket in the script's format (struct '<c1ddddd'): alg, limit,
// period, cap, amount, reserve. The numbers are doubles, as in the script: the amounts are
// integers up to MaxAmount, exact in a double. A token bucket in a shared key has its slot's
// digit for alg, plus 4 when it is in the previous bucket's key (cont), as the script reads it.
func appendParams(a []byte, p params, cont bool) []byte {
	switch {
	case p.slot > 0 && cont:
		a = append(a, '4'+p.slot)
	case p.slot > 0:
		a = append(a, '0'+p.slot)
	default:
		a = append(a, p.alg)
	}
	for _, x := range [...]float64{p.limit, p.period, p.cap, p.amount, p.reserve} {
		a = binary.LittleEndian.AppendUint64(a, math.Float64bits(x))
	}
	return a
}

// parseTake decodes the script's take reply (4 + 4n little-endian int64s), checking its size
// and ranges.
func parseTake(v any, n int) (Result, error) {
	raw, ok := v.(string)
	if !ok || len(raw) != 8*(4+4*n) {
		return Result{}, fmt.Errorf("%w: take returned %T of %d bytes, want %d", ErrReply, v, lenOf(v), 8*(4+4*n))
	}
	num := func(i int) int64 { return int64(binary.LittleEndian.Uint64([]byte(raw[8*i : 8*i+8]))) }
	out, blocking, wait, at := num(0), num(1), num(2), num(3)
	if out < int64(Allowed) || out > int64(Impossible) || blocking < -1 || blocking >= int64(n) || wait < 0 || at < 0 {
		return Result{}, fmt.Errorf("%w: take reply header %d %d %d %d out of range", ErrReply, out, blocking, wait, at)
	}
	res := Result{
		Outcome:  Outcome(out),
		Wait:     durationUS(wait),
		Blocking: int(blocking),
		At:       time.UnixMicro(at),
		Buckets:  make([]State, n),
	}
	for i := range n {
		j := 4 + 4*i
		res.Buckets[i] = State{
			Remaining: num(j),
			Limit:     num(j + 1),
			Reset:     durationUS(max(num(j+2), 0)),
			Wait:      durationUS(max(num(j+3), 0)),
		}
	}
	return res, nil
}

func lenOf(v any) int {
	if s, ok := v.(string); ok {
		return len(s)
	}
	return -1
}
