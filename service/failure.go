package service

import (
	"context"
	"errors"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Degraded says how a status was decided when the store failed. It is a
// string so it reads as itself in JSON and logs.
type Degraded string

// The ways a failure policy decides.
const (
	// NotDegraded: the store answered.
	NotDegraded Degraded = ""
	// FailedOpen: the store failed and the limit's failure mode allowed.
	FailedOpen Degraded = OutcomeFailedOpen
	// FailedClosed: the store failed and the limit's failure mode denied.
	FailedClosed Degraded = OutcomeFailedClosed
	// Local: the store failed and the in-process fallback store decided, at
	// the limit divided by Config.ExpectedReplicas. A lease it granted is
	// held there, not in the store.
	Local Degraded = "local"
)

// leaseStore returns where a lease of limit l granted under d is held, and
// under which limit: the fallback store at the scaled limit for Local (nil
// when there is no fallback store), else the store at l.
func (e *Engine) leaseStore(d Degraded, l sluice.Limit) (sluice.Store, sluice.Limit) {
	if d == Local {
		return e.cfg.Fallback, scaleLimit(l, e.cfg.ExpectedReplicas)
	}
	return e.store, l
}

// fail applies each limit's failure mode after the store failed with err.
func (e *Engine) fail(ctx context.Context, sc *scratch, resp *Response, err error) {
	reason := "error"
	switch {
	case errors.Is(err, sluice.ErrStoreUnavailable):
		reason = "breaker_open"
	case errors.Is(err, sluice.ErrStoreTimeout):
		reason = "timeout"
	}
	e.m.StoreError(reason)
	e.logFailure(reason, err)

	// Closed limits deny first; if one does, the request is denied, so the
	// local fallback only looks and charges nothing.
	closedDenies := false
	for i := range sc.plans {
		p := &sc.plans[i]
		p.shadowHit = false
		if p.op < 0 || p.dropped {
			continue
		}
		st := &resp.Statuses[p.desc]
		st.Result = sluice.Result{}
		mode := p.mode
		if mode == rules.FailureLocal && e.cfg.Fallback == nil {
			mode = rules.FailureOpen
		}
		switch mode {
		case rules.FailureClosed:
			st.Degraded = FailedClosed
			st.Code = CodeOverLimit
			if !p.shadow {
				closedDenies = true
			}
		case rules.FailureLocal:
			st.Degraded = Local
			op := sluice.Op{Key: sc.ops[p.op].Key, Limit: p.local, Cost: sc.ops[p.op].Cost, Action: sc.ops[p.op].Action}
			if p.probing {
				op.Cost = 0 // a look: the fallback has no probe refund
			}
			sc.local = append(sc.local, op)
		default:
			st.Degraded = FailedOpen
			st.Code = CodeOK
		}
	}
	if len(sc.local) == 0 {
		return
	}
	if closedDenies {
		for i := range sc.local {
			sc.local[i].Cost = 0
		}
	}
	sc.lres = growResults(sc.lres, len(sc.local))
	lerr := e.cfg.Fallback.Take(ctx, sc.local, sc.lres)
	localCharged := lerr == nil && allAllowed(sc.lres)
	j := 0
	for i := range sc.plans {
		p := &sc.plans[i]
		st := &resp.Statuses[p.desc]
		if p.op < 0 || p.dropped || st.Degraded != Local {
			continue
		}
		if lerr != nil {
			// The in-process store cannot normally fail; if it does, allow.
			st.Degraded, st.Code = FailedOpen, CodeOK
		} else {
			st.Result = sc.lres[j]
			if !st.Result.Allowed {
				st.Code = CodeOverLimit
			}
			holdLease(st, localCharged, &sc.local[j])
		}
		j++
	}
	if lerr != nil {
		e.logger.Error("local fallback store failed; allowing", "err", lerr)
	}
}

// logFailure logs store failures, at most one line a second.
func (e *Engine) logFailure(reason string, err error) {
	now := time.Now().UnixNano()
	last := e.lastLog.Load()
	if now-last < int64(time.Second) || !e.lastLog.CompareAndSwap(last, now) {
		e.suppressed.Add(1)
		return
	}
	e.logger.Warn("store failed; applying failure policy", "reason", reason, "err", err,
		"suppressed", e.suppressed.Swap(0))
}
