package observe

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Tracker. The zero value of each field selects its
// default.
type Options struct {
	// K is the number of counters per summary: the error bound of a count
	// over a window of N decisions is N/K. Default 64.
	K int
	// Bucket is the time resolution of windows. Default 1 minute.
	Bucket time.Duration
	// Buckets is how many buckets are kept: the longest window is
	// Buckets × Bucket. Default 15.
	Buckets int
	// MaxRules bounds how many (domain, rule) pairs are tracked; decisions of
	// further rules are counted in Dropped and otherwise ignored. Default
	// 1024.
	MaxRules int
	// MaxKeyBytes truncates keys longer than this. Default 256.
	MaxKeyBytes int
}

func (o Options) withDefaults() Options {
	if o.K <= 0 {
		o.K = 64
	}
	if o.Bucket <= 0 {
		o.Bucket = time.Minute
	}
	if o.Buckets <= 0 {
		o.Buckets = 15
	}
	if o.MaxRules <= 0 {
		o.MaxRules = 1024
	}
	if o.MaxKeyBytes <= 0 {
		o.MaxKeyBytes = 256
	}
	return o
}

// MemoryBound returns the most memory, in bytes, a Tracker with these
// options holds in summaries, whatever the traffic: every tracked rule
// keeps at most Buckets × 2 summaries of K entries, each entry a key of at
// most MaxKeyBytes plus about 100 bytes of counters, map slot and heap slot.
func (o Options) MemoryBound() int64 {
	o = o.withDefaults()
	return int64(o.MaxRules) * int64(o.Buckets) * 2 * int64(o.K) * int64(o.MaxKeyBytes+100)
}

// Tracker counts, per (domain, rule), the keys checked and the keys denied,
// in time buckets, each a pair of TopK summaries. Its memory is bounded by
// Options.MemoryBound however many distinct keys arrive. It is safe for
// concurrent use.
type Tracker struct {
	opts Options

	mu    sync.RWMutex
	rules map[ruleID]*ruleTop

	dropped atomic.Uint64
}

type ruleID struct{ domain, rule string }

type ruleTop struct {
	mu      sync.Mutex
	buckets []bucket // ring, indexed by bucket number mod len
}

type bucket struct {
	n                int64 // bucket number (unix time / Bucket); 0 = unused
	checked, denials *TopK
}

// NewTracker returns an empty tracker.
func NewTracker(opts Options) *Tracker {
	return &Tracker{opts: opts.withDefaults(), rules: map[ruleID]*ruleTop{}}
}

// Options returns the tracker's options, defaults filled in.
func (t *Tracker) Options() Options { return t.opts }

// Dropped returns how many decisions were ignored because MaxRules rules
// were already tracked.
func (t *Tracker) Dropped() uint64 { return t.dropped.Load() }

// Observe counts one decision of key under (domain, rule) at now. key is
// not retained; it is truncated to MaxKeyBytes.
func (t *Tracker) Observe(now time.Time, domain, rule string, key []byte, denied bool) {
	if len(key) > t.opts.MaxKeyBytes {
		key = key[:t.opts.MaxKeyBytes]
	}
	id := ruleID{domain, rule}
	t.mu.RLock()
	rt := t.rules[id]
	t.mu.RUnlock()
	if rt == nil {
		t.mu.Lock()
		if rt = t.rules[id]; rt == nil {
			if len(t.rules) >= t.opts.MaxRules {
				t.mu.Unlock()
				t.dropped.Add(1)
				return
			}
			rt = &ruleTop{buckets: make([]bucket, t.opts.Buckets)}
			t.rules[id] = rt
		}
		t.mu.Unlock()
	}
	n := now.UnixNano() / int64(t.opts.Bucket)
	rt.mu.Lock()
	b := &rt.buckets[int(n%int64(len(rt.buckets)))]
	if b.n != n {
		if b.checked == nil {
			b.checked, b.denials = NewTopK(t.opts.K), NewTopK(t.opts.K)
		} else {
			b.checked.reset()
			b.denials.reset()
		}
		b.n = n
	}
	b.checked.Add(key, 1)
	if denied {
		b.denials.Add(key, 1)
	}
	rt.mu.Unlock()
}

