package bucket

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces the script calls of concurrent decisions into Redis pipelines: a call
// queues, and up to maxInFlight pipelines at a time take whatever is queued (at most maxBatch
// calls each) and send it in one write. While a pipeline is in flight the next calls gather, so
// under load each round trip carries many decisions and Redis and the service make one read and
// one write syscall per batch instead of per decision; an idle service sends each call at once.
//
// Each call is still its own EVALSHA (a pipeline of N calls is N commands), so every decision
// stays atomic and independent: one call's error or NOSCRIPT never affects another's. It is safe
// for concurrent use.
type batcher struct {
	client      redis.UniversalClient
	maxBatch    int
	maxInFlight int

	mu       sync.Mutex
	queue    []*call
	inFlight int
}

// call is one queued script call and, once done is closed, its reply.
type call struct {
	ctx    context.Context
	script *redis.Script
	keys   []string
	args   []any
	v      any
	err    error
	done   chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// do runs script with keys and args in the next pipeline and waits for its reply or for ctx.
// A call whose ctx ends before its pipeline is sent is never sent; one whose ctx ends while the
// pipeline is in flight may still be applied by Redis (as a lost reply may be).
func (b *batcher) do(ctx context.Context, script *redis.Script, keys []string, args []any) (any, error) {
	c := callPool.Get().(*call)
	c.ctx, c.script, c.keys, c.args = ctx, script, keys, args
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.inFlight < b.maxInFlight
	if start {
		b.inFlight++
	}
	b.mu.Unlock()
	if start {
		go b.flush()
	}
	select {
	case <-c.done:
		v, err := c.v, c.err
		*c = call{done: c.done}
		callPool.Put(c)
		return v, err
	case <-ctx.Done():
		// The flusher still owns c: it is dropped, not pooled.
		return nil, ctx.Err()
	}
}

// flush sends queued calls until the queue is empty.
func (b *batcher) flush() {
	var batch []*call
	for {
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		if n == 0 {
			b.inFlight--
			b.mu.Unlock()
			return
		}
		batch = append(batch[:0], b.queue[:n]...)
		rest := copy(b.queue, b.queue[n:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		b.mu.Unlock()
		b.exec(batch)
	}
}

// exec sends one batch as a pipeline of EVALSHA, then EVAL for the calls that met a server
// without the script (after a restart, a failover or SCRIPT FLUSH): NOSCRIPT means that call did
// not run, so running it again cannot apply it twice.
func (b *batcher) exec(batch []*call) {
	live := batch[:0:0]
	var deadline time.Time
	unbounded := false
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			c.done <- struct{}{}
			continue
		}
		live = append(live, c)
		if dl, ok := c.ctx.Deadline(); !ok {
			unbounded = true
		} else if dl.After(deadline) {
			deadline = dl
		}
	}
	if len(live) == 0 {
		return
	}
	// The pipeline lives as long as its longest-lived caller; the others stop waiting on their own.
	ctx := context.Background()
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	cmds := make([]*redis.Cmd, len(live))
	pipe := b.client.Pipeline()
	for i, c := range live {
		cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var again []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		pipe := b.client.Pipeline()
		for _, i := range again {
			cmds[i] = live[i].script.Eval(ctx, pipe, live[i].keys, live[i].args...)
		}
		_, _ = pipe.Exec(ctx)
	}
	for i, c := range live {
		c.v, c.err = cmds[i].Result()
		c.done <- struct{}{}
	}
}
