package memory

import "github.com/sluice-rl/sluice"

// admit makes room for one more key in sh, evicting if the shard is at its
// cap, and returns the key to store (a private copy). Requires sh.mu.
func (s *store) admit(sh *shard, now int64, key string) string {
	if s.shardCap > 0 && sh.count >= s.shardCap {
		if fresh := sh.evictOne(now); !fresh {
			s.evictions.Add(1)
		} else {
			s.swept.Add(1)
		}
	}
	sh.count++
	return cloneKey(key)
}

// sampleSize is how many keys evictOne looks at, as Redis's approximated LRU
// does: enough to find an idle key when a fair share of keys are idle, few
// enough to keep a flood of new keys cheap.
const sampleSize = 8

// evictOne drops the key, among a random sample of the shard's largest map,
// that is closest to its fresh state (an idle one if the sample has one). It
// reports whether the dropped key was already fresh. Requires sh.mu.
func (sh *shard) evictOne(now int64) (fresh bool) {
	var (
		bestKey string
		bestExp int64
		bestAlg sluice.Algorithm
		found   bool
	)
	consider := func(alg sluice.Algorithm, k string, exp int64) {
		if !found || exp < bestExp {
			bestKey, bestExp, bestAlg, found = k, exp, alg, true
		}
	}
	// Go randomizes where map iteration starts, so the first few entries
	// are a random sample.
	switch alg := sh.largest(); alg {
	case sluice.GCRA:
		sample(sh.gcra, alg, func(v *tatState) int64 { return v.tat }, consider)
	case sluice.LeakyBucket:
		sample(sh.leaky, alg, func(v *tatState) int64 { return v.tat }, consider)
	case sluice.TokenBucket:
		sample(sh.token, alg, func(v *tokenState) int64 { return v.exp }, consider)
	case sluice.FixedWindow:
		sample(sh.fixed, alg, func(v *windowState) int64 { return v.exp }, consider)
	case sluice.SlidingWindow:
		sample(sh.slide, alg, func(v *windowState) int64 { return v.exp }, consider)
	case sluice.SlidingLog:
		sample(sh.slog, alg, func(v *logState) int64 { return v.exp }, consider)
	case sluice.Concurrency:
		sample(sh.conc, alg, func(v *logState) int64 { return v.exp }, consider)
	}
	if !found {
		return true
	}
	sh.remove(bestAlg, bestKey)
	return bestExp <= now
}

// largest returns the algorithm whose map in sh holds the most keys.
func (sh *shard) largest() sluice.Algorithm {
	best, n := sluice.GCRA, len(sh.gcra)
	for _, c := range []struct {
		alg sluice.Algorithm
		n   int
	}{
		{sluice.LeakyBucket, len(sh.leaky)},
		{sluice.TokenBucket, len(sh.token)},
		{sluice.FixedWindow, len(sh.fixed)},
		{sluice.SlidingWindow, len(sh.slide)},
		{sluice.SlidingLog, len(sh.slog)},
		{sluice.Concurrency, len(sh.conc)},
	} {
		if c.n > n {
			best, n = c.alg, c.n
		}
	}
	return best
}

// sweep deletes every key that is fresh at now and returns how many it
// deleted. Requires sh.mu.
func (sh *shard) sweep(now int64) int {
	before := sh.count
	for k, v := range sh.gcra {
		if v.tat <= now {
			delete(sh.gcra, k)
			sh.count--
		}
	}
	for k, v := range sh.leaky {
		if v.tat <= now {
			delete(sh.leaky, k)
			sh.count--
		}
	}
	for k, v := range sh.token {
		if v.exp <= now {
			delete(sh.token, k)
			sh.count--
		}
	}
	for _, m := range []map[string]*windowState{sh.fixed, sh.slide} {
		for k, v := range m {
			if v.exp <= now {
				delete(m, k)
				sh.count--
			}
		}
	}
	for _, m := range []map[string]*logState{sh.slog, sh.conc} {
		for k, v := range m {
			if v.exp <= now {
				delete(m, k)
				sh.count--
			}
		}
	}
	return before - sh.count
}

func sample[V any](m map[string]V, alg sluice.Algorithm, exp func(V) int64, consider func(sluice.Algorithm, string, int64)) {
	n := 0
	for k, v := range m {
		consider(alg, k, exp(v))
		if n++; n == sampleSize {
			break
		}
	}
}