func (t *TopK) reset() {
	t.total = 0
	t.h = t.h[:0]
	clear(t.index)
}

// Window is the merged summaries of one rule over a window.
type Window struct {
	Domain  string `json:"domain"`
	Rule    string `json:"rule"`
	Checked *TopK  `json:"-"`
	Denials *TopK  `json:"-"`
}

// ErrWindow is returned for a window outside what the tracker keeps.
var ErrWindow = errors.New("observe: window out of range")

// Windows returns, for every tracked rule (or only domain/rule when not
// empty), the summaries merged over the buckets that overlap [now−window,
// now].
func (t *Tracker) Windows(now time.Time, window time.Duration, domain, rule string) ([]Window, error) {
	if window <= 0 || window > time.Duration(t.opts.Buckets)*t.opts.Bucket {
		return nil, fmt.Errorf("%w: %v (want up to %v)", ErrWindow, window, time.Duration(t.opts.Buckets)*t.opts.Bucket)
	}
	last := now.UnixNano() / int64(t.opts.Bucket)
	first := now.Add(-window).UnixNano() / int64(t.opts.Bucket)
	t.mu.RLock()
	ids := make([]ruleID, 0, len(t.rules))
	for id := range t.rules {
		if (domain == "" || id.domain == domain) && (rule == "" || id.rule == rule) {
			ids = append(ids, id)
		}
	}
	t.mu.RUnlock()
	sort.Slice(ids, func(i, j int) bool {
		if ids[i].domain != ids[j].domain {
			return ids[i].domain < ids[j].domain
		}
		return ids[i].rule < ids[j].rule
	})
	out := make([]Window, 0, len(ids))
	for _, id := range ids {
		t.mu.RLock()
		rt := t.rules[id]
		t.mu.RUnlock()
		w := Window{Domain: id.domain, Rule: id.rule, Checked: NewTopK(t.opts.K), Denials: NewTopK(t.opts.K)}
		rt.mu.Lock()
		for i := range rt.buckets {
			b := &rt.buckets[i]
			if b.checked != nil && b.n >= first && b.n <= last {
				w.Checked.Merge(b.checked)
				w.Denials.Merge(b.denials)
			}
		}
		rt.mu.Unlock()
		out = append(out, w)
	}
	return out, nil
}

// Export returns the tracker's buckets that overlap [now−window, now], for
// another instance to merge (see Merge).
func (t *Tracker) Export(now time.Time, window time.Duration) Export {
	first := now.Add(-window).UnixNano() / int64(t.opts.Bucket)
	last := now.UnixNano() / int64(t.opts.Bucket)
	ex := Export{Bucket: t.opts.Bucket, K: t.opts.K}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for id, rt := range t.rules {
		rt.mu.Lock()
		for i := range rt.buckets {
			b := &rt.buckets[i]
			if b.checked == nil || b.n < first || b.n > last || b.checked.total == 0 {
				continue
			}
			ex.Buckets = append(ex.Buckets, ExportBucket{Domain: id.domain, Rule: id.rule, N: b.n,
				Checked: b.checked.Snapshot(), Denials: b.denials.Snapshot()})
		}
		rt.mu.Unlock()
	}
	return ex
}

// Export is a tracker's recent buckets, as one instance publishes them for
// the fleet.
type Export struct {
	Bucket  time.Duration  `json:"bucket"`
	K       int            `json:"k"`
	Buckets []ExportBucket `json:"buckets"`
}

// ExportBucket is one rule's summaries in one time bucket.
type ExportBucket struct {
	Domain  string  `json:"domain"`
	Rule    string  `json:"rule"`
	N       int64   `json:"n"` // bucket number: unix time / Bucket
	Checked Summary `json:"checked"`
	Denials Summary `json:"denials"`
}

