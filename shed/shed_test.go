package shed

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestParsePriority(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Priority
		ok   bool
	}{
		{"critical", Critical, true}, {" Critical ", Critical, true}, {"DEFAULT", Default, true},
		{"sheddable", Sheddable, true}, {"test", Test, true},
		{"", Default, false}, {"urgent", Default, false}, {"unspecified", Default, false},
	} {
		got, ok := ParsePriority(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("ParsePriority(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if Unspecified.String() != "default" {
		t.Errorf("Unspecified.String() = %q, want default", Unspecified.String())
	}
	var p Priority
	if err := p.UnmarshalText([]byte("urgent")); err == nil {
		t.Errorf("UnmarshalText(urgent) = nil error, want one")
	}
}

func TestClassify(t *testing.T) {
	c, err := NewClassifier(PriorityConfig{
		Routes: []Route{
			{Prefix: "/admin/", Default: Critical},
			{Prefix: "/batch/", Default: Sheddable},
			{Prefix: "/checkout", Max: Critical},
			{Prefix: "/checkout/gift", Default: Sheddable, Max: Default},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		route, claimed string
		want           Priority
	}{
		{"/x", "", Default},
		{"/x", "critical", Default}, // cannot raise without the route's leave
		{"/x", "test", Test},        // may always lower
		{"/x", "bogus", Default},
		{"/admin/users", "", Critical},
		{"/admin/users", "sheddable", Sheddable},
		{"/batch/job", "", Sheddable},
		{"/batch/job", "default", Sheddable},
		{"/checkout", "", Default},
		{"/checkout", "critical", Critical}, // the route allows raising to critical
		{"/checkout/gift", "critical", Default},
		{"/checkout/gift", "", Sheddable},
	} {
		if got := c.Classify(tc.route, tc.claimed); got != tc.want {
			t.Errorf("Classify(%q, %q) = %v, want %v", tc.route, tc.claimed, got, tc.want)
		}
	}
	var zero *Classifier
	if got := zero.Classify("/a", "critical"); got != Default {
		t.Errorf("nil Classifier: got %v, want default", got)
	}
}

func TestConfigValidate(t *testing.T) {
	err := Config{
		Priority: PriorityConfig{Routes: []Route{{Prefix: "/a", Default: Critical, Max: Default}, {Prefix: "/a"}}},
		Levels:   Levels{Test: 0.9, Sheddable: 0.5},
		Worker:   &WorkerConfig{Hysteresis: 1.5},
		Adaptive: &AdaptiveConfig{MinLimit: 10, MaxLimit: 5, Percentile: 2, DropRatio: 1.5},
		Fleet:    &FleetConfig{Mode: "rate", Capacity: 0},
	}.Validate(false)
	var fe FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("Validate: %v, want FieldErrors", err)
	}
	want := []string{
		"priority.routes[0].max", "priority.routes[1].prefix", "levels", "worker", "worker.hysteresis",
		"adaptive.max_limit", "adaptive.initial_limit", "adaptive.percentile", "adaptive.drop_ratio", "fleet.capacity", "fleet",
	}
	got := map[string]bool{}
	for _, e := range fe {
		got[e.Field] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("no problem reported for %s; got:\n%v", w, err)
		}
	}
	if err := (Config{}).Validate(false); err != nil {
		t.Errorf("empty Config: %v, want valid", err)
	}
}

// TestWorkerInFlight: each class is admitted up to its level of MaxInFlight,
// lowest first out.
func TestWorkerInFlight(t *testing.T) {
	w, err := NewWorker(WorkerConfig{MaxInFlight: 10}, Levels{})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		p    Priority
		want bool
	}{
		{Test, true}, {Test, true}, {Test, true}, {Test, true}, {Test, false}, // 4 = 0.4 × 10
		{Sheddable, true}, {Sheddable, true}, {Sheddable, false}, // 6
		{Default, true}, {Default, true}, {Default, false}, {Sheddable, false}, // 8
		{Critical, true}, {Critical, true}, {Critical, false}, // 10
	}
	for i, s := range steps {
		if got := w.Admit(t0, s.p); got != s.want {
			t.Fatalf("step %d: Admit(%v) = %v, want %v (in flight %d)", i, s.p, got, s.want, w.Stats(t0).InFlight)
		}
	}
	w.Done()
	if !w.Admit(t0, Critical) {
		t.Errorf("after Done: critical refused, want admitted")
	}
	if got := w.Stats(t0); got.InFlight != 10 || got.Utilization != 1 {
		t.Errorf("Stats = %+v, want 10 in flight, utilization 1", got)
	}
}

