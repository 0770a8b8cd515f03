package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Release gives back the concurrency leases that the statuses of resp hold
// (Status.Lease), in one call to the store (and one to the local fallback
// store for leases it granted). Call it once the work a Check admitted is
// done. A Response without leases costs nothing. Releasing a lease twice, or
// one that has expired, is harmless.
//
// Release returns an error when a store could not release; the leases are
// then freed when their limit's window passes. A store that keeps a circuit
// breaker fails it fast while the node is known to be down.
func (e *Engine) Release(ctx context.Context, resp Response) error {
	var ops, local []sluice.Op
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		if st.Lease == 0 || st.key == "" || st.Rule == nil {
			continue
		}
		// Where the check left the lease: st.Degraded says which store.
		store, limit := e.leaseStore(st.Degraded, st.Rule.Limit)
		op := sluice.Op{Key: st.key, Limit: limit, Release: true, Lease: st.Lease}
		if store == e.store {
			ops = append(ops, op)
		} else {
			local = append(local, op)
		}
	}
	return e.release(ctx, ops, local)
}

// ReleaseLeases is Release for a caller that kept the request and the leases
// instead of the Response, such as a client of the HTTP API: leases[i] is the
// lease (Status.Lease) the check of req gave req.Descriptors[i], zero for
// none; for a rule with rules.Rule.PairBy the lease is the slot its
// descriptor's request ID names, whatever leases[i] says. The store keys
// are rebuilt from req under the rules in force now; a
// lease whose descriptor no longer matches a concurrency rule (a reload
// changed it) is left to expire. For a rule with failure mode local, the
// lease is also released in the local fallback store, where it may have been
// granted (releasing a lease a store does not hold does nothing).
//
// ReleaseLeases returns an error wrapping ErrInvalidRequest when req is
// invalid or len(leases) differs from len(req.Descriptors), and an error
// when a store could not release.
func (e *Engine) ReleaseLeases(ctx context.Context, req Request, leases []uint64) error {
	if err := validate(&req, e.cfg.RequestBounds, nil); err != nil {
		return err
	}
	if len(leases) != len(req.Descriptors) {
		return fmt.Errorf("service: %w: %d leases for %d descriptors", ErrInvalidRequest, len(leases), len(req.Descriptors))
	}
	pol := e.policy()
	var ops, local []sluice.Op
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		if d.Limit != nil { // an override is never a concurrency limit
			continue
		}
		r := pol.snap.Match(req.Domain, d.Entries)
		if r == nil || r.Unlimited || r.Limit.Algorithm != sluice.Concurrency {
			continue
		}
		lease := leases[i]
		if r.PairBy != "" {
			// A paired slot is named by its request ID, whatever was sent.
			lease = pairLease(d.Entries[r.PairIndex].Value)
		}
		if lease == 0 {
			continue
		}
		info := pol.rules[r]
		key := string(info.appendKey(nil, d.Entries, 0, nil))
		ops = append(ops, sluice.Op{Key: key, Limit: r.Limit, Release: true, Lease: lease})
		if info.mode == rules.FailureLocal {
			// The check may have been decided by the fallback store: without
			// the Response, release there too (a store not holding the lease
			// does nothing).
			_, limit := e.leaseStore(Local, r.Limit)
			local = append(local, sluice.Op{Key: key, Limit: limit, Release: true, Lease: lease})
		}
	}
	return e.release(ctx, ops, local)
}

// release gives back leases: ops in the store, local in the fallback store.
func (e *Engine) release(ctx context.Context, ops, local []sluice.Op) error {
	var errs []error
	if len(ops) > 0 {
		if err := e.take(ctx, ops, make([]sluice.Result, len(ops))); err != nil {
			errs = append(errs, fmt.Errorf("service: release: %w", err))
		}
	}
	if len(local) > 0 && e.cfg.Fallback != nil {
		if err := e.cfg.Fallback.Take(ctx, local, make([]sluice.Result, len(local))); err != nil {
			errs = append(errs, fmt.Errorf("service: release from the local fallback: %w", err))
		}
	}
	return errors.Join(errs...)
}
