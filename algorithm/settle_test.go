package algorithm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// settleParams are the limits the charge and refund tests run with: a
// burst above the quota, windows that do not divide evenly, a large quota.
func settleParams() []Params {
	return []Params{
		NewParams(3, 1_000_000, 0),
		NewParams(7, 3_000_000, 10),
		NewParams(100, 1_000_000, 0),
		NewParams(1, 100_000, 5),
	}
}

// history plays a random sequence of takes on a key of every state kind,
// with the clock moving forward only, and returns the states and the time.
func history(rng *rand.Rand, p Params) (tat int64, tokens TokenState, fixed, sliding WindowState, log []Entry, now int64) {
	now = 1_767_225_600_000_000
	for range rng.IntN(40) {
		now += rng.Int64N(p.Window / 4)
		cost := rng.Int64N(p.Quota + 1)
		tat, _ = GCRA(tat, now, cost, p)
		tokens, _ = TokenBucket(tokens, now, cost, p)
		fixed, _ = FixedWindow(fixed, now, cost, p)
		sliding, _ = SlidingWindow(sliding, now, cost, p)
		log, _ = SlidingLog(log, now, cost, p)
	}
	return tat, tokens, fixed, sliding, log, now + rng.Int64N(p.Window)
}

// A charge of c then a refund of c at the same instant leave every key as
// it was, when the charge hit no cap: the same state (once rolled to now),
// and so the same decisions.
func TestChargeThenRefundRestores(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, p := range settleParams() {
		checked := 0
		for trial := range 2000 {
			tat, tokens, fixed, sliding, log, now := history(rng, p)
			c := 1 + rng.Int64N(p.Quota)

			// Buckets: below the cap, the TAT comes back exactly (or to
			// now, which is the same fresh bucket, from before now).
			if max(tat, now)+c*p.Interval <= now+2*p.Burst*p.Interval {
				t1, _ := ChargeTAT(tat, now, c, p)
				t2, d := RefundTAT(t1, now, c, p)
				if t2 != max(tat, now) {
					t.Fatalf("%+v trial %d: TAT %d, charge then refund %d at %d: TAT %d, want %d", p, trial, tat, c, now, t2, max(tat, now))
				}
				if want := bucketLook(tat, now, p); d != want {
					t.Fatalf("%+v trial %d: after charge and refund of %d: %+v, want %+v", p, trial, c, d, want)
				}
				s1, _ := ChargeTokens(tokens, now, c, p)
				s2, d2 := RefundTokens(s1, now, c, p)
				if _, want := TokenBucket(tokens, now, 0, p); d2 != want || s2.Last+s2.Missing*p.Interval != max(tokens.Last+tokens.Missing*p.Interval, now) {
					t.Fatalf("%+v trial %d: tokens %+v, charge then refund %d: %+v %+v, want %+v", p, trial, tokens, c, s2, d2, want)
				}
				checked++
			}

			// Windows: the count comes back once rolled to now.
			if fixed.Cur+c <= 2*p.Quota {
				rolled, _ := FixedWindow(fixed, now, 0, p)
				f1, _ := ChargeFixedWindow(fixed, now, c, p)
				f2, d := RefundFixedWindow(f1, now, c, p)
				_, want := FixedWindow(fixed, now, 0, p)
				if f2 != rolled || d != want {
					t.Fatalf("%+v trial %d: fixed %+v, charge then refund %d: %+v %+v, want %+v %+v", p, trial, fixed, c, f2, d, rolled, want)
				}
			}
			if rolled := rollSliding(sliding, now, p); rolled.Cur+c <= 2*p.Quota {
				s1, _ := ChargeSlidingWindow(sliding, now, c, p)
				s2, d := RefundSlidingWindow(s1, now, c, p)
				_, want := SlidingWindow(sliding, now, 0, p)
				if s2 != rolled || d != want {
					t.Fatalf("%+v trial %d: sliding %+v, charge then refund %d: %+v %+v, want %+v %+v", p, trial, sliding, c, s2, d, rolled, want)
				}
			}

			// The log: the charge's units are the newest, and go first.
			live := dropThrough(slices.Clone(log), now-p.Window)
			if sum(live)+c <= 2*p.Quota {
				l1, _ := ChargeSlidingLog(slices.Clone(log), now, c, p)
				l2, d := RefundSlidingLog(l1, now, c, p)
				_, want := SlidingLog(slices.Clone(log), now, 0, p)
				if !slices.Equal(l2, live) || d != want {
					t.Fatalf("%+v trial %d: log %+v, charge then refund %d: %+v %+v, want %+v %+v", p, trial, log, c, l2, d, live, want)
				}
			}
		}
		if checked < 500 {
			t.Errorf("%+v: only %d bucket trials below the cap, want ≥ 500", p, checked)
		}
	}
}

