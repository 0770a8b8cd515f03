package storetest

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// arrival is one hit of a generated trace, at an offset from Epoch.
type arrival struct {
	at   time.Duration
	cost int64
}

// poisson returns n arrivals at the given mean rate (per second), cost 1.
func poisson(rng *rand.Rand, n int, perSecond float64) []arrival {
	out := make([]arrival, n)
	var t time.Duration
	for i := range out {
		t += time.Duration(rng.ExpFloat64() / perSecond * float64(time.Second)).Truncate(time.Microsecond)
		out[i] = arrival{at: t, cost: 1}
	}
	return out
}

// bursty returns bursts of back-to-back hits (1–3 units each) separated by
// quiet gaps, so traffic piles up around window boundaries.
func bursty(rng *rand.Rand, n int, window time.Duration) []arrival {
	out := make([]arrival, 0, n)
	var t time.Duration
	for len(out) < n {
		t += time.Duration(rng.Int64N(int64(2 * window))).Truncate(time.Microsecond)
		for k := 5 + rng.IntN(20); k > 0 && len(out) < n; k-- {
			t += time.Duration(rng.Int64N(int64(window / 50))).Truncate(time.Microsecond)
			out = append(out, arrival{at: t, cost: 1 + rng.Int64N(3)})
		}
	}
	return out
}

// replay applies a trace to one key and returns the decision for each hit.
func replay(t *testing.T, s sluice.Store, clock *Clock, key string, l sluice.Limit, trace []arrival) []sluice.Result {
	t.Helper()
	out := make([]sluice.Result, len(trace))
	for i, a := range trace {
		clock.Set(Epoch.Add(a.at))
		r, err := take1(s, sluice.Op{Key: key, Limit: l, Cost: a.cost})
		if err != nil {
			t.Fatalf("%v at %v: %v", l, a.at, err)
		}
		out[i] = r
	}
	return out
}

// maxInWindow returns the most units admitted within any span of length w
// (a half-open interval (t−w, t]).
func maxInWindow(trace []arrival, res []sluice.Result, w time.Duration) int64 {
	var best, cur int64
	lo := 0
	for hi := range trace {
		if !res[hi].Allowed {
			continue
		}
		cur += trace[hi].cost
		for trace[lo].at <= trace[hi].at-w {
			if res[lo].Allowed {
				cur -= trace[lo].cost
			}
			lo++
		}
		best = max(best, cur)
	}
	return best
}

// runDifferential compares algorithms on the same random traces.
func runDifferential(t *testing.T, newStore NewStore) {
	const quota = 50
	w := time.Second
	traffic := []struct {
		name  string
		trace func(*rand.Rand) []arrival
	}{
		{"poisson 0.9×", func(r *rand.Rand) []arrival { return poisson(r, 4000, 0.9*quota) }},
		{"poisson 1.5×", func(r *rand.Rand) []arrival { return poisson(r, 4000, 1.5*quota) }},
		{"bursty", func(r *rand.Rand) []arrival { return bursty(r, 4000, w) }},
	}
	lim := func(a sluice.Algorithm) sluice.Limit { return sluice.Limit{Algorithm: a, Quota: quota, Window: w} }
	for _, tr := range traffic {
		t.Run(tr.name, func(t *testing.T) {
			clock := NewClock()
			s := newStore(t, clock)
			trace := tr.trace(rand.New(rand.NewPCG(7, 11)))
			exact := replay(t, s, clock, "diff:log", lim(sluice.SlidingLog), trace)
			fixed := replay(t, s, clock, "diff:fixed", lim(sluice.FixedWindow), trace)
			slide := replay(t, s, clock, "diff:slide", lim(sluice.SlidingWindow), trace)

			if got := maxInWindow(trace, exact, w); got > quota {
				t.Errorf("sliding_log admitted %d within one window, want ≤ %d (it is exact)", got, quota)
			}
			fx := maxInWindow(trace, fixed, w)
			if fx > 2*quota {
				t.Errorf("fixed_window admitted %d within one window, want ≤ 2 × %d", fx, quota)
			}
			sw := maxInWindow(trace, slide, w)
			swWrong, swAllow := wrongDecisions(trace, slide, w, quota)
			fxWrong, _ := wrongDecisions(trace, fixed, w, quota)
			t.Logf("%s, %d hits: most admitted in any %v: sliding_log %d, fixed_window %d (%.2f× quota), sliding_window %d (%.2f×); decisions the exact rule would have made differently given each algorithm's own history: sliding_window %.2f%% (%d wrongly allowed, %d wrongly denied), fixed_window %.2f%%",
				tr.name, len(trace), w, maxInWindow(trace, exact, w), fx, float64(fx)/quota, sw, float64(sw)/quota,
				100*float64(swWrong)/float64(len(trace)), swAllow, swWrong-swAllow, 100*float64(fxWrong)/float64(len(trace)))
			// The weighted estimate is an approximation; bound how far it
			// may drift so that a regression in its arithmetic shows.
			if swWrong > fxWrong {
				t.Errorf("sliding_window made %d wrong decisions, more than fixed_window's %d", swWrong, fxWrong)
			}
			if sw > 2*quota {
				t.Errorf("sliding_window admitted %d within one window, want ≤ 2 × %d", sw, quota)
			}
		})
	}
}

