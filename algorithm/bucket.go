package algorithm

// The three bucket algorithms share one piece of arithmetic. Each keeps, in
// effect, a theoretical arrival time (TAT): the instant at which the bucket
// would be full again. A cost c fits iff max(TAT, now) + c·Interval − now ≤
// Burst·Interval. gcra and leaky_bucket store the TAT itself; token_bucket
// stores (missing tokens, last refill), from which TAT = Last + Missing·Interval,
// so all three make identical admission decisions for the same parameters.

// bucketDecide decides cost at now given the current TAT and returns the TAT
// to store if the caller commits. base is max(tat, now).
func bucketDecide(tat, now, cost int64, p Params) (newTAT int64, d Decision) {
	cap := p.Burst * p.Interval
	base := max(tat, now)
	d.Limit = p.Burst
	if cost == 0 || cost > p.Burst {
		d.Remaining = bucketRemaining(base, now, p)
		d.ResetAfter = base - now
		if cost > p.Burst {
			d.Reason = CostTooHigh
		}
		return tat, d
	}
	newTAT = base + cost*p.Interval
	if over := newTAT - now - cap; over > 0 {
		d.Reason = Limited
		d.Remaining = bucketRemaining(base, now, p)
		d.ResetAfter = base - now
		d.RetryAfter = over
		return tat, d
	}
	d.Remaining = bucketRemaining(newTAT, now, p)
	d.ResetAfter = newTAT - now
	return newTAT, d
}

// bucketRemaining is the number of whole units that would fit now.
func bucketRemaining(tat, now int64, p Params) int64 {
	if p.Interval == 0 {
		return 0
	}
	r := FloorDiv(p.Burst*p.Interval-(tat-now), p.Interval)
	return min(max(r, 0), p.Burst)
}

// GCRA is the generic cell rate algorithm (leaky bucket as a meter). The
// state is the TAT in microseconds; zero is a fresh key.
func GCRA(tat, now, cost int64, p Params) (int64, Decision) {
	return bucketDecide(tat, now, cost, p)
}

// LeakyBucket is the leaky bucket as a queue: it admits a cost as long as the
// queue (Burst × Interval of work) has room, and tells the caller how long to
// wait before proceeding (Delay), so that admitted work leaves at exactly one
// unit per Interval. Its state is a TAT, as for GCRA; zero is a fresh key.
func LeakyBucket(tat, now, cost int64, p Params) (int64, Decision) {
	newTAT, d := bucketDecide(tat, now, cost, p)
	if d.Reason == Allowed && cost > 0 {
		d.Delay = max(tat, now) - now
	}
	return newTAT, d
}

// TokenState is the state of a token bucket. The zero value is a full bucket.
type TokenState struct {
	// Missing is the number of tokens taken and not yet refilled.
	Missing int64
	// Last is the time (µs) up to which refill has been credited.
	Last int64
}

// TokenBucket refills one token per Interval up to Burst and admits a cost if
// that many tokens are in the bucket. It decides exactly as GCRA does with the
// same Params: the bucket is full at Last + Missing × Interval, which is the
// GCRA's TAT, so the refill since Last needs no separate step.
func TokenBucket(s TokenState, now, cost int64, p Params) (TokenState, Decision) {
	newTAT, d := bucketDecide(s.Last+s.Missing*p.Interval, now, cost, p)
	if d.Reason == Allowed && cost > 0 {
		// Store the canonical form: the tokens still missing at now, and
		// the instant up to which refill has been credited (within one
		// interval before now).
		s.Missing = CeilDiv(newTAT-now, p.Interval)
		s.Last = newTAT - s.Missing*p.Interval
	}
	return s, d
}
