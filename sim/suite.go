package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
)

// The scenario groups of the default suite.
const (
	GroupLoad      = "load"      // Poisson at several loads, every algorithm
	GroupWorkload  = "workload"  // the other workloads, every algorithm
	GroupPlacement = "placement" // fleet size × placement
	GroupSync      = "sync"      // hybrid sync interval
	GroupCountAll  = "countall"  // every hit counted, window algorithms
)

// DefaultLimit is the limit of the default suite: 100 per second.
var DefaultLimit = sluice.Limit{Quota: 100, Window: time.Second}

// Loads are the offered loads, relative to the limit, of the load group.
var Loads = []float64{0.25, 0.5, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2, 4}

// FleetSizes are the instance counts of the placement group.
var FleetSizes = []int{1, 2, 4, 8, 16}

// SyncIntervals are the hybrid sync intervals of the sync group.
var SyncIntervals = []time.Duration{
	10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
	250 * time.Millisecond, 500 * time.Millisecond, time.Second,
}

// SuiteOptions size the default suite.
type SuiteOptions struct {
	// Limit replaces DefaultLimit (its Algorithm is ignored).
	Limit sluice.Limit
	// Scale multiplies every scenario's duration (0 means 1): 0.1 for a
	// quick look, 10 for tighter figures.
	Scale float64
	// Trace, if set, adds a scenario replaying it, under every algorithm.
	Trace *TraceData
	// Algorithms restricts the algorithms (nil: every simulated one).
	Algorithms []sluice.Algorithm
}