// runBoundaryBurst shows fixed_window's weakness and that the sliding
// algorithms do not share it: a full quota just before a window boundary and
// another just after.
func runBoundaryBurst(t *testing.T, newStore NewStore) {
	const quota = 10
	clock := NewClock()
	s := newStore(t, clock)
	for _, tt := range []struct {
		alg  sluice.Algorithm
		want int64
	}{
		{sluice.FixedWindow, 2 * quota},
		{sluice.SlidingWindow, quota},
		{sluice.SlidingLog, quota},
	} {
		l := sluice.Limit{Algorithm: tt.alg, Quota: quota, Window: time.Second}
		var trace []arrival
		for i := 0; i < 3*quota; i++ {
			trace = append(trace, arrival{at: 10*time.Second - time.Microsecond, cost: 1}) // last µs of a window
		}
		for i := 0; i < 3*quota; i++ {
			trace = append(trace, arrival{at: 10 * time.Second, cost: 1}) // first µs of the next
		}
		res := replay(t, s, clock, fmt.Sprint("boundary:", tt.alg), l, trace)
		if got := maxInWindow(trace, res, 2*time.Microsecond); got != tt.want {
			t.Errorf("%v: admitted %d within 2µs across a window boundary, want %d", tt.alg, got, tt.want)
		}
	}
}

// runBucketsAgree replays random traces, with random costs and a clock that
// sometimes steps back, against token_bucket and gcra with the same
// parameters: every Result must be identical.
func runBucketsAgree(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	rng := rand.New(rand.NewPCG(3, 5))
	for _, l := range []sluice.Limit{
		{Quota: 3, Window: time.Second},
		{Quota: 10, Window: 7 * time.Second, Burst: 25},
		{Quota: 1000, Window: time.Minute, Burst: 1},
	} {
		tb, gc := l, l
		tb.Algorithm, gc.Algorithm = sluice.TokenBucket, sluice.GCRA
		var at time.Duration
		for i := 0; i < 3000; i++ {
			step := time.Duration(rng.Int64N(int64(2 * l.Window / time.Duration(l.Quota)))).Truncate(time.Microsecond)
			if rng.IntN(20) == 0 {
				step = -step // the clock steps back now and then
			}
			at += step
			clock.Set(Epoch.Add(at))
			cost := rng.Int64N(stack.Capacity(l) + 2) // includes 0 and too-high costs
			a, err1 := take1(s, sluice.Op{Key: "agree:" + l.String(), Limit: tb, Cost: cost})
			b, err2 := take1(s, sluice.Op{Key: "agree:" + l.String(), Limit: gc, Cost: cost})
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if a != b {
				t.Fatalf("%v step %d (at %v, cost %d): token_bucket %+v, gcra %+v", l, i, at, cost, a, b)
			}
		}
	}
}

// wrongDecisions judges each decision against the exact sliding-window rule
// applied to the same algorithm's own admissions: a hit should be allowed iff
// the units admitted in (t−w, t] plus its cost fit the quota. It returns the
// number of wrong decisions and how many of them wrongly allowed.
func wrongDecisions(trace []arrival, res []sluice.Result, w time.Duration, quota int64) (wrong, wrongAllow int) {
	var inWindow int64
	lo := 0
	for i, a := range trace {
		for trace[lo].at <= a.at-w {
			if res[lo].Allowed {
				inWindow -= trace[lo].cost
			}
			lo++
		}
		if should := inWindow+a.cost <= quota; should != res[i].Allowed {
			wrong++
			if res[i].Allowed {
				wrongAllow++
			}
		}
		if res[i].Allowed {
			inWindow += a.cost
		}
	}
	return wrong, wrongAllow
}