// MergeExports merges the buckets of several instances' exports that
// overlap [now−window, now], per rule (or only domain/rule when not
// empty). Exports with a different bucket length than the first are
// skipped.
func MergeExports(now time.Time, window time.Duration, domain, rule string, exports ...Export) []Window {
	if len(exports) == 0 {
		return nil
	}
	bl := exports[0].Bucket
	if bl <= 0 {
		return nil
	}
	first := now.Add(-window).UnixNano() / int64(bl)
	last := now.UnixNano() / int64(bl)
	merged := map[ruleID]*Window{}
	for _, ex := range exports {
		if ex.Bucket != bl {
			continue
		}
		for _, b := range ex.Buckets {
			if b.N < first || b.N > last || (domain != "" && b.Domain != domain) || (rule != "" && b.Rule != rule) {
				continue
			}
			id := ruleID{b.Domain, b.Rule}
			w := merged[id]
			if w == nil {
				k := max(b.Checked.K, 1)
				w = &Window{Domain: b.Domain, Rule: b.Rule, Checked: NewTopK(k), Denials: NewTopK(k)}
				merged[id] = w
			}
			w.Checked.Merge(b.Checked.TopK())
			w.Denials.Merge(b.Denials.TopK())
		}
	}
	out := make([]Window, 0, len(merged))
	for _, w := range merged {
		out = append(out, *w)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Domain != out[j].Domain {
			return out[i].Domain < out[j].Domain
		}
		return out[i].Rule < out[j].Rule
	})
	return out
}

// Offender is one key of a top list: its estimated denials and checks,
// each with the most it may be overestimated by.
type Offender struct {
	Key        string `json:"key"`
	Denials    uint64 `json:"denials"`
	DenialsErr uint64 `json:"denials_error"`
	Checks     uint64 `json:"checks"`
	ChecksErr  uint64 `json:"checks_error"`
}

// Report is the top list of one rule over a window.
type Report struct {
	Domain  string `json:"domain"`
	Rule    string `json:"rule"`
	Checks  uint64 `json:"checks"`
	Denials uint64 `json:"denials"`
	// ErrorBound is the most any count in the lists overestimates: the
	// window's total divided by K (checks and denials each).
	ErrorBound struct {
		Checks  uint64 `json:"checks"`
		Denials uint64 `json:"denials"`
	} `json:"error_bound"`
	// TopDenied lists the most denied keys, most first.
	TopDenied []Offender `json:"top_denied"`
	// TopChecked lists the most checked keys, most first.
	TopChecked []Offender `json:"top_checked"`
}

// Report returns the top n keys of w by denials and by checks.
func (w Window) Report(n int) Report {
	r := Report{Domain: w.Domain, Rule: w.Rule, Checks: w.Checked.Total(), Denials: w.Denials.Total()}
	r.ErrorBound.Checks, r.ErrorBound.Denials = w.Checked.Bound(), w.Denials.Bound()
	offender := func(key string) Offender {
		o := Offender{Key: key}
		if e, ok := w.Denials.Lookup(key); ok {
			o.Denials, o.DenialsErr = e.Count, e.Err
		} else {
			o.DenialsErr = w.Denials.Min() // not held: at most Min
		}
		if e, ok := w.Checked.Lookup(key); ok {
			o.Checks, o.ChecksErr = e.Count, e.Err
		} else {
			o.ChecksErr = w.Checked.Min()
		}
		return o
	}
	for _, e := range w.Denials.Top(n) {
		r.TopDenied = append(r.TopDenied, offender(e.Key))
	}
	for _, e := range w.Checked.Top(n) {
		r.TopChecked = append(r.TopChecked, offender(e.Key))
	}
	if r.TopDenied == nil {
		r.TopDenied = []Offender{}
	}
	if r.TopChecked == nil {
		r.TopChecked = []Offender{}
	}
	return r
}
