package compose

import (
	"time"

	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Placed is a sluice.Store that routes each op to the store of its
// counter's placement, by the first byte of its key: stack.KeyHybrid to
// Hybrid, stack.KeyLocal to Local, anything else to Global. A nil Hybrid
// or Local means Global. Global must not be nil.
//
// A batch within one placement is passed through whole (all-or-nothing as
// that store makes it). A batch spanning placements stays all-or-nothing
// too: it is decided store by store (local, then hybrid, then global), and
// once one denies, what the stores before it charged is given back (a
// Refund of each Take's cost, a release of each lease acquired, a Refund of
// each Charge) and the stores after it are only looked at (cost 0;
// releases still apply). Charges, refunds and resets of a placement whose
// ops cannot deny are applied only once every Take was admitted. While a
// denied batch is being undone, other requests may see its charge and be
// denied: across placements the batch can deny too much for that moment,
// never admit too much. An undo that fails (the store is down) leaves the
// charge; Stats counts it.
//
// When a store fails, the stores before it keep their charges unless the
// op asked for sluice.Op.UndoIfUnknown (the caller treats the failure as
// not admitted): those are given back, and Take returns the error. A store
// that fails after another denied (when it is only looked at) changes
// nothing: the batch is denied, and the failed ops report allowed with
// Remaining 0 (their state is unknown). A batch in which two or more
// placements hold both a Take and a Refund or Reset cannot be undone
// exactly (a refund or reset is not reversible) and is refused with an
// error; the service never sends one.
//
// Placed is safe for concurrent use; its fields must not change after the
// first call.
type Placed struct {
	Global, Hybrid, Local sluice.Store
	// GlobalWindows sends fixed_window ops of keys placed hybrid to Global:
	// set when Global counts fixed windows natively
	// (redis.Options.NativeFixedWindow), in keys that the allotments, kept
	// by the allot script in the script's own key, never see — hybrid
	// leases would grant the quota a second time.
	GlobalWindows bool

	undone, undoFailed atomic.Uint64
}

// PlacedStats are counters of a Placed store.
type PlacedStats struct {
	// Undone counts ops given back because another placement denied their
	// batch (or failed, for ops with UndoIfUnknown).
	Undone uint64
	// UndoFailed counts such ops whose give-back failed: their charge
	// stayed.
	UndoFailed uint64
}

// Stats returns the store's counters.
func (p *Placed) Stats() PlacedStats {
	return PlacedStats{Undone: p.undone.Load(), UndoFailed: p.undoFailed.Load()}
}

// placement indexes, in the order a batch is decided.
const (
	placeLocal = iota
	placeHybrid
	placeGlobal
	numPlaces
)

// storeOf is where an op of key and algorithm alg is decided; paired
// says it is a reservation (stack.Paired), which a hybrid placement sends
// to the global store: its record must be where every instance sees it.
func (p *Placed) storeOf(key string, alg sluice.Algorithm, paired bool) (int, sluice.Store) {
	if key != "" {
		switch key[0] {
		case stack.KeyLocal:
			if p.Local != nil {
				return placeLocal, p.Local
			}
		case stack.KeyHybrid:
			if p.Hybrid != nil && !paired && !(p.GlobalWindows && alg == sluice.FixedWindow) {
				return placeHybrid, p.Hybrid
			}
		}
	}
	return placeGlobal, p.Global
}

// group is the ops of one batch that go to one store.
type group struct {
	st  sluice.Store
	idx []int // into the batch
	// decides: some op is a Take of cost > 0 (the group can deny).
	// final: some op is a Refund or Reset (the group cannot be undone).
	decides, final bool
	applied        bool
}

// ErrMixedFinal: a batch across placements holds Takes and Refunds or
// Resets in more than one placement, so it cannot be all-or-nothing.
var ErrMixedFinal = errors.New("compose: takes with refunds or resets in more than one placement of one batch")

// Take implements sluice.Store.
func (p *Placed) Take(ctx context.Context, ops []sluice.Op, results []sluice.Result) error {
	if len(results) != len(ops) {
		return fmt.Errorf("compose: %d ops, %d results: %w", len(ops), len(results), stack.ErrResultsLength)
	}
	if len(ops) == 0 {
		return nil
	}
	first, st := p.storeOf(ops[0].Key, ops[0].Limit.Algorithm, stack.Paired(&ops[0]))
	same := true
	for i := 1; i < len(ops) && same; i++ {
		k, _ := p.storeOf(ops[i].Key, ops[i].Limit.Algorithm, stack.Paired(&ops[i]))
		same = k == first
	}
	if same {
		return st.Take(ctx, ops, results)
	}
	var groups [numPlaces]group
	for i := range ops {
		op := &ops[i]
		paired := stack.Paired(op)
		k, st := p.storeOf(op.Key, op.Limit.Algorithm, paired)
		paired = paired && !op.Release // a void can neither deny nor be undone
		g := &groups[k]
		g.st, g.idx = st, append(g.idx, i)
		// A reservation can deny and cannot be undone by a refund (its
		// record would say reserved).
		g.decides = g.decides || (op.Action == sluice.Take && !op.Release && op.Cost > 0) || paired
		g.final = g.final || op.Action == sluice.Refund || op.Action == sluice.Reset || paired
	}
	// The order: groups that can deny and be undone, then the one that can
	// deny and cannot be undone, then those that cannot deny.
	var order []*group
	var last *group
	for k := range groups {
		g := &groups[k]
		switch {
		case len(g.idx) == 0 || !g.decides:
		case g.final && last != nil:
			return fmt.Errorf("%w", ErrMixedFinal)
		case g.final:
			last = g
		default:
			order = append(order, g)
		}
	}
	if last != nil {
		order = append(order, last)
	}
	for k := range groups {
		if g := &groups[k]; len(g.idx) > 0 && !g.decides {
			order = append(order, g)
		}
	}
	denied := false
	for _, g := range order {
		sub := make([]sluice.Op, len(g.idx))
		for j, i := range g.idx {
			sub[j] = ops[i]
			if denied && !sub[j].Release {
				if stack.Paired(&sub[j]) {
					sub[j].Lease = 0 // a look, not a reservation
				}
				sub[j].Cost, sub[j].Action, sub[j].UndoIfUnknown = 0, sluice.Take, false // a look: the batch is refused
			}
		}
		res := make([]sluice.Result, len(sub))
		if err := g.st.Take(ctx, sub, res); err != nil {
			if !denied {
				p.undo(ctx, ops, results, order, true)
				return err
			}
			// Only a look failed: the batch is denied all the same, and
			// these ops' state is unknown (reported as nothing left).
			for j, i := range g.idx {
				results[i] = sluice.Result{Allowed: true, Limit: stack.Capacity(sub[j].Limit)}
			}
			continue
		}
		g.applied = !denied
		for j, i := range g.idx {
			results[i] = res[j]
		}
		if !denied {
			for _, r := range res {
				if !r.Allowed {
					denied = true
					g.applied = false // a denied group charged nothing
					p.undo(ctx, ops, results, order, false)
					break
				}
			}
		}
	}
	return nil
}

// undo gives back what the applied groups charged (only the ops with
// UndoIfUnknown when onlyMarked), and reports their state after it in
// results (still allowed: the batch was refused, not they).
func (p *Placed) undo(ctx context.Context, ops []sluice.Op, results []sluice.Result, order []*group, onlyMarked bool) {
	ctx = context.WithoutCancel(ctx) // a give-back must not be lost to the caller's cancellation
	for _, g := range order {
		if !g.applied {
			continue
		}
		g.applied = false
		var back []sluice.Op
		var at []int
		for _, i := range g.idx {
			op := ops[i]
			if onlyMarked && !op.UndoIfUnknown {
				continue
			}
			u := sluice.Op{Key: op.Key, Limit: op.Limit, Script: op.Script}
			switch {
			case op.Release || op.Cost == 0 || (op.Action != sluice.Take && op.Action != sluice.Charge) || stack.Paired(&op):
				// (A reservation is never undone here: a refund would leave
				// its record saying reserved. Its group is decided last.)
				continue
			case op.Limit.Algorithm == sluice.Concurrency:
				if results[i].Lease == 0 {
					continue
				}
				u.Release, u.Lease = true, results[i].Lease
			default:
				u.Action, u.Cost = sluice.Refund, op.Cost
			}
			back, at = append(back, u), append(at, i)
		}
		if len(back) == 0 {
			continue
		}
		res := make([]sluice.Result, len(back))
		if err := g.st.Take(ctx, back, res); err != nil {
			p.undoFailed.Add(uint64(len(back)))
			continue
		}
		p.undone.Add(uint64(len(back)))
		for j, i := range at {
			r := res[j]
			r.Allowed, r.Reason, r.RetryAfter, r.Delay, r.Lease = true, sluice.ReasonAllowed, 0, 0, 0
			results[i] = r
		}
	}
}

// Keys implements stack.KeyLister: a prefix that starts with a placement
// byte is listed in that placement's store, any other in the global store
// (an empty prefix in each distinct store, each key once, up to max in
// all). It returns an error wrapping stack.ErrNoKeyLister when that store
// cannot list its keys, and an error when max < 1.
func (p *Placed) Keys(ctx context.Context, prefix string, max int) ([]string, bool, error) {
	if max < 1 {
		return nil, false, fmt.Errorf("compose: keys: max %d, want ≥ 1", max)
	}
	var stores []sluice.Store
	if prefix != "" {
		_, st := p.storeOf(prefix, 0, false) // (a hybrid store lists the global store's keys)
		stores = []sluice.Store{st}
	} else {
		for _, st := range []sluice.Store{p.Local, p.Hybrid, p.Global} {
			if st != nil && !slices.Contains(stores, st) {
				stores = append(stores, st)
			}
		}
	}
	var out []string
	seen := map[string]bool{}
	more := false
	for _, st := range stores {
		kl, ok := st.(stack.KeyLister)
		if !ok {
			return nil, false, fmt.Errorf("compose: placed store %T: %w", st, stack.ErrNoKeyLister)
		}
		if len(out) >= max {
			return out, true, nil
		}
		keys, m, err := kl.Keys(ctx, prefix, max-len(out))
		if err != nil {
			return nil, false, err
		}
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
		more = more || m
	}
	return out, more, nil
}

// Health implements stack.HealthReporter with the global store's nodes
// (nil when the global store reports none).
func (p *Placed) Health() []stack.NodeHealth {
	if hr, ok := p.Global.(stack.HealthReporter); ok {
		return hr.Health()
	}
	return nil
}

// Invalidations implements stack.Invalidator with the global store's
// (the one the fleet shares). It returns an error wrapping ErrNoInvalidator
// when the global store has none.
func (p *Placed) Invalidations(ctx context.Context, fn func(keys []string, all bool)) error {
	return invalidations(p.Global, ctx, fn)
}

// Resets implements stack.ResetAnnouncer with the global store's. It
// returns an error wrapping ErrNoInvalidator when the global store has none.
func (p *Placed) Resets(ctx context.Context, fn func(keys []string, all bool)) error {
	return resets(p.Global, ctx, fn)
}

// ErrNoInvalidator: the store under a layer that forwards
// stack.Invalidator or stack.ResetAnnouncer has none (a single-process
// store needs none).
var ErrNoInvalidator = errors.New("compose: the store announces no invalidations")

// invalidations forwards to st's Invalidator, or fails with
// ErrNoInvalidator.
func invalidations(st sluice.Store, ctx context.Context, fn func(keys []string, all bool)) error {
	inv, ok := st.(stack.Invalidator)
	if !ok {
		return fmt.Errorf("compose: %T: %w", st, ErrNoInvalidator)
	}
	return inv.Invalidations(ctx, fn)
}

// resets forwards to st's ResetAnnouncer, or fails with ErrNoInvalidator.
func resets(st sluice.Store, ctx context.Context, fn func(keys []string, all bool)) error {
	ra, ok := st.(stack.ResetAnnouncer)
	if !ok {
		return fmt.Errorf("compose: %T: %w", st, ErrNoInvalidator)
	}
	return ra.Resets(ctx, fn)
}

// Claim implements stack.Claimer: a key placed local (stack.KeyLocal) is
// claimed in the local store, whose counter is this process's alone; any
// other, hybrid included, in the global store the fleet shares. It
// returns an error wrapping stack.ErrNoClaimer when that store cannot
// claim.
func (p *Placed) Claim(ctx context.Context, key string, ttl time.Duration) (bool, error) {
	st := p.Global
	if key != "" && key[0] == stack.KeyLocal && p.Local != nil {
		st = p.Local
	}
	return claim(st, ctx, key, ttl)
}

// claim forwards to st's Claimer, or fails with stack.ErrNoClaimer.
func claim(st any, ctx context.Context, key string, ttl time.Duration) (bool, error) {
	c, ok := st.(stack.Claimer)
	if !ok {
		return false, fmt.Errorf("compose: %T: %w", st, stack.ErrNoClaimer)
	}
	return c.Claim(ctx, key, ttl)
}
