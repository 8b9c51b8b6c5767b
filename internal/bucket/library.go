package bucket

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// library is bucket.lua in the two forms Redis runs it: a function library, called with FCALL
// (Redis 7 and later), and a script, called with EVALSHA, then EVAL when the server lacks it.
//
// The function is the fast path: a library's top level runs once, when it is loaded, so a call
// pays only for its own work. A script's top level runs on every call, and bucket.lua's (its
// helper functions and tables) cost Redis about a fifth of a decision (docs/performance.md). The
// script is the fallback wherever the function cannot run: a server before Redis 7, an ACL that
// denies FUNCTION or FCALL, a node that lost its functions (restarted without persistence, a new
// Cluster shard) until the library is loaded there again. Both run the same code, and a call
// either form refused did not run, so running it in the other cannot apply it twice.
//
// The library's name carries a hash of its code: replicas of different builds during a rolling
// upgrade each call their own version, and an old version stays loaded (a few KB) until an
// operator deletes it (FUNCTION DELETE).
type library struct {
	name   string // of the library and of its one function
	code   string // FUNCTION LOAD's argument
	script *redis.Script

	// scriptsOnly is set for good once the function cannot be used on this deployment: the
	// server does not know FCALL, or the library cannot be loaded.
	scriptsOnly atomic.Bool
	// loading serialises loads: one goroutine loads while the others' calls take the script.
	loading sync.Mutex
}

// newLibrary builds the two forms of source (bucket.lua, between an optional prelude and
// epilogue that tests use to replace the clock).
func newLibrary(prelude, source, epilogue string) *library {
	body := prelude + source + epilogue
	sum := sha1.Sum([]byte(body))
	name := "llm_ratelimit_" + hex.EncodeToString(sum[:8])
	return &library{
		name:   name,
		code:   "#!lua name=" + name + "\n" + body + "\nredis.register_function('" + name + "', run)\n",
		script: redis.NewScript(body + "\nreturn run(_G.KEYS, _G.ARGV)\n"),
	}
}

// functions reports whether calls should try the function first.
func (l *library) functions() bool { return !l.scriptsOnly.Load() }

// needsScript reports whether an FCALL's error means the function did not run and the call
// should run as a script instead; FCALL's own errors only, never the script's.
func needsScript(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR Function not found") ||
		strings.HasPrefix(msg, "ERR unknown command") ||
		strings.HasPrefix(msg, "NOPERM")
}

// refused reacts to an FCALL refused with err (needsScript): a server without functions or
// denying them means scripts from now on; a missing function is loaded, on every master of a
// Cluster. The caller runs its calls as scripts in any case.
func (l *library) refused(ctx context.Context, c redis.UniversalClient, err error) {
	msg := err.Error()
	if !strings.HasPrefix(msg, "ERR Function not found") {
		l.scriptsOnly.Store(true)
		return
	}
	if !l.loading.TryLock() {
		return
	}
	defer l.loading.Unlock()
	var lerr error
	if cc, ok := c.(*redis.ClusterClient); ok {
		lerr = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return l.load(ctx, m) })
	} else {
		lerr = l.load(ctx, c)
	}
	var rerr redis.Error
	if errors.As(lerr, &rerr) {
		// A refusal, not a slow or lost server (the next refused call would load again): an ACL
		// denying FUNCTION, a library the server rejects. Scripts work wherever functions do not.
		l.scriptsOnly.Store(true)
	}
}

// load loads the library on one server; one that another replica loaded first is no error.
func (l *library) load(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, l.code).Err()
	if err != nil && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return err
}

// run calls the library once: FCALL, or the script where the function cannot run.
func (l *library) run(ctx context.Context, c redis.UniversalClient, keys []string, args []any) (any, error) {
	if l.functions() {
		v, err := c.FCall(ctx, l.name, keys, args...).Result()
		if !needsScript(err) {
			return v, err
		}
		l.refused(ctx, c, err)
	}
	return l.script.Run(ctx, c, keys, args...).Result()
}
