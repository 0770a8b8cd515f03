package algorithm

// Charge and refund: settling a cost known only after the fact. A charge adds
// units whether or not they fit (they were already spent), a refund gives
// units back; neither is ever denied, and each returns the state after it and
// the Decision a look (cost 0) at that state would give. A cost of 0 changes
// nothing.
//
// Charges may put a key into debt, but what is in use never exceeds twice
// the capacity (2 × Burst for the buckets, 2 × Quota otherwise): a key in
// debt is refused until it has paid the debt off with time, at most one
// extra capacity's worth. Counts and instants are also capped at MaxExact,
// so the Lua scripts, whose numbers are doubles, stay exact and agree.
//
// Refunds never go below a fresh key: Remaining never exceeds the capacity,
// and units whose window has passed give nothing back.
//
// Reset needs no function here: it is a fresh key (the zero state).

// MaxExact is 2^53 − 1, the largest integer both implementations (Go int64
// and Lua doubles) hold exactly; charges never push a state past it.
const MaxExact = 1<<53 - 1

// ChargeTAT charges cost to a bucket whose state is the TAT tat (gcra and
// leaky_bucket): the TAT moves cost intervals later from max(tat, now), but
// never more than 2 × Burst intervals past now (nor past MaxExact), and
// never earlier than it was (a clock that stepped back does not turn a
// charge into a refund). Delay is zero: the cost was already spent.
func ChargeTAT(tat, now, cost int64, p Params) (int64, Decision) {
	if cost > 0 && p.Burst > 0 {
		base := max(tat, now)
		debt := 2 * p.Burst * p.Interval
		tat = max(tat, min(base+min(cost, 2*p.Burst)*p.Interval, now+debt, MaxExact))
	}
	return tat, bucketLook(tat, now, p)
}

// RefundTAT gives cost units back to a bucket whose state is the TAT tat:
// the TAT moves cost intervals earlier, but never before now (a full
// bucket). A TAT already at or before now has nothing to give back. The
// result is fresh (and may be forgotten) when the returned TAT ≤ now.
func RefundTAT(tat, now, cost int64, p Params) (int64, Decision) {
	if cost > 0 && tat > now {
		tat = max(tat-min(cost, 2*p.Burst+1)*p.Interval, now)
	}
	return tat, bucketLook(tat, now, p)
}

// bucketLook is the Decision of a look (cost 0) at a bucket with TAT tat.
func bucketLook(tat, now int64, p Params) Decision {
	_, d := bucketDecide(tat, now, 0, p)
	return d
}

// ChargeTokens is ChargeTAT for token_bucket, through the TAT its state
// implies; the new state is stored in canonical form, as TokenBucket does.
func ChargeTokens(s TokenState, now, cost int64, p Params) (TokenState, Decision) {
	tat, d := ChargeTAT(s.Last+s.Missing*p.Interval, now, cost, p)
	return tokensAt(s, tat, now, p), d
}

// RefundTokens is RefundTAT for token_bucket, through the TAT its state
// implies; a changed state is stored in canonical form.
func RefundTokens(s TokenState, now, cost int64, p Params) (TokenState, Decision) {
	tat, d := RefundTAT(s.Last+s.Missing*p.Interval, now, cost, p)
	return tokensAt(s, tat, now, p), d
}

// tokensAt returns the canonical token state whose TAT is tat, or s itself
// when tat is already its TAT (nothing changed).
func tokensAt(s TokenState, tat, now int64, p Params) TokenState {
	if p.Interval == 0 || tat == s.Last+s.Missing*p.Interval {
		return s
	}
	m := CeilDiv(max(tat-now, 0), p.Interval)
	return TokenState{Missing: m, Last: tat - m*p.Interval}
}

// ChargeFixedWindow charges cost to the current window (rolling to it as
// FixedWindow does), up to 2 × Quota counted in it.
func ChargeFixedWindow(s WindowState, now, cost int64, p Params) (WindowState, Decision) {
	if cost > 0 {
		id := windowOf(s, now, p)
		if id != s.ID {
			s = WindowState{ID: id}
		}
		s.Cur = chargeCount(s.Cur, cost, p.Quota)
	}
	_, d := FixedWindow(s, now, 0, p)
	return s, d
}

// RefundFixedWindow gives cost units back to the stored window if now is
// in it (never below zero). A window that has passed gives nothing back,
// nor does a now before the stored window: a refund at the instant of a
// charge (a late reply's) that was counted in an earlier window, or a clock
// that went back, must not free units of a window that did not count them.
func RefundFixedWindow(s WindowState, now, cost int64, p Params) (WindowState, Decision) {
	if cost > 0 && FloorDiv(now, p.Window) == s.ID {
		s.Cur = max(s.Cur-cost, 0)
	}
	_, d := FixedWindow(s, now, 0, p)
	return s, d
}

// ChargeSlidingWindow charges cost to the current window (rolling to it as
// SlidingWindow does), up to 2 × Quota counted in it.
func ChargeSlidingWindow(s WindowState, now, cost int64, p Params) (WindowState, Decision) {
	if cost > 0 {
		s = rollSliding(s, now, p)
		s.Cur = chargeCount(s.Cur, cost, p.Quota)
	}
	_, d := SlidingWindow(s, now, 0, p)
	return s, d
}

// RefundSlidingWindow rolls to the current window as SlidingWindow does,
// then gives cost units back from the current window's count first, then
// from the previous one's, never below zero. The state is returned rolled
// only when something was given back.
func RefundSlidingWindow(s WindowState, now, cost int64, p Params) (WindowState, Decision) {
	if cost > 0 {
		r := rollSliding(s, now, p)
		fromCur := min(cost, r.Cur)
		fromPrev := min(cost-fromCur, r.Prev)
		r.Cur -= fromCur
		r.Prev -= fromPrev
		if fromCur+fromPrev > 0 {
			s = r
		}
	}
	_, d := SlidingWindow(s, now, 0, p)
	return s, d
}

// rollSliding moves s to the window of now, as SlidingWindow does.
func rollSliding(s WindowState, now int64, p Params) WindowState {
	id := windowOf(s, now, p)
	switch {
	case id == s.ID+1:
		return WindowState{ID: id, Prev: s.Cur}
	case id != s.ID:
		return WindowState{ID: id}
	}
	return s
}

// chargeCount adds cost to a window count, capped at 2 × quota (and
// MaxExact).
func chargeCount(cur, cost, quota int64) int64 {
	return min(cur+min(cost, MaxExact), 2*quota, MaxExact)
}

// ChargeSlidingLog drops the expired entries of log and adds cost units at
// now, merged like an admission, but no more than bring the units in use to
// 2 × Quota. Like SlidingLog, it reuses log's backing array.
func ChargeSlidingLog(log []Entry, now, cost int64, p Params) ([]Entry, Decision) {
	log = dropThrough(log, now-p.Window)
	if n := min(cost, 2*p.Quota-sum(log)); n > 0 {
		log = insert(log, Entry{At: now, N: n})
	}
	return SlidingLog(log, now, 0, p)
}

// RefundSlidingLog drops the expired entries of log and takes up to cost
// units out of the newest entries (an entry left with no units is removed).
// Like SlidingLog, it reuses log's backing array.
func RefundSlidingLog(log []Entry, now, cost int64, p Params) ([]Entry, Decision) {
	log = dropThrough(log, now-p.Window)
	for cost > 0 && len(log) > 0 {
		e := &log[len(log)-1]
		k := min(cost, e.N)
		e.N -= k
		cost -= k
		if e.N == 0 {
			log = log[:len(log)-1]
		}
	}
	return SlidingLog(log, now, 0, p)
}