// TestWorkerQueueDelayHysteresis drives the queue-delay signal on a simulated
// clock: shedding starts at the level, lowest class first, and stops only
// below level − hysteresis after the hold.
func TestWorkerQueueDelayHysteresis(t *testing.T) {
	w, err := NewWorker(WorkerConfig{MaxQueueDelay: 100 * time.Millisecond, Hold: time.Second, QueueDelaySmoothing: time.Hour}, Levels{})
	if err != nil {
		t.Fatal(err)
	}
	now := t0
	admit := func(p Priority) bool {
		ok := w.Admit(now, p)
		if ok {
			w.Done()
		}
		return ok
	}
	// Feed a steady delay until the average settles there.
	settle := func(d time.Duration) {
		for range 100 {
			w.ObserveQueueDelay(now, d)
		}
	}
	settle(30 * time.Millisecond)
	if !admit(Test) {
		t.Fatalf("delay 30ms (0.3): test shed, want admitted")
	}
	settle(45 * time.Millisecond) // 0.45 ≥ test's 0.4
	if admit(Test) || !admit(Sheddable) {
		t.Fatalf("delay 45ms: want test shed and sheddable admitted")
	}
	settle(35 * time.Millisecond) // 0.35 > 0.4 − 0.1: still shed (hysteresis)
	now = now.Add(2 * time.Second)
	if admit(Test) {
		t.Fatalf("delay 35ms after 2s: test admitted, want shed until below 0.3")
	}
	settle(25 * time.Millisecond)
	if !admit(Test) {
		t.Fatalf("delay 25ms after the hold: test shed, want admitted")
	}
	settle(85 * time.Millisecond) // sheds default and below at once
	for _, p := range []Priority{Test, Sheddable, Default} {
		if admit(p) {
			t.Errorf("delay 85ms: %v admitted, want shed", p)
		}
	}
	if !admit(Critical) {
		t.Errorf("delay 85ms: critical shed, want admitted (below MaxQueueDelay)")
	}
	settle(10 * time.Millisecond) // far below every level, but within the hold
	now = now.Add(500 * time.Millisecond)
	if admit(Default) {
		t.Errorf("within the hold: default admitted, want shed")
	}
	now = now.Add(600 * time.Millisecond)
	if !admit(Default) || admit(Sheddable) {
		t.Errorf("after the hold: want default back and sheddable still shed (one class at a time)")
	}
	settle(150 * time.Millisecond)
	if admit(Critical) {
		t.Errorf("delay 150ms (≥ MaxQueueDelay): critical admitted, want shed")
	}
	if got := w.Stats(now).Shedding; got != Default {
		t.Errorf("Stats().Shedding = %v, want default", got)
	}
}

func TestWorkerQueueDelayDecays(t *testing.T) {
	w, _ := NewWorker(WorkerConfig{MaxQueueDelay: 100 * time.Millisecond, QueueDelaySmoothing: 100 * time.Millisecond, Hold: time.Millisecond}, Levels{})
	for range 50 {
		w.ObserveQueueDelay(t0, 90*time.Millisecond)
	}
	if w.Admit(t0, Default) {
		t.Fatalf("delay 90ms: default admitted")
	}
	// Nothing reported for 1s = 10 time constants: the queue is taken as drained.
	if later := t0.Add(time.Second); !w.Admit(later, Default) {
		t.Errorf("1s without reports: default shed (delay %v), want admitted", w.Stats(later).QueueDelay)
	}
}

