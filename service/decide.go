package service

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice"
)

// decide takes the ops from the store, or applies the failure policy, and
// fills the statuses of the planned descriptors. It returns an error only
// when ctx ended before the store answered.
func (e *Engine) decide(ctx context.Context, sc *scratch, resp *Response) error {
	sc.results = growResults(sc.results, len(sc.ops))
	err := e.take(ctx, sc.ops, sc.results)
	if err == nil {
		penalize(sc)
	}
	for pass := 0; err == nil && pass < 2; pass++ {
		// Only shadow limits denied? Then take again with them as looks.
		enforcedDenied, shadowDenied := false, false
		for i := range sc.plans {
			p := &sc.plans[i]
			if p.op < 0 || p.dropped || sc.results[p.op].Allowed {
				continue
			}
			if p.shadow {
				shadowDenied = true
			} else {
				enforcedDenied = true
			}
		}
		if enforcedDenied || !shadowDenied {
			break
		}
		for i := range sc.plans {
			p := &sc.plans[i]
			if p.op >= 0 && !p.dropped && p.shadow && !sc.results[p.op].Allowed {
				p.shadowHit, p.shadowRes = true, sc.results[p.op]
				sc.ops[p.op].Cost = 0
			}
		}
		err = e.take(ctx, sc.ops, sc.results)
		if err == nil {
			penalize(sc)
		}
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			e.m.Abandoned()
			return fmt.Errorf("service: caller gave up before the store answered: %w", cerr)
		}
		e.fail(ctx, sc, resp, err)
		return nil
	}
	charged := allAllowed(sc.results)
	if !charged {
		e.startPenalties(ctx, sc)
	}
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		r := sc.results[p.op]
		if p.shadowHit {
			r = p.shadowRes
		}
		st := &resp.Statuses[p.desc]
		st.Result = r
		if !r.Allowed {
			st.Code = CodeOverLimit
		}
		holdLease(st, charged && !p.shadowHit, &sc.ops[p.op])
	}
	return nil
}

// allAllowed reports whether a batch was charged: a store charges a batch
// only when it admits every op.
func allAllowed(results []sluice.Result) bool {
	for i := range results {
		if !results[i].Allowed {
			return false
		}
	}
	return true
}

// holdLease records in st the lease its result names, with what Release
// needs to give it back, if the batch was charged; otherwise it clears any
// lease the result names (an uncharged acquire holds nothing).
func holdLease(st *Status, charged bool, op *sluice.Op) {
	if !charged || st.Result.Lease == 0 || st.Rule == nil || op.Limit.Algorithm != sluice.Concurrency || op.Cost == 0 {
		st.Result.Lease = 0
		return
	}
	st.Lease, st.key = st.Result.Lease, op.Key
}

func growResults(r []sluice.Result, n int) []sluice.Result {
	if cap(r) < n {
		return make([]sluice.Result, n)
	}
	r = r[:n]
	clear(r)
	return r
}

// take calls the store.
func (e *Engine) take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	return e.store.Take(ctx, ops, results)
}
