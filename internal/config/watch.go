package config

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions configures Watch.
type WatchOptions struct {
	// Load turns the file's new content into a configuration. Default Parse (the file is a
	// limits file); a tenant_plans.file's watcher uses Config.WithAssignments.
	Load func(data []byte) (*Config, error)
	// OnLoad receives every new valid configuration (not the first one, which Watch's caller
	// loaded itself).
	OnLoad func(*Config)
	// OnError receives every rejected reload; the previous configuration stays in force.
	OnError func(error)
	// Settle is how long the file must be quiet before it is read again (editors and Kubernetes
	// ConfigMap updates write in several steps). Default 100ms.
	Settle time.Duration
	// Poll re-reads the file at this interval as well, in case an event is missed (network file
	// systems). Default 10s; negative disables.
	Poll time.Duration
}

// Watch reloads the file at path whenever it changes, until ctx ends. It watches the file's
// directory, so it follows editors that replace the file and Kubernetes ConfigMap symlink swaps.
// A file whose content did not change is not reloaded. Watch returns when ctx ends, or at once
// with an error when the directory cannot be watched.
func Watch(ctx context.Context, path string, opts WatchOptions) error {
	if opts.Settle <= 0 {
		opts.Settle = 100 * time.Millisecond
	}
	if opts.Load == nil {
		opts.Load = func(data []byte) (*Config, error) { return Parse(data, path) }
	}
	if opts.Poll == 0 {
		opts.Poll = 10 * time.Second
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("config: watch: %w", err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("config: watch %s: %w", filepath.Dir(path), err)
	}

	last, _ := os.ReadFile(path)
	reload := func() {
		data, err := os.ReadFile(path)
		if err != nil {
			if opts.OnError != nil {
				opts.OnError(fmt.Errorf("config: %w", err))
			}
			return
		}
		if bytes.Equal(data, last) {
			return
		}
		last = data
		c, err := opts.Load(data)
		if err != nil {
			if opts.OnError != nil {
				opts.OnError(err)
			}
			return
		}
		if opts.OnLoad != nil {
			opts.OnLoad(c)
		}
	}

	settle := time.NewTimer(time.Hour)
	settle.Stop()
	var poll <-chan time.Time
	if opts.Poll > 0 {
		t := time.NewTicker(opts.Poll)
		defer t.Stop()
		poll = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 {
				settle.Reset(opts.Settle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			if opts.OnError != nil {
				opts.OnError(fmt.Errorf("config: watch: %w", err))
			}
		case <-settle.C:
			reload()
		case <-poll:
			reload()
		}
	}
}