// backend is a closed-form latency model for the adaptive limiter's unit
// tests: latency is base while at most workers requests are in flight, and
// grows in proportion beyond.
func latency(base time.Duration, workers, inflight int) time.Duration {
	if inflight <= workers {
		return base
	}
	return base * time.Duration(inflight) / time.Duration(workers)
}

// drive runs the limiter saturated (always a request waiting) for d of
// simulated time, completing requests in order of their latency; it returns
// the clock.
func drive(a *Adaptive, now time.Time, d time.Duration, base time.Duration, workers *int) time.Time {
	return driveFailing(a, now, d, base, workers, failing{})
}

// failing describes a backend that fails some requests: every Every-th
// request admitted (none when Every is 0) fails after Latency, whatever the
// queue, and is reported with Outcome.
type failing struct {
	Every   int
	Latency time.Duration
	Outcome Outcome
}

// driveFailing is drive with a backend that fails as f says.
func driveFailing(a *Adaptive, now time.Time, d time.Duration, base time.Duration, workers *int, f failing) time.Time {
	var q pending
	var fresh []pendingReq
	admitted := 0
	end := now.Add(d)
	for now.Before(end) {
		fresh = fresh[:0]
		for {
			tok, ok := a.Acquire(now, Default)
			if !ok {
				break
			}
			admitted++
			fresh = append(fresh, pendingReq{tok: tok, fail: f.Every > 0 && admitted%f.Every == 0})
		}
		n := len(q) + len(fresh)
		for _, r := range fresh {
			if r.fail {
				r.done = now.Add(f.Latency)
			} else {
				r.done = now.Add(latency(base, *workers, n))
			}
			heap.Push(&q, r)
		}
		// Complete the earliest one.
		r := heap.Pop(&q).(pendingReq)
		now = r.done
		o := Succeeded
		if r.fail {
			o = f.Outcome
		}
		a.Done(r.tok, now, o)
	}
	for _, r := range q {
		a.Done(r.tok, now, Ignored)
	}
	return now
}

// pendingReq is a request in flight in driveFailing.
type pendingReq struct {
	tok  Token
	fail bool
	done time.Time
}

// pending is a min-heap of requests in flight by completion time.
type pending []pendingReq

func (q pending) Len() int           { return len(q) }
func (q pending) Less(i, j int) bool { return q[i].done.Before(q[j].done) }
func (q pending) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *pending) Push(x any)        { *q = append(*q, x.(pendingReq)) }
func (q *pending) Pop() any {
	old := *q
	r := old[len(old)-1]
	*q = old[:len(old)-1]
	return r
}

func TestAdaptiveFindsLimit(t *testing.T) {
	a, err := NewAdaptive(AdaptiveConfig{InitialLimit: 5, ProbeInterval: time.Hour}, Levels{Default: 1})
	if err != nil {
		t.Fatal(err)
	}
	workers := 40
	now := drive(a, t0, 10*time.Second, 10*time.Millisecond, &workers)
	st := a.Stats()
	if st.MinRTT != 10*time.Millisecond {
		t.Errorf("MinRTT %v, want 10ms", st.MinRTT)
	}
	// Latency stays within 25% of minRTT: the limit settles between the
	// workers and workers × 1.25.
	if st.Limit < 40 || st.Limit > 52 {
		t.Errorf("limit %d after 10s with 40 workers, want in [40, 52]", st.Limit)
	}
	workers = 10
	drive(a, now, 3*time.Second, 10*time.Millisecond, &workers)
	if st := a.Stats(); st.Limit < 10 || st.Limit > 14 {
		t.Errorf("limit %d 3s after the workers fell to 10, want in [10, 14]", st.Limit)
	}
}

// TestAdaptiveSlowerBackend: when the backend's own latency doubles, the limit
// falls to its floor, where a new probe measures the new baseline and the
// limit climbs back.
func TestAdaptiveSlowerBackend(t *testing.T) {
	a, _ := NewAdaptive(AdaptiveConfig{InitialLimit: 20, ProbeInterval: time.Hour}, Levels{Default: 1})
	workers := 20
	now := drive(a, t0, 5*time.Second, 10*time.Millisecond, &workers)
	now = drive(a, now, 10*time.Second, 20*time.Millisecond, &workers)
	st := a.Stats()
	if st.MinRTT != 20*time.Millisecond {
		t.Errorf("MinRTT %v after the backend slowed, want 20ms", st.MinRTT)
	}
	if st.Limit < 20 || st.Limit > 26 {
		t.Errorf("limit %d, want back in [20, 26]", st.Limit)
	}
	_ = now
}

