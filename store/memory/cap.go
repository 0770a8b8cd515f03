package memory

// admit accounts for one more key in sh, first evicting one if the shard is
// at its cap. Requires sh.mu.
func (s *store) admit(sh *shard, now int64) {
	if s.shardCap > 0 && sh.count >= s.shardCap {
		if fresh := s.evictOne(sh, now); fresh {
			s.swept.Add(1)
		} else {
			s.evictions.Add(1)
		}
	}
	sh.count++
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

// sweep deletes every key that is fresh at now and returns how many it
// deleted. Requires sh.mu.
func (s *store) sweepShard(sh *shard, now int64) int {
	n := sweepTable(s, &sh.gcra, func(v *tatState) bool { return v.tat <= now }) +
		sweepTable(s, &sh.leaky, func(v *tatState) bool { return v.tat <= now }) +
		sweepTable(s, &sh.token, func(v *tatState) bool { return v.tat <= now }) +
		sweepTable(s, &sh.fixed, func(v *windowState) bool { return v.exp <= now }) +
		sweepTable(s, &sh.slide, func(v *windowState) bool { return v.exp <= now }) +
		sweepTable(s, &sh.slog, func(v **logState) bool { return (*v).exp <= now }) +
		sweepTable(s, &sh.conc, func(v **logState) bool { return (*v).exp <= now })
	sh.count -= n
	return n
}

func sweepTable[V any](s *store, t *table[V], stale func(*V) bool) int {
	return t.sweep(s.seed, stale)
}
