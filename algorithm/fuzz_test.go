package algorithm

import (
	"testing"
)

// The fuzz targets drive each algorithm with a fuzzed limit and a fuzzed
// sequence of (time step, cost) pairs, including steps back in time, and check
// the invariants every Decision must keep: no panic, Remaining within
// [0, capacity], no negative duration, allowed ⇒ RetryAfter = 0, limited ⇒
// RetryAfter > 0, a look (cost 0) always allowed, CostTooHigh only above the
// capacity. The high bits of each cost byte make some steps charges or
// refunds (not for concurrency): they are always allowed, never delay, keep
// what is in use within 2 × capacity (the debt cap) and never refund below
// a fresh key; a log never holds more than 2 × quota units.
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
		latest := now
		for len(steps) >= 2 {
			dt := int64(int8(steps[0])) * window / 64 // may step back
			cost := int64(steps[1] % 16)
			action := steps[1] / 64 // 0, 1: take; 2: charge; 3: refund
			if action == 2 {
				cost *= 3 // up to 45: past the debt cap of small limits
			}
			steps = steps[2:]
			now += dt
			latest = max(latest, now)
			oldTAT, oldTokens := tat, tokens.Last+tokens.Missing*p.Interval
			var d Decision
			switch {
			case action == 2 && alg%7 == 0:
				tokens, d = ChargeTokens(tokens, now, cost, p)
			case action == 3 && alg%7 == 0:
				tokens, d = RefundTokens(tokens, now, cost, p)
			case action == 2 && alg%7 <= 2:
				tat, d = ChargeTAT(tat, now, cost, p)
			case action == 3 && alg%7 <= 2:
				tat, d = RefundTAT(tat, now, cost, p)
			case action == 2 && alg%7 == 3:
				win, d = ChargeFixedWindow(win, now, cost, p)
			case action == 3 && alg%7 == 3:
				win, d = RefundFixedWindow(win, now, cost, p)
			case action == 2 && alg%7 == 4:
				win, d = ChargeSlidingWindow(win, now, cost, p)
			case action == 3 && alg%7 == 4:
				win, d = RefundSlidingWindow(win, now, cost, p)
			case action == 2 && alg%7 == 5:
				log, d = ChargeSlidingLog(log, now, cost, p)
			case action == 3 && alg%7 == 5:
				log, d = RefundSlidingLog(log, now, cost, p)
			case alg%7 == 0:
				tokens, d = TokenBucket(tokens, now, cost, p)
			case alg%7 == 1:
				tat, d = GCRA(tat, now, cost, p)
			case alg%7 == 2:
				tat, d = LeakyBucket(tat, now, cost, p)
			case alg%7 == 3:
				win, d = FixedWindow(win, now, cost, p)
			case alg%7 == 4:
				win, d = SlidingWindow(win, now, cost, p)
			case alg%7 == 5:
				log, d = SlidingLog(log, now, cost, p)
			default:
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
			settled := action >= 2 && alg%7 != 6
			if settled && (!d.OK() || d.RetryAfter != 0 || d.Delay != 0) {
				t.Fatalf("alg %d %+v: action %d cost %d: %+v, want allowed with no wait", alg%7, p, action, cost, d)
			}
			debt := latest + 2*p.Burst*p.Interval // the cap, with room for a clock stepped back
			switch tt := tokens.Last + tokens.Missing*p.Interval; {
			case alg%7 == 0 && tt > max(debt, oldTokens):
				t.Fatalf("token_bucket %+v: TAT %d past the debt cap %d", p, tt, debt)
			case alg%7 == 0 && action == 3 && tt < now && tt != oldTokens:
				t.Fatalf("token_bucket %+v: refund left TAT %d before now %d", p, tt, now)
			case (alg%7 == 1 || alg%7 == 2) && tat > max(debt, oldTAT):
				t.Fatalf("alg %d %+v: TAT %d past the debt cap %d", alg%7, p, tat, debt)
			case (alg%7 == 1 || alg%7 == 2) && action == 3 && tat < now && tat != oldTAT:
				t.Fatalf("alg %d %+v: refund left TAT %d before now %d", alg%7, p, tat, now)
			case win.Cur < 0 || win.Prev < 0 || win.Cur > 2*q || win.Prev > 2*q:
				t.Fatalf("alg %d %+v: window state %+v outside [0, 2 × quota]", alg%7, p, win)
			}
			var units int64
			for _, e := range log {
				if e.N <= 0 {
					t.Fatalf("alg %d: log entry %+v holds no units", alg%7, e)
				}
				units += e.N
			}
			if units > 2*q {
				t.Fatalf("alg %d: log holds %d units, quota %d", alg%7, units, q)
			}
		}
	})
}
