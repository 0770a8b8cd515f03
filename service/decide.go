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
	split := mixed(sc.ops)
	takeAll := func() error {
		var err error
		if split {
			err = e.takeSplit(ctx, sc, sluice.Take, false)
		} else {
			err = e.take(ctx, sc.ops, sc.results)
		}
		if err == nil {
			penalize(sc)
		}
		return err
	}
	err := takeAll()
	for pass := 0; err == nil && pass < 2; pass++ {
		// Only shadow limits, or some but not all quota-mode limits,
		// denied? Then the request is admitted: take again with those
		// limits as looks, so the others are charged.
		enforcedDenied, softDenied := false, false
		quotaTotal, quotaDenied := e.noLimitQuota(resp), 0
		for i := range sc.plans {
			p := &sc.plans[i]
			if p.op < 0 || p.dropped {
				continue
			}
			fresh := !sc.results[p.op].Allowed // not yet retried as a look
			switch {
			case p.shadow:
				softDenied = softDenied || fresh
			case p.quota:
				quotaTotal++
				if fresh || p.shadowHit {
					quotaDenied++
				}
				softDenied = softDenied || fresh
			case fresh:
				enforcedDenied = true
			}
		}
		if enforcedDenied || !softDenied || (quotaTotal > 0 && quotaDenied == quotaTotal) {
			break
		}
		for i := range sc.plans {
			p := &sc.plans[i]
			if p.op >= 0 && !p.dropped && (p.shadow || p.quota) && !sc.results[p.op].Allowed {
				p.shadowHit, p.shadowRes = true, sc.results[p.op]
				sc.ops[p.op].Cost = 0
				if p.probing {
					sc.ops[p.probe].Cost = 0
				}
			}
		}
		err = takeAll()
	}
	switch {
	case err != nil:
	case split:
		// The takes are decided; now the charges, refunds and probes'
		// refunds (of nothing, when the takes were denied).
		if serr := e.takeSplit(ctx, sc, sluice.Charge, !allAllowed(sc.results)); serr != nil {
			e.m.StoreError("error")
			e.logFailure("error", fmt.Errorf("settling the charges and refunds of a request: %w", serr))
		}
	case !allAllowed(sc.results):
		e.settleAlone(ctx, sc)
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
		if p.probing && r.Allowed && charged {
			r = sc.results[p.probe] // the state after the probe's refund
		}
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

// mixed reports whether a batch mixes charges or refunds with Takes of
// other keys (a probe's Take and Refund share a key). A store cannot always
// keep such a batch all-or-nothing (store/redis refuses one that spans
// Cluster slots), so decide sends its Takes first and the rest after.
func mixed(ops []sluice.Op) bool {
	for i := range ops {
		if ops[i].Action == sluice.Take {
			continue
		}
		for j := range ops {
			if ops[j].Action == sluice.Take && ops[j].Cost > 0 && ops[j].Key != ops[i].Key {
				return true
			}
		}
	}
	return false
}

// takeSplit sends one part of a mixed batch: its Takes (kind Take), or its
// other ops (any other kind), the probes' refunds then with cost 0 when
// takesDenied (their Takes charged nothing). Results land in sc.results.
func (e *Engine) takeSplit(ctx context.Context, sc *scratch, kind sluice.Action, takesDenied bool) error {
	var ops []sluice.Op
	var at []int
	for i := range sc.ops {
		if kind == sluice.Take && sc.ops[i].Action != sluice.Take {
			sc.results[i] = sluice.Result{Allowed: true} // sent later; never denied
		}
		if (sc.ops[i].Action == sluice.Take) == (kind == sluice.Take) {
			op := sc.ops[i]
			if takesDenied && op.Action == sluice.Refund && sc.isProbe(i) {
				op.Cost = 0
			}
			ops, at = append(ops, op), append(at, i)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	res := make([]sluice.Result, len(ops))
	if err := e.take(ctx, ops, res); err != nil {
		return err
	}
	for j, i := range at {
		sc.results[i] = res[j]
	}
	return nil
}

// isProbe reports whether op i is a probe's refund.
func (sc *scratch) isProbe(i int) bool {
	for k := range sc.plans {
		if p := &sc.plans[k]; p.probing && p.op >= 0 && p.probe == i {
			return true
		}
	}
	return false
}

// settleAlone applies, on their own, the charges and refunds of a batch
// that was denied (so applied none of them): costs already spent (a
// settle-after rule's) and units given back (a refund) are not decisions a
// denial can undo. A store failure here is counted and logged; the
// statuses keep the state the denied batch reported.
func (e *Engine) settleAlone(ctx context.Context, sc *scratch) {
	var ops []sluice.Op
	var at []int
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		if op := sc.ops[p.op]; op.Action == sluice.Charge || op.Action == sluice.Refund {
			ops, at = append(ops, op), append(at, p.op)
		}
	}
	if len(ops) == 0 {
		return
	}
	res := make([]sluice.Result, len(ops))
	if err := e.take(ctx, ops, res); err != nil {
		e.m.StoreError("error")
		e.logFailure("error", fmt.Errorf("settling charges of a denied request: %w", err))
		return
	}
	for j, i := range at {
		sc.results[i] = res[j]
	}
}

// noLimitQuota is how many of resp's descriptors count as quota mode though
// no limit applies to them: with Config.QuotaMode, every descriptor that is
// not unlimited is in quota mode, as envoyproxy/ratelimit counts them, and
// one without a limit is never over, so such a request is never denied for
// its quota-mode limits.
func (e *Engine) noLimitQuota(resp *Response) int {
	if !e.cfg.QuotaMode {
		return 0
	}
	n := 0
	for i := range resp.Statuses {
		if st := &resp.Statuses[i]; st.CurrentLimit == nil && !st.Unlimited {
			n++
		}
	}
	return n
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
