package sim

import (
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
)

// PlacementKind says where a limit is counted.
type PlacementKind string

// The placements. Hits are spread over Instances at random (a load balancer
// with no key affinity).
const (
	// Global: every instance asks one shared store, so the fleet decides as
	// one limiter (what store/redis does). Store ops: one per decision.
	Global PlacementKind = "global"
	// Local: each instance enforces the full limit on its own (an in-process
	// store per instance): the N× problem.
	Local PlacementKind = "local"
	// Split: each instance enforces quota/Instances on its own (the rule
	// failure mode "local" divides the limit by the expected fleet size).
	Split PlacementKind = "split"
	// Hybrid is a model of the hybrid store's stated design, not the store
	// itself: each instance leases an allotment from the global count (a
	// Take of that many units on the shared state), sized from the units it
	// saw in the last sync interval (at least twice the hit's cost) and at
	// most a 1/Instances share of the remaining quota; it admits locally
	// while the allotment lasts and until the lease is Sync old; unused units
	// expire with the lease and are not returned. When the remaining quota is
	// at or below FallbackFraction of the quota, the instance decides each hit
	// on the global state instead.
	Hybrid PlacementKind = "hybrid"
)

// Placement is where the counting happens. The zero value is Global with
// one instance.
type Placement struct {
	Kind PlacementKind
	// Instances is the fleet size (0 means 1).
	Instances int
	// Sync is the hybrid lease lifetime (Hybrid only).
	Sync time.Duration
	// FallbackFraction is the share of the quota under which hybrid decides
	// globally (Hybrid only; 0 means 0.1).
	FallbackFraction float64
	// DeniedCache models the denied-key cache in front of a global store:
	// each instance remembers a denial until its RetryAfter and denies hits
	// of at least that cost without a store call (Global only).
	DeniedCache bool
}

// MaxInstances is the largest fleet a placement may simulate.
const MaxInstances = 1024

func (pl Placement) kind() PlacementKind {
	if pl.Kind == "" {
		return Global
	}
	return pl.Kind
}

func (pl Placement) instances() int { return max(pl.Instances, 1) }

func (pl Placement) fallback() float64 {
	if pl.FallbackFraction == 0 {
		return 0.1
	}
	return pl.FallbackFraction
}

// String is "global", "local ×8", "hybrid ×8 sync 100ms", …
func (pl Placement) String() string {
	k := pl.kind()
	s := string(k)
	if n := pl.instances(); n > 1 {
		s += fmt.Sprintf(" ×%d", n)
	}
	if k == Hybrid {
		s += fmt.Sprintf(" sync %v", pl.Sync)
	}
	if pl.DeniedCache {
		s += " +denied cache"
	}
	return s
}

func (pl Placement) validate() error {
	switch pl.Kind {
	case "", Global, Local, Split, Hybrid:
	default:
		return fmt.Errorf("placement: unknown kind %q", pl.Kind)
	}
	switch {
	case pl.Instances < 0 || pl.Instances > MaxInstances:
		return fmt.Errorf("placement: instances %d is outside 1–%d", pl.Instances, MaxInstances)
	case pl.Kind == Hybrid && pl.Sync <= 0:
		return fmt.Errorf("placement: hybrid needs a positive sync interval")
	case pl.FallbackFraction < 0 || pl.FallbackFraction > 1:
		return fmt.Errorf("placement: fallback fraction %v is outside 0–1", pl.FallbackFraction)
	case pl.DeniedCache && pl.Kind != "" && pl.Kind != Global:
		return fmt.Errorf("placement: the denied cache is modelled for global placement only")
	}
	return nil
}

// fleet is the state of one key across the instances of a placement.
type fleet struct {
	pl Placement
	p  algorithm.Params
	n  int
	// countAll steps the state with a quota no traffic reaches and compares
	// the algorithm's own count (quota − Remaining) with p.Quota.
	countAll bool

	lims []limiter // one per instance (local, split) or one shared (global, hybrid)
	ops  int64
	// mismatch counts denied-cache answers the store would have contradicted.
	mismatch int64

	// denied cache, per instance
	deniedUntil []int64
	deniedCost  []int64

	// hybrid, per instance
	alloc, expires, seen, seenPrev, periodEnd []int64
	// out is the sum of alloc (units leased and not yet spent or dropped);
	// peakOut its largest value for the key.
	out, peakOut int64
}

func newFleet(pl Placement, p algorithm.Params, countAll bool) *fleet {
	n := pl.instances()
	f := &fleet{pl: pl, p: p, n: n, countAll: countAll}
	f.deniedUntil = make([]int64, n)
	f.deniedCost = make([]int64, n)
	f.alloc = make([]int64, n)
	f.expires = make([]int64, n)
	f.seen = make([]int64, n)
	f.seenPrev = make([]int64, n)
	f.periodEnd = make([]int64, n)
	return f
}

