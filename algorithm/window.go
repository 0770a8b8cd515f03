package algorithm

import "math"

// WindowState is the state of fixed_window and sliding_window. The zero value
// is a fresh key.
type WindowState struct {
	// ID is the index of the current window: ⌊now / Window⌋.
	ID int64
	// Cur is the count admitted in window ID.
	Cur int64
	// Prev is the count admitted in window ID−1 (sliding_window only).
	Prev int64
}

// windowOf returns the window index for now, never moving backward from the
// stored one (a clock that steps back must not reopen a spent window).
func windowOf(s WindowState, now int64, p Params) int64 {
	return max(FloorDiv(now, p.Window), s.ID)
}

// FixedWindow counts admissions in epoch-aligned windows of p.Window and
// admits while the count stays within p.Quota. At a window boundary it can
// admit up to 2 × Quota within a short span; that is the price of O(1) state.
func FixedWindow(s WindowState, now, cost int64, p Params) (WindowState, Decision) {
	id := windowOf(s, now, p)
	if id != s.ID {
		s = WindowState{ID: id}
	}
	end := (id+1)*p.Window - now
	d := Decision{Limit: p.Quota}
	switch {
	case cost > p.Quota:
		d.Reason = CostTooHigh
	case cost > 0 && s.Cur+cost > p.Quota: // a look is allowed, even in debt
		d.Reason = Limited
		d.RetryAfter = end
	default:
		s.Cur += cost
	}
	d.Remaining = max(p.Quota-s.Cur, 0) // a charge may have put Cur above Quota
	if s.Cur > 0 {
		d.ResetAfter = end
	}
	return s, d
}

// SlidingWindow approximates a sliding window with two fixed windows: the
// estimate at offset e into the current window is
// ⌈Prev × (Window − e) / Window⌉ + Cur, and a cost is admitted while the
// estimate plus the cost stays within Quota. The weighted term is computed in
// IEEE-754 double precision (the Lua implementation does the same operations in
// the same order, so both round identically).
func SlidingWindow(s WindowState, now, cost int64, p Params) (WindowState, Decision) {
	id := windowOf(s, now, p)
	switch {
	case id == s.ID+1:
		s = WindowState{ID: id, Prev: s.Cur}
	case id != s.ID:
		s = WindowState{ID: id}
	}
	e := max(now-id*p.Window, 0)
	est := weighted(s.Prev, e, p.Window) + s.Cur
	d := Decision{Limit: p.Quota}
	switch {
	case cost > p.Quota:
		d.Reason = CostTooHigh
	case cost > 0 && est+cost > p.Quota:
		d.Reason = Limited
		d.RetryAfter = slidingRetry(s, e, cost, p)
	default:
		s.Cur += cost
		est += cost
	}
	d.Remaining = max(p.Quota-est, 0)
	switch {
	case s.Cur > 0:
		d.ResetAfter = (id+2)*p.Window - now
	case s.Prev > 0:
		d.ResetAfter = (id+1)*p.Window - now
	}
	return s, d
}

// weighted is ⌈prev × (w − e) / w⌉ in double precision. The explicit
// conversion forbids the compiler from fusing the multiply into another op.
func weighted(prev, e, w int64) int64 {
	if prev == 0 {
		return 0
	}
	x := float64(float64(prev) * float64(w-e))
	return int64(math.Ceil(x / float64(w)))
}

// slidingRetry finds the earliest instant at which cost fits, assuming no other
// traffic: later in the current window, in the next one (where Cur becomes
// Prev), or at the start of the one after (where both are zero).
func slidingRetry(s WindowState, e, cost int64, p Params) int64 {
	w := p.Window
	if r := p.Quota - s.Cur - cost; r >= 1 && s.Prev > 0 {
		return firstFit(s.Prev, r, e, w) - e
	}
	if s.Cur == 0 {
		return w - e
	}
	if r := p.Quota - cost; r >= 1 {
		return w + firstFit(s.Cur, r, 0, w) - e
	}
	return 2*w - e
}

// firstFit returns the least offset x in [lo, w) with weighted(prev, x, w) ≤ r,
// for prev ≥ 1 and r ≥ 1 (weighted(prev, w−1, w) = 1 ≤ r, so one exists).
// The closed form gives a candidate; the two loops settle the last microsecond
// against the exact predicate, so Go and Lua agree whatever their rounding.
func firstFit(prev, r, lo, w int64) int64 {
	x := w - int64(math.Floor(float64(r)*float64(w)/float64(prev)))
	x = min(max(x, lo), w-1)
	for x > lo && weighted(prev, x-1, w) <= r {
		x--
	}
	for weighted(prev, x, w) > r {
		x++
	}
	return x
}
