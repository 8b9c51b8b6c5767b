package decisionlog

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// Outcomes, as the log and the replay's report name them.
const (
	Allowed = "allowed" // sent on at once
	Held    = "held"    // held for max_wait, then sent on
	Denied  = "denied"  // refused (429, 413, or any other refusal)
)

// OutcomeOf is the outcome of one of internal/filter's decisions ("allowed", "delayed",
// "shadow"...): held for "delayed", allowed for every decision that sends the request on, denied
// for the rest.
func OutcomeOf(decision string) string {
	switch decision {
	case "delayed":
		return Held
	case "allowed", "shadow", "unlimited", "fail_open", "local":
		return Allowed
	}
	return Denied
}

// Decision is one decision of the request path.
type Decision struct {
	// Time is when the shared store answered the decision's take (before any hold): the
	// closest instant to the one the buckets changed, which a replay orders by. A decision no
	// store answered (an unknown route, the fallback, the store down) has the check's arrival.
	Time time.Time
	// Provider, API and Model are the request's, as priced; Path is its path without the query.
	Provider, API, Model, Path string
	// Tenant is the tenant charged, as the rules match it (see the package doc); Priority its
	// class.
	Tenant, Priority string
	// Prompt is the prompt tokens, Output the output reserved. OutputUnset: the request named
	// no maximum (Output is the default, Context the model's window when known). Chars is the
	// body's size read field by field, CacheRead the prompt-cache read expected. Exact says
	// whether Prompt is what the provider counts, Reason why not.
	Prompt, Output    int64
	OutputUnset       bool
	Context, Chars    int64
	CacheRead         int64
	Exact             bool
	Reason            string
	Decision, Outcome string
	// Wait is the hold of a held decision; for a denied one, the wait until it would fit
	// (before response.retry_jitter).
	Wait time.Duration
	// Rules are the names of the rules that applied, comma-separated; Limit the limit that
	// refused ("" when none).
	Rules, Limit string
	// ReservationID ties the settlement to this decision ("" when nothing was reserved).
	ReservationID string
}

// Settlement is one response settled on the response path, recorded once the store applied it
// (a settlement the store failed to apply is not recorded: its reservation stayed).
type Settlement struct {
	// Time is when the store answered the settlement's adjustment (when there was none, when
	// the response ended).
	Time          time.Time
	ReservationID string
	Provider      string
	Model         string
	// Status is the response's HTTP status (0 when the response never started); Local: Envoy
	// answered itself (a timeout, a reset); Found says whether the usage is known (a provider
	// error counts as known: nothing was generated).
	Status int
	Local  bool
	Found  bool
	// The provider's usage: input (cache reads and writes included) and output tokens.
	Input, Output, CacheRead, CacheWrite, Total int64
}

// Record kinds, the "ev" field of a line.
const (
	kindDecision   = "decision"
	kindSettlement = "settlement"
)

const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// AppendDecision appends d as one JSON line (newline included).
func AppendDecision(b []byte, d *Decision) []byte {
	b = append(b, `{"ev":"decision","ts":"`...)
	b = d.Time.UTC().AppendFormat(b, timeLayout)
	b = append(b, '"')
	b = appendString(b, "provider", d.Provider)
	b = appendString(b, "api", d.API)
	b = appendString(b, "model", d.Model)
	b = appendString(b, "path", d.Path)
	b = appendString(b, "tenant", d.Tenant)
	b = appendString(b, "priority", d.Priority)
	b = appendInt(b, "prompt", d.Prompt)
	b = appendInt(b, "output", d.Output)
	if d.OutputUnset {
		b = append(b, `,"output_unset":true`...)
	}
	if d.Context > 0 {
		b = appendInt(b, "context", d.Context)
	}
	if d.Chars > 0 {
		b = appendInt(b, "chars", d.Chars)
	}
	if d.CacheRead > 0 {
		b = appendInt(b, "cache_read", d.CacheRead)
	}
	b = append(b, `,"exact":`...)
	b = strconv.AppendBool(b, d.Exact)
	if d.Reason != "" {
		b = appendString(b, "reason", d.Reason)
	}
	b = appendString(b, "outcome", d.Outcome)
	b = appendString(b, "decision", d.Decision)
	if d.Wait > 0 {
		b = append(b, `,"wait_ms":`...)
		b = strconv.AppendFloat(b, float64(d.Wait.Microseconds())/1000, 'f', -1, 64)
	}
	if d.Rules != "" {
		b = appendString(b, "rules", d.Rules)
	}
	if d.Limit != "" {
		b = appendString(b, "limit", d.Limit)
	}
	if d.ReservationID != "" {
		b = appendString(b, "rid", d.ReservationID)
	}
	return append(b, "}\n"...)
}

