package bucket

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher coalesces the script calls of concurrent decisions: a call queues, and up to
// maxInFlight flushers at a time take whatever is queued (at most maxBatch calls each) and send
// it as one pipeline holding one script run per tag, each run deciding its tag's calls one after
// the other. While a pipeline is in flight the next calls gather, so under load each round trip
// carries many decisions: Redis and the service make one read and one write syscall per batch
// instead of per decision, and Redis starts one script run per tag instead of one per decision.
// An idle service sends each call at once.
//
// Every call is still decided on its own and atomically: one call's error is its own reply and
// never affects another's (bucket.lua). What a pipeline shares is its fate on the wire: a timeout
// or a lost connection fails every call it carried, as it would have failed each of them alone.
// Calls of one tag share a Redis Cluster hash slot, which a script run requires. It is safe for
// concurrent use.
type batcher struct {
	store       *Redis
	maxBatch    int
	maxInFlight int

	mu       sync.Mutex
	queue    []*call
	inFlight int

	// wake hands new work to a flusher parked after its last batch (unbuffered: a send succeeds
	// only while one waits). A flusher lingers a moment before it exits, so that a busy store
	// keeps its flushers and their grown stacks instead of starting a goroutine, and growing its
	// stack through go-redis's read path again, every few batches.
	wake chan struct{}
}

// flusherLinger is how long an idle flusher waits for work before its goroutine exits.
const flusherLinger = 50 * time.Millisecond

// call is one queued script call and, once done is closed, its reply.
type call struct {
	ctx  context.Context
	tag  string
	keys []string
	arg  string
	v    any
	err  error
	done chan struct{}
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// do runs one call (its keys and binary argument) in the next pipeline and waits for its reply
// or for ctx. A call whose ctx ends before its pipeline is sent is never sent; one whose ctx ends
// while the pipeline is in flight may still be applied by Redis (as a lost reply may be).
func (b *batcher) do(ctx context.Context, tag string, keys []string, arg string) (any, error) {
	c := callPool.Get().(*call)
	c.ctx, c.tag, c.keys, c.arg = ctx, tag, keys, arg
	b.mu.Lock()
	b.queue = append(b.queue, c)
	start := b.inFlight < b.maxInFlight
	if start {
		b.inFlight++
	}
	b.mu.Unlock()
	if start {
		select {
		case b.wake <- struct{}{}: // a parked flusher takes the slot counted above
		default:
			go b.flush()
		}
	}
	select {
	case <-c.done:
		v, err := c.v, c.err
		*c = call{done: c.done}
		callPool.Put(c)
		return v, err
	case <-ctx.Done():
		// The flusher still owns c: it is dropped, not pooled.
		return nil, evalError(ctx.Err())
	}
}

// flush sends queued calls until the queue is empty, then parks for flusherLinger: woken (do
// counted it in flight again), it sends again; else it exits. Before taking each batch it yields
// once, so that the decisions already runnable (most about to queue a call) join this batch
// instead of the next round trip: about a fifth fewer round trips under load, each of which wakes
// Redis; an idle service has nothing else runnable and sends at once.
func (b *batcher) flush() {
	var batch []*call
	var linger *time.Timer
	for {
		runtime.Gosched()
		b.mu.Lock()
		n := min(len(b.queue), b.maxBatch)
		if n > 0 {
			batch = append(batch[:0], b.queue[:n]...)
			rest := copy(b.queue, b.queue[n:])
			clear(b.queue[rest:])
			b.queue = b.queue[:rest]
			b.mu.Unlock()
			b.exec(batch)
			continue
		}
		b.inFlight--
		b.mu.Unlock()
		clear(batch) // the calls belong to their callers again
		if linger == nil {
			linger = time.NewTimer(flusherLinger)
		} else {
			linger.Reset(flusherLinger)
		}
		select {
		case <-b.wake:
		case <-linger.C:
			return
		}
	}
}

// scriptRun is one FCALL (or EVALSHA) of a batch: the calls of one tag, their keys and arguments
// in order.
type scriptRun struct {
	calls []*call
	keys  []string
	args  []any
	cmd   *redis.Cmd
}

// exec sends one batch as a pipeline of FCALL (or EVALSHA, see library), one per tag, then EVAL
// for the runs the server refused (a function or a script it lacks after a restart, a failover or
// a flush): a refused run did not happen, so running it again cannot apply it twice.
func (b *batcher) exec(batch []*call) {
	var deadline time.Time
	unbounded := false
	var runs []*scriptRun
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = evalError(err)
			c.done <- struct{}{}
			continue
		}
		if dl, ok := c.ctx.Deadline(); !ok {
			unbounded = true
		} else if dl.After(deadline) {
			deadline = dl
		}
		var r *scriptRun
		for _, x := range runs {
			if x.calls[0].tag == c.tag {
				r = x
				break
			}
		}
		if r == nil {
			r = &scriptRun{}
			runs = append(runs, r)
		}
		r.calls = append(r.calls, c)
		r.keys = append(r.keys, c.keys...)
		r.args = append(r.args, c.arg)
	}
	if len(runs) == 0 {
		return
	}
	// The pipeline lives as long as its longest-lived caller; the others stop waiting on their own.
	ctx := context.Background()
	if !unbounded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	s, l := b.store, b.store.lib
	pipe := s.client.Pipeline()
	functions := l.functions()
	for _, r := range runs {
		if functions {
			r.cmd = pipe.FCall(ctx, l.name, r.keys, s.withClock(r.args)...)
		} else {
			r.cmd = l.script.EvalSha(ctx, pipe, r.keys, s.withClock(r.args)...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	retry := false
	for _, r := range runs {
		err := r.cmd.Err()
		if err == nil {
			continue
		}
		switch {
		case functions && needsScript(err):
			if !retry { // the batch's runs were refused alike: one load serves them all
				l.refused(ctx, s.client, err)
			}
		case !functions && strings.HasPrefix(err.Error(), "NOSCRIPT"):
		default:
			continue // the run's own error, or its replies
		}
		if !retry {
			pipe, retry = s.client.Pipeline(), true
		}
		r.cmd = l.script.Eval(ctx, pipe, r.keys, s.withClock(r.args)...)
	}
	if retry {
		_, _ = pipe.Exec(ctx)
	}
	for _, r := range runs {
		replies, err := splitReplies(r.cmd.Result())
		if err == nil && len(replies) != len(r.calls) {
			err = replyCountError(len(replies), len(r.calls))
		}
		for i, c := range r.calls {
			if err != nil {
				c.v, c.err = nil, err
			} else {
				c.v, c.err = callReply(replies[i])
			}
			c.done <- struct{}{}
		}
	}
}
