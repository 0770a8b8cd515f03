// Package sim replays workloads against Sluice's rate-limiting algorithms on
// a simulated clock and measures what each one decided against the exact
// answer. It is the engine of `sluice simulate`.
//
// Every decision is made by the step functions of package algorithm, the code
// store/memory runs; the simulator only generates hits, routes them to
// instances and counts. The exact reference is algorithm.SlidingLog over the
// limit's own window: a hit is a false accept when the algorithm admitted it
// although the units it had already admitted in the trailing window, plus
// this hit, exceed the quota; a false reject when the algorithm denied a hit
// that would have fitted. The reference is applied to each algorithm's own
// admissions, so one early mistake is counted once, not again for every later
// decision it shifts.
//
// Runs are deterministic for a seed: each key's traffic comes from its own
// PCG stream seeded from (seed, scenario name, key), whatever the number of
// workers.
package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
)

// Scenario is one run: a workload offered to a limit under one placement,
// decided by each of Algorithms in turn (each on the same hits).
type Scenario struct {
	// Name identifies the scenario; it also seeds its traffic.
	Name string
	// Group says which table or plot the scenario belongs to ("load",
	// "workload", "placement", "sync").
	Group string
	// Workload is the traffic.
	Workload Workload
	// Limit is the quota, window and burst; its Algorithm is ignored.
	Limit sluice.Limit
	// Placement is where the counting happens.
	Placement Placement
	// Algorithms to run; nil means every simulated one.
	Algorithms []sluice.Algorithm
	// Series records, for the first key, the units admitted in the trailing
	// window at SeriesPoints instants over the first SeriesSpan of the run.
	Series bool
	// SeriesSpan is how much of the run the series covers (0: the whole run).
	SeriesSpan time.Duration
	// CountAll counts every hit, denied ones too, the way envoyproxy/ratelimit
	// counts by default and Cloudflare's published counter does: a hit is
	// denied when the count including it is over the quota. The algorithm
	// still does all the counting (its state is stepped with a quota no
	// traffic reaches, and its own estimate is compared with the limit's
	// quota); the exact answer counts every hit in the trailing window.
	// Window algorithms only (fixed_window, sliding_window, sliding_log),
	// global placement only.
	CountAll bool
}

// Bounds on the traffic one scenario may generate, so a mistaken flag cannot
// exhaust memory (each key's hits are held at once) or run for days.
const (
	// MaxHitsPerKey bounds the expected hits of the busiest key.
	MaxHitsPerKey = 20_000_000
	// MaxHits bounds the expected hits of a whole scenario.
	MaxHits = 1_000_000_000
)

// SeriesPoints is the number of samples in a Result.Series.
const SeriesPoints = 400

// Result is what one algorithm did in one scenario. Counts are of hits
// (decisions); overshoot and burst are in units relative to the quota.
type Result struct {
	Scenario  string  `json:"scenario"`
	Group     string  `json:"group"`
	Workload  string  `json:"workload"`
	Load      float64 `json:"offered_load"` // units offered per key per window / quota
	Placement string  `json:"placement"`
	// Kind is the placement's kind alone ("global", "local", …).
	Kind      PlacementKind `json:"placement_kind"`
	Instances int           `json:"instances"`
	SyncMS    float64       `json:"sync_ms,omitempty"`
	Limit     string        `json:"limit"`
	Algorithm string        `json:"algorithm"`
	Keys      int           `json:"keys"`
	// CountAll is set when every hit was counted, denied ones too.
	CountAll bool `json:"count_all,omitempty"`

	Decisions int64 `json:"decisions"`
	Admitted  int64 `json:"admitted"` // hits admitted
	// ExactAdmitted is what an exact limiter (a sliding-window log, one for
	// the whole fleet) admits of the same hits; AdmittedRatio is
	// Admitted / ExactAdmitted: above 1 the algorithm let more through.
	ExactAdmitted int64   `json:"exact_admitted"`
	AdmittedRatio float64 `json:"admitted_ratio"`
	FalseAccepts  int64   `json:"false_accepts"` // admitted, exact would deny
	FalseRejects  int64   `json:"false_rejects"` // denied, exact would admit
	// FalseAcceptRate and FalseRejectRate are per decision; WrongRate is
	// their sum.
	FalseAcceptRate float64 `json:"false_accept_rate"`
	FalseRejectRate float64 `json:"false_reject_rate"`
	WrongRate       float64 `json:"wrong_rate"`
	// Overshoot is the most units admitted for one key in any window of the
	// limit's length, divided by the quota (1 = never over).
	Overshoot float64 `json:"overshoot"`
	// Burst is the most units admitted for one key within any tenth of the
	// window, divided by the quota; in the boundary attack, the burst that
	// straddles a window edge.
	Burst float64 `json:"burst"`
	// RecoveryMS is, in the recovery workload, the mean time from the burst
	// to the last denied hit (after it, the steady traffic passes); −1 when
	// the workload has no burst.
	RecoveryMS float64 `json:"recovery_ms"`
	// StateBytes is the most bytes of algorithm state one key held at once
	// (the algorithm package's types; a store adds its own overhead).
	StateBytes int `json:"state_bytes"`
	// StoreOps is the number of calls to the shared store per decision:
	// 1 for global, 0 for local, measured for hybrid and the denied cache.
	StoreOps float64 `json:"store_ops_per_decision"`
	// PeakAllotment is, for hybrid, the most units leased to the instances
	// and not yet spent, at any moment, for one key. The model's overshoot
	// bound: an exact global algorithm (sliding_log) admits at most
	// Quota + PeakAllotment in any window.
	PeakAllotment int64 `json:"peak_allotment,omitempty"`
	// CacheMismatches counts hits the denied-key cache denied that the store
	// would have admitted (must be 0; only with Placement.DeniedCache).
	CacheMismatches int64 `json:"cache_mismatches,omitempty"`
	// Digest is a hash of the sequence of decisions: two algorithms with
	// equal digests decided every hit alike.
	Digest string `json:"digest"`
	// Series is the admitted units in the trailing window over time, for
	// the first key, when the scenario asks for it.
	Series []Point `json:"series,omitempty"`
}

