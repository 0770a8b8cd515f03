package service

import (
	"context"
	"fmt"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/batch"
)

// decide takes the ops from the store in one call (batch.Decider: the
// roles of shadow and quota limits, charges and refunds, probes and
// penalties go with them), or applies the failure policy, and fills the
// statuses of the planned descriptors. It returns an error only when ctx
// ended before the store answered.
func (e *Engine) decide(ctx context.Context, sc *scratch, resp *Response) error {
	n := len(sc.ops)
	sc.results = growResults(sc.results, n)
	sc.roles = growTo(sc.roles, n)
	sc.of = growTo(sc.of, n)
	sc.shadowed = growTo(sc.shadowed, n)
	quotaRole := batch.Quota
	if e.noLimitQuota(resp) > 0 {
		// A descriptor without a limit counts as a quota-mode limit never
		// over, so no request is denied for its quota-mode limits: they
		// are shadow limits.
		quotaRole = batch.Shadow
	}
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		switch a := sc.ops[p.op].Action; {
		case a == sluice.Charge || a == sluice.Refund:
			sc.roles[p.op] = batch.Settle
		case p.shadow:
			sc.roles[p.op] = batch.Shadow
		case p.quota:
			sc.roles[p.op] = quotaRole
		}
		if p.probing {
			sc.roles[p.probe], sc.of[p.probe] = batch.Probe, p.op
		}
		if p.pen > 0 {
			sc.roles[p.pen-1], sc.of[p.pen-1] = batch.Penalty, p.op
		}
	}
	b := &sc.batch
	// A choice's try (sc.skip set) that is denied may be followed by
	// another: its reservations are voided once choose gives up.
	*b = batch.Batch{Ops: sc.ops, Results: sc.results, Roles: sc.roles, Of: sc.of, Shadowed: sc.shadowed, Retry: sc.skip != nil}
	err := e.dec.Decide(ctx, b)
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			e.m.Abandoned()
			return fmt.Errorf("service: caller gave up before the store answered: %w", cerr)
		}
		e.fail(ctx, sc, resp, err)
		return nil
	}
	if b.SettleErr != nil {
		e.m.StoreError("error")
		e.logFailure("error", b.SettleErr)
	}
	if b.PenaltyErr != nil {
		e.logger.Warn("penalty not recorded: store error", "err", b.PenaltyErr)
	}
	penalize(sc)
	charged := b.Charged
	for i := range sc.plans {
		p := &sc.plans[i]
		if p.op < 0 || p.dropped {
			continue
		}
		p.shadowHit = b.Shadowed[p.op]
		r := sc.results[p.op]
		resp.DecidedAt = max(resp.DecidedAt, r.At)
		if p.probing && r.Allowed && charged {
			r = sc.results[p.probe] // the state after the probe's refund
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

// growTo returns s with length n, cleared.
func growTo[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
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