// TestAdaptiveFailures: 40 workers at 10ms, then 3s of a backend that fails
// some requests in 1ms, then 10s healthy again. Fast failures reported as
// Succeeded (the old behaviour) look like an unloaded server and push the
// limit to its ceiling; reported as Dropped they lower it once they pass
// drop_ratio, and a trickle under it changes nothing. The limit comes back
// once the backend does.
func TestAdaptiveFailures(t *testing.T) {
	const minLimit, maxLimit = 4, 200
	tests := []struct {
		name      string
		dropRatio float64
		fail      failing
		lo, hi    int // the limit after the failing phase; 0 means the limit before it
	}{
		{"healthy", 0, failing{}, 0, 0},
		{"all fail fast, reported as succeeded", 0, failing{1, time.Millisecond, Succeeded}, maxLimit, maxLimit},
		{"all fail fast", 0, failing{1, time.Millisecond, Dropped}, minLimit, minLimit},
		{"half fail fast", 0, failing{2, time.Millisecond, Dropped}, minLimit, minLimit},
		{"one in 5 fails fast", 0, failing{5, time.Millisecond, Dropped}, minLimit, minLimit},
		{"one in 20 fails fast (under drop_ratio)", 0, failing{20, time.Millisecond, Dropped}, 0, 0},
		{"all fail fast, drop_ratio 1", 1, failing{1, time.Millisecond, Dropped}, 0, 0},
		{"all fail fast, ignored", 0, failing{1, time.Millisecond, Ignored}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := NewAdaptive(AdaptiveConfig{InitialLimit: 20, MinLimit: minLimit, MaxLimit: maxLimit,
				ProbeInterval: time.Hour, DropRatio: tt.dropRatio}, Levels{Default: 1})
			if err != nil {
				t.Fatal(err)
			}
			workers := 40
			now := drive(a, t0, 5*time.Second, 10*time.Millisecond, &workers)
			before := a.Stats().Limit
			if before < 40 || before > 52 {
				t.Fatalf("healthy: limit %d after 5s from 20 with 40 workers, want risen into [40, 52]", before)
			}
			now = driveFailing(a, now, 3*time.Second, 10*time.Millisecond, &workers, tt.fail)
			lo, hi := tt.lo, tt.hi
			if lo == 0 {
				// Unchanged: within the spread a healthy limit keeps.
				lo, hi = 40, 52
			}
			st := a.Stats()
			if st.Limit < lo || st.Limit > hi {
				t.Errorf("after 3s failing (%+v): limit %d (gradient %.2f, dropped %.2f), want in [%d, %d] (before: %d)",
					tt.fail, st.Limit, st.Gradient, st.Dropped, lo, hi, before)
			}
			driveFailing(a, now, 10*time.Second, 10*time.Millisecond, &workers, failing{})
			if st := a.Stats(); st.Limit < 40 || st.Limit > 52 || st.MinRTT != 10*time.Millisecond {
				t.Errorf("10s healthy again: limit %d, minRTT %v; want in [40, 52], 10ms", st.Limit, st.MinRTT)
			}
		})
	}
}

// TestAdaptiveProbeIgnoresDrops: failures during a probe are not latencies,
// so the unloaded latency measured is that of the work that succeeded.
func TestAdaptiveProbeIgnoresDrops(t *testing.T) {
	tests := []struct {
		fail failing
		want time.Duration
	}{
		{failing{2, time.Millisecond, Dropped}, 10 * time.Millisecond},
		{failing{2, time.Millisecond, Succeeded}, time.Millisecond}, // the old behaviour
	}
	for _, tt := range tests {
		a, _ := NewAdaptive(AdaptiveConfig{ProbeInterval: time.Hour}, Levels{Default: 1})
		workers := 40
		driveFailing(a, t0, time.Second, 10*time.Millisecond, &workers, tt.fail)
		if got := a.Stats().MinRTT; got != tt.want {
			t.Errorf("half the probe failing in 1ms, reported %v: minRTT %v, want %v", tt.fail.Outcome, got, tt.want)
		}
	}
}

