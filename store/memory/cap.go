package memory

import "math"

// Making room at the cap. Keys back in their fresh state (idle) can be
// dropped without changing any decision, so they go first: when a shard at
// its cap needs room and one of its keys may be fresh (its earliest expiry,
// a lower bound kept in shard.minExp, has passed), the whole shard is swept
// and every fresh key freed at once. Only when none is fresh is a key that
// is mid-window evicted — the sampled one closest to fresh — and counted in
// Stats.Evictions.
//
// A sweep visits every key of the shard, so it is rationed: at most one per
// sweepGap of the store's clock, or one per shard.count/sweepPerInserts new
// keys, whichever comes first. Between sweeps the sampled eviction still
// prefers an idle key when its sample holds one.
const (
	sweepGap        = 10_000 // µs
	sweepPerInserts = 8
)

// admit accounts for one more key in sh, first making room if the shard is
// at its cap. Requires sh.mu.
func (s *store) admit(sh *shard, now int64) {
	if s.shardCap > 0 && sh.count >= s.shardCap {
		freed := 0
		if sh.minExp <= now && (now-sh.lastSweep >= sweepGap || sh.sinceSweep*sweepPerInserts >= sh.count) {
			freed = s.sweepShard(sh, now)
			s.swept.Add(uint64(freed))
		}
		if freed == 0 {
			if fresh := s.evictOne(sh, now); fresh {
				s.swept.Add(1)
			} else {
				s.evictions.Add(1)
			}
		}
	}
	sh.count++
	sh.sinceSweep++
}

// note lowers sh.minExp to exp, the expiry of a key just written. Requires
// sh.mu.
func (sh *shard) note(exp int64) {
	if exp < sh.minExp {
		sh.minExp = exp
	}
}

// sampleSize is how many keys evictOne looks at, as Redis's approximated LRU
// does: enough to find an idle key when a fair share of keys are idle, few
// enough to keep a flood of new keys cheap.
const sampleSize = 8

// evictOne drops the key, among a random sample of the shard's largest
// table, that is closest to its fresh state (an idle one if the sample has
// one). It reports whether the dropped key was already fresh. Requires sh.mu.
func (s *store) evictOne(sh *shard, now int64) (fresh bool) {
	tabs := []struct {
		n   int
		run func() (int64, bool)
	}{
		{sh.gcra.n, func() (int64, bool) { return evictFrom(s, &sh.gcra, func(v *tatState) int64 { return v.tat }) }},
		{sh.leaky.n, func() (int64, bool) { return evictFrom(s, &sh.leaky, func(v *tatState) int64 { return v.tat }) }},
		{sh.token.n, func() (int64, bool) { return evictFrom(s, &sh.token, func(v *tatState) int64 { return v.tat }) }},
		{sh.fixed.n, func() (int64, bool) { return evictFrom(s, &sh.fixed, func(v *windowState) int64 { return v.exp }) }},
		{sh.slide.n, func() (int64, bool) { return evictFrom(s, &sh.slide, func(v *windowState) int64 { return v.exp }) }},
		{sh.slog.n, func() (int64, bool) { return evictFrom(s, &sh.slog, func(v **logState) int64 { return (*v).exp }) }},
		{sh.conc.n, func() (int64, bool) { return evictFrom(s, &sh.conc, func(v **logState) int64 { return (*v).exp }) }},
	}
	best := 0
	for i := range tabs {
		if tabs[i].n > tabs[best].n {
			best = i
		}
	}
	exp, ok := tabs[best].run()
	if !ok {
		return true
	}
	sh.count--
	return exp <= now
}

// evictFrom deletes, among a random sample of t, the entry with the earliest
// exp, and returns that exp.
func evictFrom[V any](s *store, t *table[V], exp func(*V) int64) (int64, bool) {
	victim, vexp := -1, int64(0)
	t.sample(sampleSize, func(i int) {
		if e := exp(&t.slots[i].v); victim < 0 || e < vexp {
			victim, vexp = i, e
		}
	})
	if victim < 0 {
		return 0, false
	}
	t.deleteAt(s.seed, victim)
	return vexp, true
}

// sweepShard deletes every key that is fresh at now, recomputes sh.minExp
// from the keys left, and returns how many it deleted. Requires sh.mu.
func (s *store) sweepShard(sh *shard, now int64) int {
	m := int64(math.MaxInt64)
	stale := func(exp int64) bool {
		if exp <= now {
			return true
		}
		m = min(m, exp)
		return false
	}
	n := sweepTable(s, &sh.gcra, func(v *tatState) bool { return stale(v.tat) }) +
		sweepTable(s, &sh.leaky, func(v *tatState) bool { return stale(v.tat) }) +
		sweepTable(s, &sh.token, func(v *tatState) bool { return stale(v.tat) }) +
		sweepTable(s, &sh.fixed, func(v *windowState) bool { return stale(v.exp) }) +
		sweepTable(s, &sh.slide, func(v *windowState) bool { return stale(v.exp) }) +
		sweepTable(s, &sh.slog, func(v **logState) bool { return stale((*v).exp) }) +
		sweepTable(s, &sh.conc, func(v **logState) bool { return stale((*v).exp) })
	sh.count -= n
	for k, rec := range sh.pairs {
		if rec.Exp <= now {
			delete(sh.pairs, k)
		}
	}
	sh.minExp, sh.lastSweep, sh.sinceSweep = m, now, 0
	return n
}

func sweepTable[V any](s *store, t *table[V], stale func(*V) bool) int {
	return t.sweep(s.seed, stale)
}