// DefaultSuite is what `sluice simulate` runs with no arguments: every
// workload under every algorithm on one global limit, the fleet placements,
// and the hybrid model's sync intervals. It makes about 11 million decisions.
func DefaultSuite(o SuiteOptions) []Scenario {
	lim := o.Limit
	if lim.Quota == 0 {
		lim = DefaultLimit
	}
	lim.Algorithm = 0
	scale := o.Scale
	if scale == 0 {
		scale = 1
	}
	w := lim.Window
	dur := func(windows float64) time.Duration {
		return max(time.Duration(windows*scale*float64(w)), 5*w)
	}
	algs := o.Algorithms
	var s []Scenario
	add := func(name, group string, wl Workload, pl Placement, series bool) {
		s = append(s, Scenario{Name: name, Group: group, Workload: wl, Limit: lim,
			Placement: pl, Algorithms: algs, Series: series, SeriesSpan: 8 * w})
	}
	windowAlgs := []sluice.Algorithm{sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog}
	if algs != nil {
		windowAlgs = nil
		for _, a := range algs {
			if a == sluice.FixedWindow || a == sluice.SlidingWindow || a == sluice.SlidingLog {
				windowAlgs = append(windowAlgs, a)
			}
		}
	}
	countAll := func(name string, wl Workload, algs []sluice.Algorithm) {
		if len(algs) > 0 {
			s = append(s, Scenario{Name: name, Group: GroupCountAll, Workload: wl, Limit: lim,
				Algorithms: algs, CountAll: true})
		}
	}
	for _, load := range Loads {
		// About 400,000 hits per load; a million at the limit, where
		// errors are rarest and the figure is read most closely.
		windows := 4000 / load
		if load == 1 {
			windows = 10000
		}
		add(fmt.Sprintf("poisson %.2g×", load), GroupLoad,
			Workload{Kind: Poisson, Load: load, Keys: 100, Duration: dur(windows / 100)}, Placement{}, false)
	}
	add("onoff 0.9×", GroupWorkload, Workload{Kind: OnOff, Load: 0.9, Keys: 100, Duration: dur(40)}, Placement{}, false)
	add("boundary attack", GroupWorkload, Workload{Kind: Boundary, Keys: 20, Duration: dur(100)}, Placement{}, true)
	// Recovery needs a few windows after the burst whatever the scale.
	add("recovery 0.5×", GroupWorkload, Workload{Kind: Recovery, Load: 0.5, Keys: 200, Duration: 4 * w}, Placement{}, false)
	add("zipf 1000 keys", GroupWorkload, Workload{Kind: Zipf, Load: 0.5, Keys: 1000, Duration: dur(10)}, Placement{}, false)
	add("diurnal 1×", GroupWorkload, Workload{Kind: Diurnal, Load: 1, Keys: 20, Duration: dur(200)}, Placement{}, false)
	if o.Trace != nil {
		add("trace", GroupWorkload, Workload{Kind: Trace, Trace: o.Trace}, Placement{}, false)
	}
	// Every hit counted (the conditions of Cloudflare's published figure):
	// Poisson near the limit, and a Zipf mix where most keys are far from it.
	for _, load := range []float64{0.5, 0.9, 1, 1.1, 2} {
		countAll(fmt.Sprintf("count-all poisson %.2g×", load),
			Workload{Kind: Poisson, Load: load, Keys: 100, Duration: dur(4000 / load / 100)}, windowAlgs)
	}
	// sliding_log is left out here: counting every hit of a key at 100× its
	// limit keeps 10,000 entries, and it is exact by construction.
	countAll("count-all zipf 1000 keys", Workload{Kind: Zipf, Load: 0.5, Keys: 1000, Duration: dur(10)},
		slices.DeleteFunc(slices.Clone(windowAlgs), func(a sluice.Algorithm) bool { return a == sluice.SlidingLog }))
	// Fleets: heavy traffic (16× the limit), so the N× problem shows up to
	// the largest fleet. token_bucket and leaky_bucket are left out: they
	// decide as gcra does (the load and workload groups show it).
	fleet := Workload{Kind: Poisson, Load: 16, Keys: 4, Duration: dur(20)}
	fleetAlgs := algs
	if fleetAlgs == nil {
		fleetAlgs = []sluice.Algorithm{sluice.GCRA, sluice.FixedWindow, sluice.SlidingWindow, sluice.SlidingLog}
	}
	addFleet := func(name, group string, pl Placement) {
		s = append(s, Scenario{Name: name, Group: group, Workload: fleet, Limit: lim, Placement: pl, Algorithms: fleetAlgs})
	}
	for _, n := range FleetSizes {
		addFleet(fmt.Sprintf("fleet local ×%d", n), GroupPlacement, Placement{Kind: Local, Instances: n})
		addFleet(fmt.Sprintf("fleet split ×%d", n), GroupPlacement, Placement{Kind: Split, Instances: n})
		addFleet(fmt.Sprintf("fleet global ×%d", n), GroupPlacement, Placement{Kind: Global, Instances: n, DeniedCache: true})
		addFleet(fmt.Sprintf("fleet hybrid ×%d", n), GroupPlacement, Placement{Kind: Hybrid, Instances: n, Sync: 100 * time.Millisecond})
	}
	// The denied cache on many keys, most far under their limit and a few
	// far over it.
	s = append(s, Scenario{Name: "zipf global ×8 +denied cache", Group: GroupPlacement,
		Workload: Workload{Kind: Zipf, Load: 0.5, Keys: 1000, Duration: dur(10)}, Limit: lim,
		Placement: Placement{Kind: Global, Instances: 8, DeniedCache: true}, Algorithms: fleetAlgs})
	// Hybrid saves store calls only where each instance sees many hits of a
	// key per sync interval: a limit 100 times higher, under and over it.
	// sliding_log is left out (10,000 entries per key).
	high := lim
	high.Quota *= 100
	highAlgs := slices.DeleteFunc(slices.Clone(fleetAlgs), func(a sluice.Algorithm) bool { return a == sluice.SlidingLog })
	if high.Quota <= algorithm.MaxLogQuota && len(highAlgs) > 0 {
		for _, load := range []float64{0.5, 1.5} {
			for _, pl := range []Placement{
				{Kind: Global, Instances: 8, DeniedCache: true},
				{Kind: Hybrid, Instances: 8, Sync: 100 * time.Millisecond},
			} {
				s = append(s, Scenario{Name: fmt.Sprintf("%d/%v %.2g× %s", high.Quota, high.Window, load, pl), Group: GroupPlacement,
					Workload: Workload{Kind: Poisson, Load: load, Keys: 2, Duration: dur(10)}, Limit: high,
					Placement: pl, Algorithms: highAlgs})
			}
		}
	}
	for _, sync := range SyncIntervals {
		addFleet(fmt.Sprintf("hybrid ×8 sync %v", sync), GroupSync, Placement{Kind: Hybrid, Instances: 8, Sync: sync})
	}
	return s
}
