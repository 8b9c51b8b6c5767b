package decisionlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configures a Log.
type Options struct {
	// Path is the file written, "-" for Stdout. Required.
	Path string
	// Stdout is what "-" writes to. Default os.Stdout.
	Stdout io.Writer
	// MaxBytes is the size from which the file is rotated: renamed Path.1 (Path.1 to Path.2,
	// and so on), and a new one started. Default 100 MiB; ignored for "-".
	MaxBytes int64
	// Keep is how many rotated files are kept (Path.1 to Path.Keep); 0: none, the file is
	// truncated instead. Default (negative) 5.
	Keep int
	// Buffer is how many records may wait for the writer; a record finding it full is dropped
	// and counted. Default 8192.
	Buffer int
	// Registerer receives llm_ratelimit_decision_log_dropped_total. Default: not registered.
	Registerer prometheus.Registerer
}

// Log writes decisions and settlements from a bounded buffer on its own goroutine. Its
// methods are safe for concurrent use; Decision and Settlement never block.
type Log struct {
	ch      chan entry
	done    chan struct{}
	dropped atomic.Uint64
	metric  prometheus.Counter
	closing sync.Once
	err     error

	opts Options
	file *os.File
	w    *bufio.Writer
	size int64
}

type entry struct {
	settlement bool
	d          Decision
	s          Settlement
}

// Open starts a Log writing to opts.Path (appending to an existing file).
func Open(opts Options) (*Log, error) {
	if opts.Path == "" {
		return nil, errors.New("decisionlog: a path is required (- for stdout)")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 100 << 20
	}
	if opts.Keep < 0 {
		opts.Keep = 5
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 8192
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	l := &Log{ch: make(chan entry, opts.Buffer), done: make(chan struct{}), opts: opts,
		metric: prometheus.NewCounter(prometheus.CounterOpts{Name: "llm_ratelimit_decision_log_dropped_total",
			Help: "Decision log records dropped because the writer's buffer was full."})}
	if opts.Path == "-" {
		l.w = bufio.NewWriterSize(opts.Stdout, 64<<10)
	} else if err := l.open(); err != nil {
		return nil, err
	}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(l.metric); err != nil {
			l.closeFile()
			return nil, fmt.Errorf("decisionlog: %w", err)
		}
	}
	go l.run()
	return l, nil
}

// Decision records d, or drops and counts it when the buffer is full.
func (l *Log) Decision(d *Decision) { l.put(entry{d: *d}) }

// Settlement records s, or drops and counts it when the buffer is full.
func (l *Log) Settlement(s *Settlement) { l.put(entry{settlement: true, s: *s}) }

func (l *Log) put(e entry) {
	select {
	case l.ch <- e:
	default:
		l.dropped.Add(1)
		l.metric.Inc()
	}
}

// Dropped is how many records were dropped so far.
func (l *Log) Dropped() uint64 { return l.dropped.Load() }

// Close writes what is buffered, stops the writer and closes the file. Nothing may be recorded
// after it. It returns the first write error, if any.
func (l *Log) Close() error {
	l.closing.Do(func() { close(l.ch) })
	<-l.done
	return l.err
}

func (l *Log) run() {
	defer close(l.done)
	var buf []byte
	for {
		e, ok := <-l.ch
		if !ok {
			break
		}
		for {
			buf = buf[:0]
			if e.settlement {
				buf = AppendSettlement(buf, &e.s)
			} else {
				buf = AppendDecision(buf, &e.d)
			}
			l.write(buf)
			// Flush once the buffer is empty: one write per burst, and nothing stays
			// unwritten while the service is idle.
			select {
			case e, ok = <-l.ch:
			default:
				ok = false
			}
			if !ok {
				break
			}
		}
		l.flush()
	}
	l.flush()
	l.closeFile()
}

func (l *Log) write(line []byte) {
	if l.file != nil && l.size > 0 && l.size+int64(len(line)) > l.opts.MaxBytes {
		l.rotate()
	}
	if l.w == nil {
		return
	}
	n, err := l.w.Write(line)
	l.size += int64(n)
	l.fail(err)
}

func (l *Log) flush() {
	if l.w != nil {
		l.fail(l.w.Flush())
	}
}

func (l *Log) fail(err error) {
	if err != nil && l.err == nil {
		l.err = fmt.Errorf("decisionlog: %w", err)
	}
}

func (l *Log) open() error {
	f, err := os.OpenFile(l.opts.Path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("decisionlog: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("decisionlog: %w", err)
	}
	l.file, l.size = f, st.Size()
	if l.w == nil {
		l.w = bufio.NewWriterSize(f, 64<<10)
	} else {
		l.w.Reset(f)
	}
	return nil
}

func (l *Log) closeFile() {
	if l.file != nil {
		l.fail(l.file.Close())
		l.file = nil
	}
}

// rotate shifts Path.i to Path.i+1 (the oldest beyond Keep removed), Path to Path.1, and opens a
// new Path. A failure is kept as the Log's error, and writing goes on where it can.
func (l *Log) rotate() {
	l.flush()
	l.closeFile()
	p := l.opts.Path
	if l.opts.Keep == 0 {
		l.fail(os.Remove(p))
	} else {
		os.Remove(p + "." + strconv.Itoa(l.opts.Keep)) // absent until Keep rotations happened
		for i := l.opts.Keep - 1; i >= 1; i-- {
			from := p + "." + strconv.Itoa(i)
			if _, err := os.Stat(from); err == nil {
				l.fail(os.Rename(from, p+"."+strconv.Itoa(i+1)))
			}
		}
		l.fail(os.Rename(p, p+".1"))
	}
	if err := l.open(); err != nil {
		l.fail(err)
		l.w = nil
	}
}