// reset gives every instance a fresh key under algorithm a.
func (f *fleet) reset(a sluice.Algorithm, logBuf []algorithm.Entry) {
	f.ops, f.mismatch, f.out, f.peakOut = 0, 0, 0, 0
	clear(f.deniedUntil)
	clear(f.deniedCost)
	clear(f.alloc)
	clear(f.expires)
	clear(f.seen)
	clear(f.seenPrev)
	clear(f.periodEnd)
	f.lims = f.lims[:0]
	shared := f.pl.Kind == "" || f.pl.Kind == Global || f.pl.Kind == Hybrid
	if f.countAll {
		f.lims = append(f.lims, newLimiter(a, algorithm.NewParams(meterQuota, f.p.Window, 0), logBuf))
		return
	}
	if shared {
		f.lims = append(f.lims, newLimiter(a, f.p, logBuf))
		return
	}
	p := f.p
	if f.pl.Kind == Split {
		q := max(f.p.Quota/int64(f.n), 1)
		burst := f.p.Burst
		if burst != f.p.Quota {
			burst = max(burst/int64(f.n), 1)
		} else {
			burst = 0
		}
		p = algorithm.NewParams(q, f.p.Window, burst)
	}
	for i := range f.n {
		var buf []algorithm.Entry
		if i == 0 {
			buf = logBuf
		}
		f.lims = append(f.lims, newLimiter(a, p, buf))
	}
}

// logBuf returns the first sliding_log's backing array for reuse.
func (f *fleet) logBuf() []algorithm.Entry {
	if len(f.lims) > 0 {
		if l, ok := f.lims[0].(*slidingLog); ok {
			return l.s[:0]
		}
	}
	return nil
}

// bytes is the state one instance holds for the key (the largest).
func (f *fleet) bytes() int {
	b := 0
	for _, l := range f.lims {
		b = max(b, l.bytes())
	}
	return b
}

// take decides a hit of cost at now arriving at instance i.
func (f *fleet) take(i int, now, cost int64) bool {
	switch f.pl.Kind {
	case Local, Split:
		return f.lims[i].take(now, cost).OK()
	case Hybrid:
		return f.hybrid(i, now, cost)
	}
	g := f.lims[0]
	if f.countAll {
		f.ops++
		d := g.take(now, cost)
		return meterQuota-d.Remaining <= f.p.Quota
	}
	if f.pl.DeniedCache && now < f.deniedUntil[i] && cost >= f.deniedCost[i] {
		// Served from the cache. Check the claim that this changes no
		// decision: a look (cost 0) shows whether the store would admit.
		if d := g.take(now, 0); cost <= d.Remaining {
			f.mismatch++
		}
		return false
	}
	f.ops++
	d := g.take(now, cost)
	if f.pl.DeniedCache && !d.OK() && d.RetryAfter > 0 {
		f.deniedUntil[i], f.deniedCost[i] = now+d.RetryAfter, cost
	}
	return d.OK()
}

// hybrid is the model described at Hybrid.
func (f *fleet) hybrid(i int, now, cost int64) bool {
	sync := f.pl.Sync.Microseconds()
	if now >= f.periodEnd[i] {
		// A new rate period: what was seen in the last one sizes the next
		// allotment (nothing seen for a whole period means zero).
		if now >= f.periodEnd[i]+sync {
			f.seenPrev[i] = 0
		} else {
			f.seenPrev[i] = f.seen[i]
		}
		f.seen[i] = 0
		f.periodEnd[i] = now + sync
	}
	f.seen[i] += cost
	if now >= f.expires[i] {
		f.setAlloc(i, 0)
	}
	if cost <= f.alloc[i] {
		f.setAlloc(i, f.alloc[i]-cost)
		return true
	}
	g := f.lims[0]
	f.ops++ // one atomic script: look, then take an allotment or decide
	rem := g.take(now, 0).Remaining
	if float64(rem-cost) < f.pl.fallback()*float64(f.p.Quota) {
		f.setAlloc(i, 0)
		return g.take(now, cost).OK()
	}
	size := min(max(f.seenPrev[i], 2*cost), rem/int64(f.n))
	if size < cost {
		return g.take(now, cost).OK()
	}
	if !g.take(now, size).OK() {
		return g.take(now, cost).OK()
	}
	f.setAlloc(i, size-cost)
	f.expires[i] = now + sync
	return true
}

// setAlloc sets instance i's allotment, keeping the outstanding sum. An
// expired allotment counts as outstanding until its instance next sees a hit
// (it can no longer be spent, so this only overstates the sum).
func (f *fleet) setAlloc(i int, v int64) {
	f.out += v - f.alloc[i]
	f.alloc[i] = v
	f.peakOut = max(f.peakOut, f.out)
}