// AppendSettlement appends s as one JSON line (newline included).
func AppendSettlement(b []byte, s *Settlement) []byte {
	b = append(b, `{"ev":"settlement","ts":"`...)
	b = s.Time.UTC().AppendFormat(b, timeLayout)
	b = append(b, '"')
	b = appendString(b, "rid", s.ReservationID)
	b = appendString(b, "provider", s.Provider)
	b = appendString(b, "model", s.Model)
	b = appendInt(b, "status", int64(s.Status))
	if s.Local {
		b = append(b, `,"envoy_reply":true`...)
	}
	b = append(b, `,"usage_found":`...)
	b = strconv.AppendBool(b, s.Found)
	if s.Found {
		b = appendInt(b, "input", s.Input)
		b = appendInt(b, "output", s.Output)
		if s.CacheRead > 0 {
			b = appendInt(b, "cache_read", s.CacheRead)
		}
		if s.CacheWrite > 0 {
			b = appendInt(b, "cache_write", s.CacheWrite)
		}
		if s.Total > 0 {
			b = appendInt(b, "total", s.Total)
		}
	}
	return append(b, "}\n"...)
}

func appendInt(b []byte, k string, v int64) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return strconv.AppendInt(b, v, 10)
}

func appendString(b []byte, k, v string) []byte {
	b = append(b, ',', '"')
	b = append(b, k...)
	b = append(b, '"', ':')
	return appendQuoted(b, v)
}

// appendQuoted appends v as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendQuoted(b []byte, v string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(v); {
		c := v[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			b = append(b, c)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\t':
				b = append(b, '\\', 't')
			case '\r':
				b = append(b, '\\', 'r')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, v[i:i+n]...)
		}
		i += n
	}
	return append(b, '"')
}

// Event is one parsed line: a Decision or a Settlement.
type Event struct {
	// IsSettlement tells which of the two the line held.
	IsSettlement bool
	Decision     Decision
	Settlement   Settlement
}

// ErrSyntax wraps every error of Parse.
var ErrSyntax = errors.New("decisionlog: bad line")

// Parse reads one line (with or without its newline) into ev, which it resets first. It reads
// the flat objects the Append functions write, and ignores fields it does not know.
func Parse(line []byte, ev *Event) error { return (*Strings)(nil).Parse(line, ev) }

// Strings keeps one copy of each short string value read (provider, model, tenant, rules...),
// so that a long log's repeated values are not allocated again on every line. The zero value
// is ready; it is not safe for concurrent use.
type Strings struct {
	m map[string]string
	// last is the latest value of each of a few fields, tried before m: most lines repeat
	// their neighbours' provider, API, path, class and outcome.
	last [8]string
}

// maxInterned bounds what Strings keeps: beyond it, values are allocated as Parse does.
const maxInterned = 1 << 16

// Parse is the package's Parse, sharing s's strings; the reservation id, unique per line, is
// never kept. A nil s keeps none.
func (s *Strings) Parse(line []byte, ev *Event) error {
	*ev = Event{}
	p := parser{s: line, strs: s}
	p.space()
	if !p.eat('{') {
		return p.fail("want an object")
	}
	var ts, kind string
	var waitMS float64
	var num int64
	var str string
	for {
		p.space()
		if p.eat('}') {
			break
		}
		if p.seen {
			if !p.eat(',') {
				return p.fail("want , or }")
			}
			p.space()
		}
		p.seen = true
		key, ok := p.key()
		if !ok {
			return p.fail("want a key")
		}
		p.space()
		if !p.eat(':') {
			return p.fail("want :")
		}
		p.space()
		d, s := &ev.Decision, &ev.Settlement
		var err error
		switch string(key) {
		case "ev":
			kind, err = p.needStr()
		case "ts":
			ts, err = p.unique()
		case "provider":
			str, err = p.needStr()
			d.Provider, s.Provider = str, str
		case "model":
			str, err = p.needStr()
			d.Model, s.Model = str, str
		case "rid":
			str, err = p.unique()
			d.ReservationID, s.ReservationID = str, str
		case "api":
			d.API, err = p.needStr()
		case "path":
			d.Path, err = p.needStr()
		case "tenant":
			d.Tenant, err = p.needStr()
		case "priority":
			d.Priority, err = p.needStr()
		case "reason":
			d.Reason, err = p.needStr()
		case "outcome":
			d.Outcome, err = p.needStr()
		case "decision":
			d.Decision, err = p.needStr()
		case "rules":
			d.Rules, err = p.needStr()
		case "limit":
			d.Limit, err = p.needStr()
		case "prompt":
			d.Prompt, err = p.needInt()
		case "output":
			num, err = p.needInt()
			d.Output, s.Output = num, num
		case "context":
			d.Context, err = p.needInt()
		case "chars":
			d.Chars, err = p.needInt()
		case "cache_read":
			num, err = p.needInt()
			d.CacheRead, s.CacheRead = num, num
		case "input":
			s.Input, err = p.needInt()
		case "cache_write":
			s.CacheWrite, err = p.needInt()
		case "total":
			s.Total, err = p.needInt()
		case "status":
			num, err = p.needInt()
			s.Status = int(num)
		case "output_unset":
			d.OutputUnset, err = p.needBool()
		case "exact":
			d.Exact, err = p.needBool()
		case "envoy_reply":
			s.Local, err = p.needBool()
		case "usage_found":
			s.Found, err = p.needBool()
		case "wait_ms":
			waitMS, err = p.needFloat()
		default:
			err = p.skip()
		}
		if err != nil {
			return fmt.Errorf("%w: field %s: %v", ErrSyntax, string(key), err)
		}
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return fmt.Errorf("%w: ts: %v", ErrSyntax, err)
	}
	switch kind {
	case kindDecision:
		ev.Decision.Time = t
		ev.Decision.Wait = time.Duration(waitMS * float64(time.Millisecond))
		if ev.Decision.Outcome == "" {
			ev.Decision.Outcome = OutcomeOf(ev.Decision.Decision)
		}
		ev.Settlement = Settlement{}
	case kindSettlement:
		ev.IsSettlement = true
		ev.Settlement.Time = t
		ev.Decision = Decision{}
	default:
		return fmt.Errorf("%w: ev %q is not decision or settlement", ErrSyntax, kind)
	}
	return nil
}