// A refund never leaves more than a fresh key would have, whatever is
// refunded, and a refund of everything in use leaves exactly a fresh key.
func TestRefundClampsAtFresh(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, p := range settleParams() {
		for trial := range 1000 {
			tat, tokens, fixed, sliding, log, now := history(rng, p)
			all := 2*p.Burst + 1 + p.Quota*2
			fresh := []struct {
				name string
				d    Decision
				cap  int64
			}{
				{"gcra", second(RefundTAT(tat, now, all, p)), p.Burst},
				{"token_bucket", second(RefundTokens(tokens, now, all, p)), p.Burst},
				{"fixed_window", second(RefundFixedWindow(fixed, now, all, p)), p.Quota},
				{"sliding_window", second(RefundSlidingWindow(sliding, now, all, p)), p.Quota},
				{"sliding_log", second(RefundSlidingLog(slices.Clone(log), now, all, p)), p.Quota},
			}
			for _, f := range fresh {
				if want := (Decision{Limit: f.cap, Remaining: f.cap}); f.d != want {
					t.Fatalf("%+v trial %d: %s: refund of everything: %+v, want a fresh key %+v", p, trial, f.name, f.d, want)
				}
			}
		}
	}
}

func second[S any](_ S, d Decision) Decision { return d }

// A charge reaches the cap and stops there: 2 × capacity in use, and a
// take denied until the debt is paid off, with the exact RetryAfter.
func TestChargeCap(t *testing.T) {
	for _, p := range settleParams() {
		now := int64(1_767_225_600_000_000)
		huge := int64(MaxExact)
		tat, d := ChargeTAT(0, now, huge, p)
		if want := now + 2*p.Burst*p.Interval; tat != want || d.Remaining != 0 || d.ResetAfter != want-now {
			t.Errorf("%+v: ChargeTAT(huge) = %d %+v, want TAT %d", p, tat, d, want)
		}
		_, d = GCRA(tat, now, 1, p)
		if want := p.Burst*p.Interval + p.Interval; d.Reason != Limited || d.RetryAfter != want {
			t.Errorf("%+v: take 1 at the cap: %+v, want limited with RetryAfter %d", p, d, want)
		}
		w, d := ChargeFixedWindow(WindowState{}, now, huge, p)
		if w.Cur != 2*p.Quota || d.Remaining != 0 || !d.OK() {
			t.Errorf("%+v: ChargeFixedWindow(huge) = %+v %+v, want %d counted", p, w, d, 2*p.Quota)
		}
		log, d := ChargeSlidingLog(nil, now, huge, p)
		if len(log) != 1 || log[0].N != 2*p.Quota || d.Remaining != 0 || !d.OK() {
			t.Errorf("%+v: ChargeSlidingLog(huge) = %+v %+v, want one entry of %d", p, log, d, 2*p.Quota)
		}
		_, d = SlidingLog(log, now+p.Window-1, 1, p)
		if d.Reason != Limited || d.RetryAfter != 1 {
			t.Errorf("%+v: take 1 a µs before the charge leaves: %+v, want RetryAfter 1", p, d)
		}
	}
	// MaxExact bounds the TAT too, so that Lua doubles stay exact.
	p := NewParams(1, 10*366*24*3600*1_000_000, 28) // burst × interval just below 2^53
	now := int64(1_767_225_600_000_000)
	if tat, _ := ChargeTAT(0, now, MaxExact, p); tat != MaxExact {
		t.Errorf("ChargeTAT with a debt cap past 2^53: TAT %d, want MaxExact %d", tat, int64(MaxExact))
	}
}
