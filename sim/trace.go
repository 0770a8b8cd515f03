package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/store/stack"
)

// TraceData is a recorded workload: per key, its hits in time order, with
// times relative to the earliest hit in the file.
type TraceData struct {
	// Keys names the keys in order of first appearance.
	Keys []string
	// Events holds, for Keys[i], its hits sorted by At (stable for equal
	// times, so file order breaks ties).
	Events [][]Event
	// Span is the time from the first hit to the last, in microseconds.
	Span int64
	// Hits is the number of hits read.
	Hits int
	// Origin is the time of the earliest hit, in microseconds since the Unix
	// epoch (for numeric seconds, since their own zero). Replays shift the
	// hits by Origin modulo the window so epoch-aligned windows fall where
	// they fell for the recorded traffic.
	Origin int64
}

// Bounds on what ParseTrace accepts, so a hostile or mistaken file cannot
// exhaust memory or overflow the clock.
const (
	// MaxTraceHits is the most hits a trace may hold.
	MaxTraceHits = 20_000_000
	// MaxTraceKeys is the most distinct keys a trace may hold.
	MaxTraceKeys = 1_000_000
	// MaxTraceLine is the longest line, in bytes.
	MaxTraceLine = 64 << 10
	// MaxTraceKey is the longest key, in bytes.
	MaxTraceKey = 1024
	// MaxTraceCost is the largest cost of one hit.
	MaxTraceCost = 1_000_000_000
	// maxTraceSeconds bounds a numeric time (about year 5138), so times in
	// microseconds stay far below 2^53.
	maxTraceSeconds = 1e11
	// maxTraceSpan bounds the time from the first hit to the last (µs):
	// ten years, the longest window a limit may have.
	maxTraceSpan = int64(stack.MaxWindow / time.Microsecond)
)

// ParseTrace reads a recorded workload, one hit per line, in either of two
// formats, told apart by the first line that is not blank or a comment:
//
//   - JSON lines: {"time": T, "key": "alice", "cost": 2} — cost is optional
//     (default 1) and unknown fields are errors.
//   - CSV: time,key[,cost] — an optional header line "time,key,cost"; lines
//     starting with # are comments.
//
// A time T is either a number of seconds (any origin, up to six decimals,
// e.g. 1767225600.25 or 0.5) or an RFC 3339 timestamp; a file uses one or the
// other. Times need not be sorted. Costs are integers from 0 to
// MaxTraceCost. name prefixes every error, which gives the line and field:
// "trace.csv:12: cost: …". ParseTrace never panics on any input.
func ParseTrace(name string, r io.Reader) (*TraceData, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), MaxTraceLine)
	p := traceParser{name: name, index: map[string]int{}}
	format := 0 // 0 unknown, 1 CSV, 2 JSON lines
	for sc.Scan() {
		p.line++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || (format != 2 && line[0] == '#') {
			continue
		}
		if format == 0 {
			format = 1
			if line[0] == '{' {
				format = 2
			} else if isHeader(line) {
				continue
			}
		}
		var err error
		if format == 2 {
			err = p.jsonLine(line)
		} else {
			err = p.csvLine(string(line))
		}
		if err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("%s:%d: line longer than %d bytes", name, p.line+1, MaxTraceLine)
		}
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if p.hits == 0 {
		return nil, fmt.Errorf("%s: no hits in the trace", name)
	}
	t := &TraceData{Keys: p.keys, Events: p.events, Hits: p.hits, Origin: p.first}
	for _, ev := range t.Events {
		slices.SortStableFunc(ev, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
		for i := range ev {
			ev[i].At -= p.first
		}
		t.Span = max(t.Span, ev[len(ev)-1].At)
	}
	if t.Span > maxTraceSpan {
		return nil, fmt.Errorf("%s: the hits span %v, more than %v", name,
			time.Duration(t.Span)*time.Microsecond, time.Duration(maxTraceSpan)*time.Microsecond)
	}
	return t, nil
}

func isHeader(line []byte) bool {
	f := strings.Split(string(line), ",")
	return len(f) >= 2 && strings.EqualFold(strings.TrimSpace(f[0]), "time") &&
		strings.EqualFold(strings.TrimSpace(f[1]), "key")
}

type traceParser struct {
	name   string
	line   int
	keys   []string
	index  map[string]int
	events [][]Event
	hits   int
	first  int64
	// timeKind is 0 until the first time is read, then 1 for seconds and 2
	// for RFC 3339.
	timeKind int
}

