package hybrid

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// BenchmarkAccuracy runs the real store, not a model, on the placement
// scenarios of docs/accuracy.md: N instances over one real redis-server, on
// a fake clock, one key hit by Poisson traffic at a multiple of its limit,
// each hit sent to an instance at random. A lease lands before the next
// hit (h.wg.Wait: no network time on the simulated clock). It reports
// overshoot (the most units admitted in any window of the limit's length,
// over the quota), admitted/s (units admitted per simulated second, over
// the limit's rate), and store-ops/decision (global Takes, allotment
// requests and give-backs, per decision). Run it with -benchtime=1x.
func BenchmarkAccuracy(b *testing.B) {
	for _, sc := range []struct {
		name  string
		n     int
		limit sluice.Limit
		load  float64
		dur   time.Duration
	}{
		{"gcra 10000/s x0.5 8 instances", 8, sluice.Limit{Algorithm: sluice.GCRA, Quota: 10_000, Window: time.Second, Burst: 10_000}, 0.5, 4 * time.Second},
		{"gcra 10000/s x1.5 8 instances", 8, sluice.Limit{Algorithm: sluice.GCRA, Quota: 10_000, Window: time.Second, Burst: 10_000}, 1.5, 4 * time.Second},
		{"fixed_window 10000/s x0.5 8 instances", 8, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10_000, Window: time.Second}, 0.5, 4 * time.Second},
		{"fixed_window 10000/s x1.5 8 instances", 8, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10_000, Window: time.Second}, 1.5, 4 * time.Second},
		{"gcra 100/s x16 8 instances", 8, sluice.Limit{Algorithm: sluice.GCRA, Quota: 100, Window: time.Second, Burst: 100}, 16, 10 * time.Second},
		{"fixed_window 100/s x16 8 instances", 8, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Second}, 16, 10 * time.Second},
	} {
		b.Run(sc.name, func(b *testing.B) {
			for range b.N {
				f := newFleet(b, sc.n, Options{})
				rng := rand.New(rand.NewPCG(1, 2))
				rate := sc.load * float64(sc.limit.Quota) / sc.limit.Window.Seconds()
				op := []sluice.Op{{Key: "acc", Limit: sc.limit, Cost: 1}}
				res := make([]sluice.Result, 1)
				start := f.clock.Now()
				var admitted []int64 // µs since start
				decisions := 0
				for el := time.Duration(0); el < sc.dur; {
					gap := time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
					f.clock.Advance(gap)
					el += gap
					h := f.inst[rng.IntN(sc.n)]
					if err := h.Take(context.Background(), op, res); err != nil {
						b.Fatalf("Take: %v", err)
					}
					h.wg.Wait()
					decisions++
					if res[0].Allowed {
						admitted = append(admitted, f.clock.Now().Sub(start).Microseconds())
					}
				}
				var ops uint64
				for i, h := range f.inst {
					st := h.Stats()
					ops += st.Global + st.Allots
					ops += f.global[i].Allots() - st.Allots // give-backs (Sweep) and anything else sent
				}
				w := sc.limit.Window.Microseconds()
				most, lo := 0, 0
				for hi := range admitted {
					for admitted[hi]-admitted[lo] >= w {
						lo++
					}
					most = max(most, hi-lo+1)
				}
				b.ReportMetric(float64(most)/float64(sc.limit.Quota), "overshoot")
				b.ReportMetric(float64(len(admitted))/sc.dur.Seconds()/(float64(sc.limit.Quota)/sc.limit.Window.Seconds()), "admitted/limit")
				b.ReportMetric(float64(ops)/float64(decisions), "store-ops/decision")
				b.Logf("%s: %d decisions, %d admitted, most in a window %d (quota %d), %d store ops", sc.name, decisions, len(admitted), most, sc.limit.Quota, ops)
			}
		})
	}
}
