package algorithm

import (
	"testing"
)

// The fuzz targets drive each algorithm with a fuzzed limit and a fuzzed
// sequence of (time step, cost) pairs, including steps back in time, and check
// the invariants every Decision must keep: no panic, Remaining within
// [0, capacity], no negative duration, allowed ⇒ RetryAfter = 0, limited ⇒
// RetryAfter > 0, a look (cost 0) always allowed, CostTooHigh only above the
// capacity, and a log never longer than the quota.
//
//	go test -fuzz FuzzSlidingWindow ./algorithm
func FuzzTokenBucket(f *testing.F)   { fuzzAlgorithm(f, 0) }
func FuzzGCRA(f *testing.F)          { fuzzAlgorithm(f, 1) }
func FuzzLeakyBucket(f *testing.F)   { fuzzAlgorithm(f, 2) }
func FuzzFixedWindow(f *testing.F)   { fuzzAlgorithm(f, 3) }
func FuzzSlidingWindow(f *testing.F) { fuzzAlgorithm(f, 4) }
func FuzzSlidingLog(f *testing.F)    { fuzzAlgorithm(f, 5) }
func FuzzConcurrency(f *testing.F)   { fuzzAlgorithm(f, 6) }

// FuzzAlgorithms fuzzes the choice of algorithm too.
func FuzzAlgorithms(f *testing.F) { fuzzAlgorithm(f, -1) }

func fuzzAlgorithm(f *testing.F, only int) {
	f.Add(uint8(0), uint32(3), uint32(1000), uint32(0), []byte{1, 0, 1, 0, 0, 2, 200, 1})
	f.Add(uint8(4), uint32(9), uint32(1300), uint32(0), []byte{5, 3, 250, 1, 0, 9, 1, 10})
	f.Add(uint8(6), uint32(2), uint32(10000), uint32(0), []byte{0, 1, 0, 1, 0, 1, 255, 0})
	f.Add(uint8(1), uint32(1), uint32(1), uint32(5), []byte{0, 5, 0, 6, 128, 1})
	f.Fuzz(func(t *testing.T, alg uint8, quota, windowMs, burst uint32, steps []byte) {
		if only >= 0 {
			alg = uint8(only)
		}
		window := int64(windowMs%100000+1) * 1000 // 1ms … 100s, in µs
		q := int64(quota % 10000)
		if q > window {
			q = window
		}
		b := int64(burst % 10000)
		if q == 0 {
			b = 0
		}
		p := NewParams(q, window, b)
		now := int64(1_767_225_600_000_000) // 2026-01-01 in µs
		var (
			tat    int64
			tokens TokenState
			win    WindowState
			log    []Entry
			id     uint64
		)
		for len(steps) >= 2 {
			dt := int64(int8(steps[0])) * window / 64 // may step back
			cost := int64(steps[1] % 16)
			steps = steps[2:]
			now += dt
			var d Decision
			switch alg % 7 {
			case 0:
				tokens, d = TokenBucket(tokens, now, cost, p)
			case 1:
				tat, d = GCRA(tat, now, cost, p)
			case 2:
				tat, d = LeakyBucket(tat, now, cost, p)
			case 3:
				win, d = FixedWindow(win, now, cost, p)
			case 4:
				win, d = SlidingWindow(win, now, cost, p)
			case 5:
				log, d = SlidingLog(log, now, cost, p)
			case 6:
				id++
				if cost == 15 && len(log) > 0 {
					log, d = Release(log, now, log[0].ID, p)
				} else {
					log, d = Concurrency(log, now, cost, id, p)
				}
			}
			capacity := q
			if alg%7 <= 2 {
				capacity = p.Burst
			}
			switch {
			case d.Remaining < 0 || d.Remaining > capacity:
				t.Fatalf("alg %d %+v cost %d: Remaining %d outside [0, %d]", alg%7, p, cost, d.Remaining, capacity)
			case d.RetryAfter < 0 || d.ResetAfter < 0 || d.Delay < 0:
				t.Fatalf("alg %d %+v cost %d: negative duration in %+v", alg%7, p, cost, d)
			case d.OK() && d.RetryAfter != 0:
				t.Fatalf("alg %d %+v cost %d: allowed with RetryAfter %d", alg%7, p, cost, d.RetryAfter)
			case d.Reason == Limited && d.RetryAfter == 0:
				t.Fatalf("alg %d %+v cost %d: limited with RetryAfter 0", alg%7, p, cost)
			case d.Reason == CostTooHigh && (cost <= capacity || d.RetryAfter != 0):
				t.Fatalf("alg %d %+v cost %d: CostTooHigh wrongly: %+v", alg%7, p, cost, d)
			case cost == 0 && !d.OK():
				t.Fatalf("alg %d %+v: a look (cost 0) was denied: %+v", alg%7, p, d)
			}
			if len(log) > int(q)+1 {
				t.Fatalf("alg %d: log holds %d entries, quota %d", alg%7, len(log), q)
			}
		}
	})
}