func TestOutcomeOf(t *testing.T) {
	tests := []struct {
		ctxErr          error
		failed, refused bool
		want            Outcome
	}{
		{nil, false, false, Succeeded},
		{nil, true, false, Dropped},
		{nil, false, true, Ignored},
		{nil, true, true, Ignored},
		{context.Canceled, false, false, Ignored},
		{context.Canceled, true, false, Ignored},
		{context.DeadlineExceeded, false, false, Dropped},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), false, false, Dropped},
		{context.DeadlineExceeded, false, true, Ignored},
	}
	for _, tt := range tests {
		if got := OutcomeOf(tt.ctxErr, tt.failed, tt.refused); got != tt.want {
			t.Errorf("OutcomeOf(%v, failed %v, refused %v) = %v, want %v", tt.ctxErr, tt.failed, tt.refused, got, tt.want)
		}
	}
}

func TestAdaptiveLevels(t *testing.T) {
	a, _ := NewAdaptive(AdaptiveConfig{InitialLimit: 10, MinLimit: 2, ProbeSamples: 1, MinSamples: 1}, Levels{})
	// End the first probe.
	tok, _ := a.Acquire(t0, Default)
	a.Done(tok, t0.Add(time.Millisecond), Succeeded)
	if st := a.Stats(); st.Probing || st.Limit != 10 {
		t.Fatalf("after the probe: %+v, want limit 10, not probing", st)
	}
	counts := map[Priority]int{}
	for _, p := range []Priority{Test, Sheddable, Default, Critical} {
		for {
			if _, ok := a.Acquire(t0, p); !ok {
				break
			}
			counts[p]++
		}
	}
	// Levels 0.4, 0.6, 0.8, 1 of 10, filled lowest first.
	want := map[Priority]int{Test: 4, Sheddable: 2, Default: 2, Critical: 2}
	for p, n := range want {
		if counts[p] != n {
			t.Errorf("%v admitted %d, want %d", p, counts[p], n)
		}
	}
}

func TestAdaptiveProbePinsNonCritical(t *testing.T) {
	a, _ := NewAdaptive(AdaptiveConfig{InitialLimit: 30, MinLimit: 3, ProbeSamples: 5}, Levels{Default: 1})
	var n, c int
	for {
		if _, ok := a.Acquire(t0, Default); !ok {
			break
		}
		n++
	}
	for {
		if _, ok := a.Acquire(t0, Critical); !ok {
			break
		}
		c++
	}
	if n != 3 || c != 27 {
		t.Errorf("during the first probe: default %d, critical %d more; want 3 and 27", n, c)
	}
}

