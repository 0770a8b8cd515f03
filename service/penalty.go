package service

import (
	"time"

	"github.com/sluice-rl/sluice"
)

// A rule's penalty (rules.Rule.Penalty) lives in the store, beside the
// rule's counter, so it holds on every instance sharing the store: the key
// of the counter plus penaltySuffix, a GCRA of one microsecond per unit
// whose capacity is the penalty (penaltyLimit).
//
// Every check of the rule adds a Take of cost 1 on the penalty key to its
// batch. A fresh penalty key admits it (using one microsecond of a
// capacity of the whole penalty, given back at once), so it costs nothing
// but the op. When the rule's own limit denies, the engine charges the
// penalty key, reset first, twice its capacity less one unit (a Charge is
// capped at twice): its TAT is then now + 2 × penalty − 1µs, and the Take of cost 1
// (one more microsecond) is denied while it would end past now + penalty,
// that is for exactly the penalty. A denied batch
// charges nothing, so a key in the penalty box neither uses its quota nor
// lengthens its penalty; it is let in again once the penalty has passed.
const penaltySuffix = "|penalty"

// penaltyLimit is the limit of a penalty key for a penalty of d.
func penaltyLimit(d time.Duration) sluice.Limit {
	us := d.Microseconds()
	return sluice.Limit{Algorithm: sluice.GCRA, Quota: us, Window: d, Burst: us}
}

// penalize turns the status of every plan whose penalty look was denied
// into a denial with reason penalty, retrying when the penalty ends.
func penalize(sc *scratch) {
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.pen == 0 || p.dropped {
			continue
		}
		if pr := sc.results[p.pen-1]; !pr.Allowed {
			r := &sc.results[p.op]
			*r = sluice.Result{Reason: ReasonPenalty, Limit: r.Limit, RetryAfter: pr.RetryAfter,
				ResetAfter: max(r.ResetAfter, pr.RetryAfter)}
		}
	}
}
