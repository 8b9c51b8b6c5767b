package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
)

// Record is one request the mock answered, written as one JSON line. Times are Unix seconds of
// the mock's clock.
type Record struct {
	// T is when the request arrived (and was admitted or refused at that time); End when its
	// answer was complete.
	T   float64 `json:"t"`
	End float64 `json:"end"`
	// Status is the HTTP status answered: 200, 429 (over the limit), 400 (unreadable).
	Status   int    `json:"status"`
	Provider string `json:"provider"`
	API      string `json:"api"`
	Model    string `json:"model,omitempty"`
	Prompt   int64  `json:"prompt"`
	Output   int64  `json:"output"`
	Cost     int64  `json:"cost"`
	Stream   bool   `json:"stream,omitempty"`
	// Usage is the usage the answer reported (prompt plus generated tokens): what the limiter
	// settles from.
	Usage int64 `json:"usage,omitempty"`
	// Key is the API key the client sent: the e2e clients name their tenant and class in it.
	Key string `json:"key,omitempty"`
	// RequestID is Envoy's x-request-id, to join with Envoy's access log.
	RequestID string `json:"request_id,omitempty"`
	// FailureModeAllowed is Envoy's x-envoy-auth-failure-mode-allowed header: the request passed
	// because no ext_authz replica answered.
	FailureModeAllowed string `json:"failure_mode_allowed,omitempty"`
	// InFlight is the number of admitted requests being answered at admission, this one included.
	InFlight int64 `json:"inflight,omitempty"`
	// TooLarge and Which explain a 429: the request can never fit, or which limit refused it.
	TooLarge bool   `json:"too_large,omitempty"`
	Which    string `json:"which,omitempty"`
	WaitMS   int64  `json:"wait_ms,omitempty"`
	// Under Anthropic's accounting (-anthropic-itpm, -anthropic-otpm): the usage's input
	// fields, what ITPM counted, and what OTPM counted (max_tokens while refused, the output
	// generated once adjusted).
	Input      int64 `json:"input,omitempty"`
	CacheWrite int64 `json:"cache_write,omitempty"`
	CacheRead  int64 `json:"cache_read,omitempty"`
	ITPM       int64 `json:"itpm,omitempty"`
	OTPM       int64 `json:"otpm,omitempty"`
	// Micros is what the provider billed the answer, in micro-dollars (ledger.go).
	Micros int64 `json:"micros,omitempty"`
}

// ProviderStats are the counters of one provider.
type ProviderStats struct {
	Admitted       int64 `json:"admitted"`
	AdmittedTokens int64 `json:"admitted_tokens"`
	RateLimited    int64 `json:"rate_limited"` // every 429, too_large included
	TooLarge       int64 `json:"too_large"`
	BadRequest     int64 `json:"bad_request"`
}

// Stats is what GET /stats answers.
type Stats struct {
	Mode        Mode                      `json:"mode"`
	Providers   map[string]*ProviderStats `json:"providers"`
	InFlight    int64                     `json:"inflight"`
	MaxInFlight int64                     `json:"max_inflight"`
}

// Recorder writes records and keeps the counters. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	w     io.Writer // nil: counters only
	err   error
	stats Stats
}

// NewRecorder returns a Recorder writing JSON lines to w (nil for none).
func NewRecorder(mode Mode, w io.Writer) *Recorder {
	return &Recorder{w: w, stats: Stats{Mode: mode, Providers: map[string]*ProviderStats{}}}
}

// Start counts an admitted request in flight and returns the number in flight.
func (r *Recorder) Start() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.InFlight++
	r.stats.MaxInFlight = max(r.stats.MaxInFlight, r.stats.InFlight)
	return r.stats.InFlight
}

// Add writes rec and counts it; admitted (status 200) records also end their flight.
func (r *Recorder) Add(rec *Record) {
	line, err := json.Marshal(rec)
	if err != nil {
		line = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.stats.Providers[rec.Provider]
	if p == nil {
		p = &ProviderStats{}
		r.stats.Providers[rec.Provider] = p
	}
	switch rec.Status {
	case 200:
		p.Admitted++
		p.AdmittedTokens += rec.Cost
		r.stats.InFlight--
	case 429:
		p.RateLimited++
		if rec.TooLarge {
			p.TooLarge++
		}
	default:
		p.BadRequest++
	}
	if r.w != nil && line != nil && r.err == nil {
		line = append(line, '\n')
		if _, err := r.w.Write(line); err != nil {
			r.err = fmt.Errorf("record: %w", err)
		}
	}
}

// Stats returns a copy of the counters.
func (r *Recorder) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Providers = make(map[string]*ProviderStats, len(r.stats.Providers))
	names := make([]string, 0, len(r.stats.Providers))
	for k := range r.stats.Providers {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		c := *r.stats.Providers[k]
		s.Providers[k] = &c
	}
	return s
}

// Err returns the first write error.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}