// Point is one sample of a series: units in (T − window, T].
type Point struct {
	T     float64 `json:"t_s"` // seconds from the start
	Units int64   `json:"units"`
}

// Options tune Run.
type Options struct {
	// Seed makes runs reproducible; the same seed gives the same results.
	Seed uint64
	// Workers is the number of scenarios run at once (0: GOMAXPROCS).
	Workers int
	// Progress, if set, is called after each scenario with the number done,
	// the total and the decisions so far. Calls never overlap.
	Progress func(done, total int, decisions int64)
}

// Run runs every scenario and returns the results in scenario order, then
// algorithm order. It stops early with ctx's error if ctx ends.
func Run(ctx context.Context, scenarios []Scenario, opts Options) ([]Result, error) {
	for i := range scenarios {
		if err := scenarios[i].validate(); err != nil {
			return nil, err
		}
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	out := make([][]Result, len(scenarios))
	errs := make([]error, len(scenarios))
	var (
		mu        sync.Mutex
		done      int
		decisions int64
		wg        sync.WaitGroup
	)
	next := make(chan int)
	for range min(workers, len(scenarios)) {
		wg.Go(func() {
			for i := range next {
				out[i], errs[i] = runScenario(ctx, scenarios[i], opts.Seed)
				mu.Lock()
				done++
				for _, r := range out[i] {
					decisions += r.Decisions
				}
				if opts.Progress != nil {
					opts.Progress(done, len(scenarios), decisions)
				}
				mu.Unlock()
			}
		})
	}
feed:
	for i := range scenarios {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var all []Result
	for i := range out {
		if errs[i] != nil {
			return nil, errs[i]
		}
		all = append(all, out[i]...)
	}
	return all, nil
}

func (s Scenario) validate() error {
	l := s.Limit
	l.Algorithm = sluice.SlidingLog
	if l.Quota > algorithm.MaxLogQuota {
		return fmt.Errorf("scenario %q: quota %d is above %d, the most the exact reference keeps", s.Name, l.Quota, algorithm.MaxLogQuota)
	}
	if l.Burst != 0 {
		l.Algorithm = sluice.GCRA
	}
	if err := l.Validate(); err != nil {
		return fmt.Errorf("scenario %q: limit: %w", s.Name, err)
	}
	if l.Quota < 1 {
		return fmt.Errorf("scenario %q: limit: quota must be at least 1", s.Name)
	}
	for _, a := range s.Algorithms {
		if newLimiter(a, algorithm.Params{}, nil) == nil {
			return fmt.Errorf("scenario %q: algorithm %v is not simulated (concurrency has no window to compare with)", s.Name, a)
		}
	}
	if err := s.Placement.validate(); err != nil {
		return fmt.Errorf("scenario %q: %w", s.Name, err)
	}
	if s.CountAll {
		if s.Placement.instances() > 1 || (s.Placement.Kind != "" && s.Placement.Kind != Global) {
			return fmt.Errorf("scenario %q: counting every hit is simulated for one global instance only", s.Name)
		}
		if len(s.Algorithms) == 0 {
			return fmt.Errorf("scenario %q: counting every hit needs its algorithms named (window algorithms only)", s.Name)
		}
		for _, a := range s.Algorithms {
			if a != sluice.FixedWindow && a != sluice.SlidingWindow && a != sluice.SlidingLog {
				return fmt.Errorf("scenario %q: counting every hit is defined for the window algorithms, not %v", s.Name, a)
			}
		}
	}
	w := s.Workload
	switch {
	case w.Kind == Trace && w.Trace == nil:
		return fmt.Errorf("scenario %q: trace workload without trace data", s.Name)
	case w.Kind != Trace && w.Duration < s.Limit.Window:
		return fmt.Errorf("scenario %q: duration %v is shorter than the window %v", s.Name, w.Duration, s.Limit.Window)
	case w.Load < 0 || w.Load > 1000:
		return fmt.Errorf("scenario %q: load %v is outside 0–1000", s.Name, w.Load)
	case w.Keys < 0 || w.Keys > 1_000_000:
		return fmt.Errorf("scenario %q: keys %d is outside 0–1000000", s.Name, w.Keys)
	}
	switch w.Kind {
	case Poisson, OnOff, Boundary, Recovery, Zipf, Diurnal, Trace:
	default:
		return fmt.Errorf("scenario %q: unknown workload %q", s.Name, w.Kind)
	}
	if perKey, total := w.expectedHits(s.Limit.Quota, s.Limit.Window.Microseconds()); perKey > MaxHitsPerKey || total > MaxHits {
		return fmt.Errorf("scenario %q: about %.3g hits for the busiest key and %.3g in all; the bounds are %d and %d (shorten the run or lower the load)",
			s.Name, perKey, total, int64(MaxHitsPerKey), int64(MaxHits))
	}
	return nil
}

// acc accumulates one algorithm's counts over the keys of a scenario.
type acc struct {
	decisions, admitted int64
	fa, fr              int64
	over, burst         int64
	recSum, recN        int64
	bytes               int
	ops                 int64
	mismatch            int64
	peakOut             int64
	digest              uint64
	admittedAt          []Event // first key's admissions, for the series
}

func runScenario(ctx context.Context, s Scenario, seed uint64) ([]Result, error) {
	algs := s.Algorithms
	if len(algs) == 0 {
		algs = simulated
	}
	p := algorithm.NewParams(s.Limit.Quota, s.Limit.Window.Microseconds(), s.Limit.Burst)
	accs := make([]acc, len(algs))
	for i := range accs {
		accs[i].digest = fnvOffset
	}
	h := fnv.New64a()
	h.Write([]byte(s.Name))
	salt := h.Sum64()

	var (
		events   []Event
		inst     []uint16
		offered  int64
		span     int64
		win      = newMeter(p.Window)
		all      = newMeter(p.Window)
		ref      = newMeter(p.Window)
		refAll   = newMeter(p.Window)
		exactN   int64
		tenth    = newMeter(max(p.Window/10, 1))
		logBuf   []algorithm.Entry
		fl       = newFleet(s.Placement, p, s.CountAll)
		keys     = s.Workload.keys()
		duration = s.Workload.Duration.Microseconds()
	)
	if s.Workload.Kind == Trace {
		duration = s.Workload.Trace.Span + p.Window
	}
	zipfTotal := 0.0
	if s.Workload.Kind == Zipf {
		zipfTotal = zipfNorm(keys, s.Workload.skew())
	}
	for k := range keys {
		if k%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		r := rand.New(rand.NewPCG(seed, salt^uint64(k)*0x9e3779b97f4a7c15))
		var burstAt int64
		events, burstAt = s.Workload.events(k, r, p.Quota, p.Window, zipfTotal, events[:0])
		inst = inst[:0]
		for range events {
			inst = append(inst, uint16(r.IntN(s.Placement.instances())))
		}
		for _, e := range events {
			offered += e.Cost
		}
		if n := len(events); n > 0 {
			span = max(span, events[n-1].At)
		}
		// The independent exact limiter, once per key.
		ref.reset()
		refAll.reset()
		for _, e := range events {
			if s.CountAll {
				if refAll.add(e.At, e.Cost) <= p.Quota {
					exactN++
				}
			} else if ref.add(e.At, 0)+e.Cost <= p.Quota {
				ref.add(e.At, e.Cost)
				exactN++
			}
		}
		for i, a := range algs {
			c := &accs[i]
			win.reset()
			all.reset()
			tenth.reset()
			fl.reset(a, logBuf)
			lastDeny := int64(-1)
			for j, e := range events {
				ok := fl.take(int(inst[j]), e.At, e.Cost)
				var before int64
				if ok {
					after := win.add(e.At, e.Cost)
					before = after - e.Cost
					c.over = max(c.over, after)
					c.burst = max(c.burst, tenth.add(e.At, e.Cost))
					c.admitted++
					if k == 0 && s.Series {
						c.admittedAt = append(c.admittedAt, e)
					}
				} else {
					before = win.add(e.At, 0)
					if e.At > burstAt {
						lastDeny = e.At
					}
				}
				exact := before+e.Cost <= p.Quota
				if s.CountAll {
					exact = all.add(e.At, e.Cost) <= p.Quota
				}
				switch {
				case ok && !exact:
					c.fa++
				case !ok && exact:
					c.fr++
				}
				c.digest = (c.digest ^ boolBit(ok)) * fnvPrime
				c.bytes = max(c.bytes, fl.bytes())
			}
			c.decisions += int64(len(events))
			if burstAt >= 0 {
				c.recN++
				if lastDeny > burstAt {
					c.recSum += lastDeny - burstAt
				}
			}
			c.digest = (c.digest ^ uint64(k)) * fnvPrime
			c.ops += fl.ops
			c.mismatch += fl.mismatch
			c.peakOut = max(c.peakOut, fl.peakOut)
			logBuf = fl.logBuf()
		}
	}
	load := 0.0
	if keys > 0 && duration > 0 {
		load = float64(offered) / float64(keys) / (float64(p.Quota) * float64(duration) / float64(p.Window))
	}
	res := make([]Result, len(algs))
	for i, a := range algs {
		c := accs[i]
		r := Result{
			Scenario: s.Name, Group: s.Group, Workload: s.Workload.String(), Load: load, CountAll: s.CountAll,
			Placement: s.Placement.String(), Kind: s.Placement.kind(), Instances: s.Placement.instances(),
			SyncMS: float64(s.Placement.Sync) / float64(time.Millisecond),
			Limit:  limitString(s.Limit), Algorithm: a.String(), Keys: keys,
			Decisions: c.decisions, Admitted: c.admitted, ExactAdmitted: exactN, FalseAccepts: c.fa, FalseRejects: c.fr,
			Overshoot:  float64(c.over) / float64(p.Quota),
			Burst:      float64(c.burst) / float64(p.Quota),
			RecoveryMS: -1, StateBytes: c.bytes, CacheMismatches: c.mismatch, PeakAllotment: c.peakOut,
			Digest: fmt.Sprintf("%016x", c.digest),
		}
		if c.decisions > 0 {
			r.FalseAcceptRate = float64(c.fa) / float64(c.decisions)
			r.FalseRejectRate = float64(c.fr) / float64(c.decisions)
			r.WrongRate = r.FalseAcceptRate + r.FalseRejectRate
			r.StoreOps = float64(c.ops) / float64(c.decisions)
		}
		if exactN > 0 {
			r.AdmittedRatio = float64(c.admitted) / float64(exactN)
		}
		if c.recN > 0 {
			r.RecoveryMS = float64(c.recSum) / float64(c.recN) / 1000
		}
		if s.Series {
			end := span
			if s.SeriesSpan > 0 {
				end = min(end, s.SeriesSpan.Microseconds())
			}
			r.Series = series(c.admittedAt, p.Window, end)
		}
		res[i] = r
	}
	return res, nil
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func boolBit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// series samples the units of ev in (t − w, t] at SeriesPoints instants t
// spread over (0, end].
func series(ev []Event, w, end int64) []Point {
	if end <= 0 {
		return nil
	}
	m := newMeter(w)
	pts := make([]Point, 0, SeriesPoints)
	j := 0
	for i := 1; i <= SeriesPoints; i++ {
		t := end * int64(i) / SeriesPoints
		for j < len(ev) && ev[j].At <= t {
			m.add(ev[j].At, ev[j].Cost)
			j++
		}
		pts = append(pts, Point{T: float64(t) / 1e6, Units: m.add(t, 0)})
	}
	return pts
}

func limitString(l sluice.Limit) string {
	s := fmt.Sprintf("%d/%v", l.Quota, l.Window)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}