func (p *traceParser) errf(field, format string, args ...any) error {
	return fmt.Errorf("%s:%d: %s: %s", p.name, p.line, field, fmt.Sprintf(format, args...))
}

func (p *traceParser) csvLine(line string) error {
	f := strings.Split(line, ",")
	if len(f) < 2 || len(f) > 3 {
		return fmt.Errorf("%s:%d: want time,key[,cost], got %d fields", p.name, p.line, len(f))
	}
	at, err := p.time(strings.TrimSpace(f[0]))
	if err != nil {
		return err
	}
	cost := int64(1)
	if len(f) == 3 {
		s := strings.TrimSpace(f[2])
		c, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return p.errf("cost", "%q is not an integer", clip(s))
		}
		cost = c
	}
	return p.add(at, strings.TrimSpace(f[1]), cost)
}

type jsonHit struct {
	Time json.RawMessage `json:"time"`
	Key  *string         `json:"key"`
	Cost *int64          `json:"cost"`
}

func (p *traceParser) jsonLine(line []byte) error {
	var h jsonHit
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return fmt.Errorf("%s:%d: %w", p.name, p.line, err)
	}
	if dec.More() {
		return fmt.Errorf("%s:%d: more than one JSON value on the line", p.name, p.line)
	}
	if len(h.Time) == 0 {
		return p.errf("time", "missing")
	}
	if h.Key == nil {
		return p.errf("key", "missing")
	}
	var s string
	if h.Time[0] == '"' {
		if err := json.Unmarshal(h.Time, &s); err != nil {
			return p.errf("time", "%v", err)
		}
	} else {
		s = string(h.Time)
	}
	at, err := p.time(s)
	if err != nil {
		return err
	}
	cost := int64(1)
	if h.Cost != nil {
		cost = *h.Cost
	}
	return p.add(at, *h.Key, cost)
}

// time parses seconds (decimal) or RFC 3339 into microseconds.
func (p *traceParser) time(s string) (int64, error) {
	kind, at, err := 1, int64(0), error(nil)
	if s != "" && (s[0] >= '0' && s[0] <= '9') && !strings.ContainsAny(s, "T:-") {
		at, err = seconds(s)
	} else {
		kind = 2
		var t time.Time
		t, err = time.Parse(time.RFC3339Nano, s)
		if err == nil && (t.Year() < 1 || t.Year() > 5000) {
			err = errors.New("year out of range 1–5000")
		}
		at = t.UnixMicro()
	}
	if err != nil {
		return 0, p.errf("time", "%q: %v (want seconds like 1767225600.25 or RFC 3339)", clip(s), err)
	}
	if p.timeKind != 0 && p.timeKind != kind {
		return 0, p.errf("time", "%q mixes numeric seconds and RFC 3339 times in one file", clip(s))
	}
	p.timeKind = kind
	return at, nil
}

// seconds parses a non-negative decimal number of seconds into microseconds,
// exactly (digits past the sixth decimal are dropped).
func seconds(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole) > 12 || strings.TrimLeft(whole, "0123456789") != "" ||
		strings.TrimLeft(frac, "0123456789") != "" {
		return 0, errors.New("not a decimal number of seconds")
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > maxTraceSeconds {
		return 0, fmt.Errorf("more than %.0f seconds", float64(maxTraceSeconds))
	}
	frac = (frac + "000000")[:6]
	f, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, errors.New("not a decimal number of seconds")
	}
	return w*1_000_000 + f, nil
}

func (p *traceParser) add(at int64, key string, cost int64) error {
	switch {
	case key == "":
		return p.errf("key", "empty")
	case len(key) > MaxTraceKey:
		return p.errf("key", "longer than %d bytes", MaxTraceKey)
	case cost < 0 || cost > MaxTraceCost:
		return p.errf("cost", "%d is outside 0–%d", cost, MaxTraceCost)
	case p.hits >= MaxTraceHits:
		return fmt.Errorf("%s:%d: more than %d hits", p.name, p.line, MaxTraceHits)
	}
	i, ok := p.index[key]
	if !ok {
		if len(p.keys) >= MaxTraceKeys {
			return p.errf("key", "more than %d distinct keys", MaxTraceKeys)
		}
		i = len(p.keys)
		p.index[key] = i
		p.keys = append(p.keys, key)
		p.events = append(p.events, nil)
	}
	if p.hits == 0 || at < p.first {
		p.first = at
	}
	p.events[i] = append(p.events[i], Event{At: at, Cost: cost})
	p.hits++
	return nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