// parser reads the flat JSON objects of the log.
type parser struct {
	s    []byte
	i    int
	seen bool // a field was read: the next needs a comma
	strs *Strings
}

func (p *parser) fail(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrSyntax, what, p.i)
}

func (p *parser) space() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == '\n' || p.s[p.i] == '\r') {
		p.i++
	}
}

func (p *parser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// str reads a string; the common case (no escape) is one allocation.
func (p *parser) str() (string, bool) {
	if !p.eat('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '"':
			v := p.intern(p.s[start:p.i])
			p.i++
			return v, true
		case '\\':
			return p.escaped(start)
		}
		p.i++
	}
	return "", false
}

// key reads a field's name in place (the log's names hold no escapes).
func (p *parser) key() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '"':
			p.i++
			return p.s[start : p.i-1], true
		case '\\':
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// escaped finishes a string holding escapes, from start (just after its quote).
func (p *parser) escaped(start int) (string, bool) {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case '\\':
			p.i += 2
			continue
		case '"':
			v, err := strconv.Unquote(string(p.s[start-1 : p.i+1]))
			p.i++
			if err != nil {
				return "", false
			}
			return v, true
		}
		p.i++
	}
	return "", false
}

// intern returns b as a string, from p.strs when it is there.
func (p *parser) intern(b []byte) string {
	if p.strs == nil {
		return string(b)
	}
	last := &p.strs.last
	for i := range last {
		if last[i] == string(b) && (len(b) > 0 || i == 0) {
			return last[i]
		}
	}
	if v, ok := p.strs.m[string(b)]; ok {
		copy(last[1:], last[:len(last)-1])
		last[0] = v
		return v
	}
	v := string(b)
	if p.strs.m == nil {
		p.strs.m = map[string]string{}
	}
	if len(p.strs.m) < maxInterned {
		p.strs.m[v] = v
	}
	copy(last[1:], last[:len(last)-1])
	last[0] = v
	return v
}

// unique reads a string value unique to its line (a time, an id), which Strings never keeps.
func (p *parser) unique() (string, error) {
	keep := p.strs
	p.strs = nil
	v, err := p.needStr()
	p.strs = keep
	return v, err
}

func (p *parser) needStr() (string, error) {
	v, ok := p.str()
	if !ok {
		return "", errors.New("want a string")
	}
	return v, nil
}

func (p *parser) token() []byte {
	start := p.i
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == ',' || c == '}' || c == ' ' || c == '\n' || c == '\r' || c == '\t' {
			break
		}
		p.i++
	}
	return p.s[start:p.i]
}

func (p *parser) needInt() (int64, error) {
	t := p.token()
	var n int64
	neg := false
	if len(t) > 0 && t[0] == '-' {
		neg, t = true, t[1:]
	}
	if len(t) == 0 || len(t) > 18 {
		return 0, errors.New("want an integer")
	}
	for _, c := range t {
		if c < '0' || c > '9' {
			return 0, errors.New("want an integer")
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

func (p *parser) needFloat() (float64, error) {
	return strconv.ParseFloat(string(p.token()), 64)
}

func (p *parser) needBool() (bool, error) {
	switch string(p.token()) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errors.New("want true or false")
}

// skip passes over a value of a field Parse does not know: a string or a scalar.
func (p *parser) skip() error {
	if p.i < len(p.s) && p.s[p.i] == '"' {
		if _, ok := p.str(); !ok {
			return errors.New("bad string")
		}
		return nil
	}
	if len(p.token()) == 0 {
		return errors.New("want a value")
	}
	return nil
}