// TestAdaptiveConcurrent admits from many goroutines; in flight never passes
// the limit (run with -race).
func TestAdaptiveConcurrent(t *testing.T) {
	a, _ := NewAdaptive(AdaptiveConfig{InitialLimit: 8, MinLimit: 8, MaxLimit: 8}, Levels{Default: 1})
	var cur, peak atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 500 {
				tok, ok := a.Acquire(time.Now(), Critical)
				if !ok {
					continue
				}
				n := cur.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				cur.Add(-1)
				a.Done(tok, time.Now(), Succeeded)
			}
		})
	}
	wg.Wait()
	if p := peak.Load(); p > 8 {
		t.Errorf("peak in flight %d, want ≤ 8", p)
	}
	if st := a.Stats(); st.InFlight != 0 {
		t.Errorf("in flight %d after all done, want 0", st.InFlight)
	}
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestFleetReserve counts admissions per class in one window: non-critical
// stop at (1 − reserve) × capacity; critical get the rest.
func TestFleetReserve(t *testing.T) {
	clk := &clock{now: t0}
	st := memory.New(memory.Options{Now: clk.Now})
	defer st.Close()
	f, err := NewFleet(FleetConfig{Capacity: 100, Reserve: 0.2, Window: time.Second}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	admit := func(p Priority, n int) (ok int) {
		for range n {
			_, r, err := f.Admit(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if r == nil {
				ok++
			} else if r.Layer != LayerFleet || r.RetryAfter < time.Second {
				t.Fatalf("refusal %+v, want layer fleet, Retry-After ≥ 1s", r)
			}
		}
		return ok
	}
	if got := admit(Default, 150); got != 80 {
		t.Errorf("default admitted %d of 150, want 80 (100 × (1 − 0.2))", got)
	}
	if got := admit(Critical, 50); got != 20 {
		t.Errorf("critical admitted %d of 50, want the 20 left", got)
	}
	clk.Add(time.Second) // a full window later, all capacity is back
	if got := admit(Critical, 50); got != 50 {
		t.Errorf("critical admitted %d of 50 in a fresh window, want 50", got)
	}
	if got := admit(Sheddable, 100); got != 50 {
		t.Errorf("sheddable admitted %d after 50 critical, want 50 (the rest of capacity)", got)
	}
}

func TestFleetInFlightConcurrent(t *testing.T) {
	st := memory.New(memory.Options{})
	defer st.Close()
	f, err := NewFleet(FleetConfig{Mode: FleetInFlight, Capacity: 10, Reserve: 0.3}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var nc, all, peakNC, peakAll atomic.Int64
	bump := func(c, peak *atomic.Int64, d int64) {
		n := c.Add(d)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				return
			}
		}
	}
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			p := Default
			if g%3 == 0 {
				p = Critical
			}
			for range 200 {
				lease, r, err := f.Admit(ctx, p)
				if err != nil {
					t.Error(err)
					return
				}
				if r != nil {
					continue
				}
				bump(&all, &peakAll, 1)
				if p != Critical {
					bump(&nc, &peakNC, 1)
					nc.Add(-1)
				}
				all.Add(-1)
				if err := lease.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if peakAll.Load() > 10 || peakNC.Load() > 7 {
		t.Errorf("peak in flight %d (non-critical %d), want ≤ 10 (≤ 7)", peakAll.Load(), peakNC.Load())
	}
	// Every lease was given back: the full capacity is free.
	for i := range 10 {
		if _, r, _ := f.Admit(ctx, Critical); r != nil {
			t.Fatalf("critical %d refused after all releases: %+v", i, r)
		}
	}
}

type downStore struct{}

func (downStore) Take(context.Context, []sluice.Op, []sluice.Result) error {
	return errors.New("store down")
}

func TestFleetStoreDown(t *testing.T) {
	open, _ := NewFleet(FleetConfig{Capacity: 10}, downStore{})
	if _, r, err := open.Admit(context.Background(), Default); r != nil || err == nil {
		t.Errorf("fail open: refusal %v, err %v; want admitted with an error", r, err)
	}
	closed, _ := NewFleet(FleetConfig{Capacity: 10, FailClosed: true}, downStore{})
	if _, r, _ := closed.Admit(context.Background(), Default); r == nil {
		t.Errorf("fail closed: default admitted, want shed")
	}
	if _, r, _ := closed.Admit(context.Background(), Critical); r != nil {
		t.Errorf("fail closed: critical shed, want admitted")
	}
}

// TestShedderLayers: a refusal names its layer, and a request refused by a
// later layer holds nothing in the earlier ones.
func TestShedderLayers(t *testing.T) {
	clk := &clock{now: t0}
	st := memory.New(memory.Options{Now: clk.Now})
	defer st.Close()
	var errs atomic.Int64
	s, err := New(Config{
		Worker:   &WorkerConfig{MaxInFlight: 100},
		Adaptive: &AdaptiveConfig{InitialLimit: 50, MinLimit: 5},
		Fleet:    &FleetConfig{Capacity: 4, Reserve: 0.5},
	}, Options{Store: st, Now: clk.Now, OnError: func(error) { errs.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var tickets []Ticket
	for i := range 3 {
		tk, r := s.Admit(ctx, Default)
		if i < 2 && r != nil {
			t.Fatalf("default %d refused: %+v", i, r)
		}
		if i == 2 {
			if r == nil || r.Layer != LayerFleet || !strings.Contains(r.Detail, "reserved for critical") {
				t.Fatalf("third default: %+v, want shed by the fleet layer for the reserve", r)
			}
			continue
		}
		tickets = append(tickets, tk)
	}
	// The probe at start pins non-critical work to MinLimit 5 in flight.
	for range 3 {
		tk, r := s.Admit(ctx, Critical)
		if r != nil {
			if r.Layer != LayerFleet {
				t.Fatalf("critical refused by %v, want fleet", r.Layer)
			}
			continue
		}
		tickets = append(tickets, tk)
	}
	stats := s.Stats()
	if stats.InFlight != 4 || stats.Worker.InFlight != 4 || stats.Adaptive.InFlight != 4 {
		t.Errorf("in flight: shedder %d, worker %d, adaptive %d; want 4 each (refused requests hold nothing)",
			stats.InFlight, stats.Worker.InFlight, stats.Adaptive.InFlight)
	}
	if stats.Shed[LayerFleet][Default] != 1 || stats.Shed[LayerFleet][Critical] != 1 || stats.Admitted[Critical] != 2 {
		t.Errorf("counters %+v / %+v, want 1 default and 1 critical shed by the fleet, 2 critical admitted", stats.Shed[LayerFleet], stats.Admitted)
	}
	for _, tk := range tickets {
		tk.Done(ctx, Succeeded)
	}
	if st := s.Stats(); st.InFlight != 0 || st.Worker.InFlight != 0 || st.Adaptive.InFlight != 0 {
		t.Errorf("after Done: %+v, want nothing in flight", st)
	}
	if errs.Load() != 0 {
		t.Errorf("OnError called %d times, want 0", errs.Load())
	}
}

func TestDeltaPercentile(t *testing.T) {
	buckets := []float64{0, 0.001, 0.002, 0.004, math.Inf(1)}
	for _, tc := range []struct {
		prev, cur []uint64
		q         float64
		want      time.Duration
		ok        bool
	}{
		{[]uint64{0, 0, 0, 0}, []uint64{0, 0, 0, 0}, 0.99, 0, false},
		{[]uint64{5, 5, 5, 5}, []uint64{95, 14, 5, 5}, 0.5, time.Millisecond, true},
		{[]uint64{5, 5, 5, 5}, []uint64{95, 14, 5, 5}, 0.99, 2 * time.Millisecond, true},
		{[]uint64{0, 0, 0, 0}, []uint64{0, 0, 0, 3}, 0.99, 4 * time.Millisecond, true},
		{[]uint64{0, 0}, []uint64{0, 0, 0, 3}, 0.99, 0, false},
	} {
		got, ok := deltaPercentile(buckets, tc.prev, tc.cur, tc.q)
		if got != tc.want || ok != tc.ok {
			t.Errorf("deltaPercentile(%v → %v, %v) = %v, %v; want %v, %v", tc.prev, tc.cur, tc.q, got, ok, tc.want, tc.ok)
		}
	}
}

// TestSchedLatencyReports: SchedLatency feeds the worker scheduler
// latencies. Polled until the first report, failing only after a minute.
func TestSchedLatencyReports(t *testing.T) {
	w, _ := NewWorker(WorkerConfig{MaxQueueDelay: time.Second}, Levels{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { SchedLatency(ctx, w, 10*time.Millisecond, 0.99); close(done) }()
	reported := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return !w.qdAt.IsZero()
	}
	// Keep the scheduler busy enough to record some latencies.
	for deadline := time.Now().Add(time.Minute); !reported() && time.Now().Before(deadline); {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { time.Sleep(time.Millisecond) })
		}
		wg.Wait()
	}
	cancel()
	<-done
	if !reported() {
		t.Errorf("SchedLatency reported nothing in a minute")
	}
}
