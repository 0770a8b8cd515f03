// Package batch is the protocol of the engine's one store call per check:
// a request's ops with the role each plays in the decision (Batch), the
// interface of a store that decides a whole Batch in one call (Decider),
// and Run, the reference that decides a Batch over any sluice.Store.
//
// A plain sluice.Store batch is all-or-nothing: one denied Take denies
// every op. A check needs more than that: limits in shadow or quota mode
// that report a denial without denying the request, charges and refunds
// that stand whether or not the request is admitted, a settle-after look
// whose probe refund undoes its Take, and a penalty box that starts when
// its limit denies. Each is a Role; the store stack (store/compose,
// store/memory) decides them behind Decide, so the engine (package
// service) calls its store once per check. It lives outside store/ because
// the engine, which imports no store, speaks it.
package batch

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-rl/sluice"
)

// Role says what one op of a Batch is for. The zero value is Enforce.
type Role uint8

const (
	// Enforce: a Take that denies the batch when it is denied.
	Enforce Role = iota
	// Shadow: a Take that never denies the batch. When it is denied
	// while no Enforce op is, it is decided again as a look (its Cost set
	// to 0), Shadowed reports it and Results keeps its denial, and the
	// other ops are charged.
	Shadow
	// Quota: as Shadow, except when every Quota op of the batch is
	// denied: then they deny it, as Enforce ops do.
	Quota
	// Settle: a Charge or Refund that is applied whether or not the
	// batch is admitted (a cost already spent, units given back).
	Settle
	// Probe: the Refund that gives back, in the same batch, the Take of
	// op Of[i] (same key, same cost): applied only when that Take is
	// charged, at cost 0 otherwise.
	Probe
	// Penalty: the Take of cost 1 on the penalty key of op Of[i] (a GCRA
	// whose Burst is the penalty in µs): it denies as Enforce does. When
	// the batch is denied and op Of[i] was denied by its own limit
	// (sluice.ReasonLimited, not decided as a look) while this op was
	// admitted, the penalty starts: the key is reset and charged
	// 2 × Burst − 1, after the decision.
	Penalty
)

// Batch is one check's ops, their roles, and what deciding them found.
// Ops and Results are the caller's; Decide and Run set Results, Shadowed,
// Charged, SettleErr and PenaltyErr, and may set the Cost of Shadow,
// Quota and Probe ops to 0 (those decided as looks).
type Batch struct {
	Ops     []sluice.Op
	Results []sluice.Result // len(Ops)
	// Roles[i] is op i's role; nil means every op is Enforce.
	Roles []Role
	// Of[i], for a Probe or Penalty op, is the index of the op it
	// belongs to; nil when there are none.
	Of []int
	// Shadowed[i] reports that op i (Shadow or Quota) was denied and
	// decided as a look; Results[i] is its denial. len(Ops); the caller
	// provides it (its contents are overwritten).
	Shadowed []bool
	// Charged reports that the batch was admitted: every Take not
	// Shadowed was charged.
	Charged bool
	// SettleErr is the store's error applying Settle ops after the
	// decision (on their own, or after the Takes where the store splits
	// them), or voiding a denied batch's reservations; the decision
	// stands.
	SettleErr error
	// PenaltyErr is the store's error starting penalties; the decision
	// stands.
	PenaltyErr error
	// Retry says the caller may try the request again with other ops (an
	// alternative of a choice group, service/choice.go): a denial then
	// voids none of its reservations, since the next try takes them
	// again; the caller voids them with Void once it gives up.
	Retry bool
}

func (b *Batch) role(i int) Role {
	if b.Roles == nil {
		return Enforce
	}
	return b.Roles[i]
}

// Decider is a store that decides a whole Batch in one call, with every
// Role's meaning above. An error means the store could not decide the
// Takes (as sluice.Store.Take's error); then Results are unspecified.
// Implementations are safe for concurrent use.
type Decider interface {
	sluice.Store
	Decide(ctx context.Context, b *Batch) error
}

// ErrBatchShape: a Batch whose slices do not match its Ops.
var ErrBatchShape = errors.New("batch: Results, Roles, Of or Shadowed not of len(Ops)")

// Mode says how Run may call its store.
type Mode uint8

const (
	// Atomic: the store applies a batch mixing Takes with Charges and
	// Refunds of other keys all-or-nothing (store/memory).
	Atomic Mode = iota
	// Split: it may not (store/redis refuses such a batch across Cluster
	// slots), so Run sends the Takes first and the rest after.
	Split
)

// passes is how many times Run decides again, as looks, Shadow and Quota
// ops that were denied: a second time covers an op admitted in the first
// pass and denied in the next (traffic between the calls).
const passes = 2

// Run decides b with st's Take: the reference every Decider must agree
// with, and the implementation of store/memory's and store/compose's
// Decide. It calls st once for a batch whose Shadow and Quota ops are
// admitted and that is admitted or has no Settle op (a Split batch that
// mixes Takes with Charges or Refunds of other keys: twice), once more
// per pass that decides denied Shadow or Quota ops as looks (at most
// two), once to apply Settle ops of a denied batch, once to void its
// reservations (Void, unless b.Retry), and once to start penalties.
func Run(ctx context.Context, st sluice.Store, b *Batch, mode Mode) error {
	n := len(b.Ops)
	if len(b.Results) != n || len(b.Shadowed) != n || (b.Roles != nil && len(b.Roles) != n) || (b.Of != nil && len(b.Of) != n) {
		return ErrBatchShape
	}
	clear(b.Shadowed)
	clear(b.Results)
	b.Charged, b.SettleErr, b.PenaltyErr = false, nil, nil
	split := mode == Split && mixed(b.Ops)
	takeAll := func() error {
		if split {
			return takeSplit(ctx, st, b, true, false)
		}
		return st.Take(ctx, b.Ops, b.Results)
	}
	err := takeAll()
	for pass := 0; err == nil && pass < passes; pass++ {
		enforced, soft := false, false
		quotaTotal, quotaDenied := 0, 0
		for i := range b.Ops {
			if b.Ops[i].Action != sluice.Take {
				continue
			}
			fresh := !b.Results[i].Allowed && !b.Shadowed[i] // not yet decided as a look
			switch b.role(i) {
			case Shadow:
				soft = soft || fresh
			case Quota:
				quotaTotal++
				if fresh || b.Shadowed[i] {
					quotaDenied++
				}
				soft = soft || fresh
			default:
				enforced = enforced || fresh
			}
		}
		if enforced || !soft || (quotaTotal > 0 && quotaDenied == quotaTotal) {
			break
		}
		for i := range b.Ops {
			if r := b.role(i); (r == Shadow || r == Quota) && !b.Results[i].Allowed && !b.Shadowed[i] {
				b.Shadowed[i] = true
				b.Ops[i].Cost = 0
			}
		}
		for i := range b.Ops {
			if b.role(i) == Probe && b.Shadowed[b.Of[i]] {
				b.Ops[i].Cost = 0
			}
		}
		held := make([]sluice.Result, n) // the denials the looks replace
		copy(held, b.Results)
		err = takeAll()
		for i := range b.Ops {
			if b.Shadowed[i] {
				b.Results[i] = held[i]
			}
		}
	}
	if err != nil {
		return err
	}
	b.Charged = true
	for i := range b.Results {
		if !b.Results[i].Allowed && !b.Shadowed[i] {
			b.Charged = false
		}
	}
	switch {
	case split:
		// The Takes are decided; now the charges, refunds and probes'
		// refunds (of nothing, when the Takes were denied).
		if serr := takeSplit(ctx, st, b, false, !b.Charged); serr != nil {
			b.SettleErr = fmt.Errorf("batch: settling the charges and refunds of a request: %w", serr)
		}
	case !b.Charged:
		settleAlone(ctx, st, b)
	}
	if !b.Charged {
		if !b.Retry {
			Void(ctx, st, b)
		}
		startPenalties(ctx, st, b)
	}
	return nil
}

// Void voids, in one call, the reservations of a batch that
// was denied (sluice.Op.Lease on a Take of a limit other than Concurrency)
// that were not denied themselves: the batch undid them, leaving no
// record, and a void records them denied, so that the request's later
// calls with that lease (its settle at stream end) are looks, not new
// reservations. A settle the batch undid is left as it was (reserved):
// a void changes no record it finds. Run calls it for a denied batch
// unless b.Retry; a store's error joins b.SettleErr.
func Void(ctx context.Context, st sluice.Store, b *Batch) {
	var ops []sluice.Op
	for i := range b.Ops {
		op := &b.Ops[i]
		if op.Lease != 0 && op.Action == sluice.Take && !op.Release && op.Limit.Algorithm != sluice.Concurrency && b.Results[i].Allowed {
			ops = append(ops, sluice.Op{Key: op.Key, Limit: op.Limit, Lease: op.Lease, SettleWithin: op.SettleWithin, Release: true})
		}
	}
	if len(ops) == 0 {
		return
	}
	if err := st.Take(ctx, ops, make([]sluice.Result, len(ops))); err != nil {
		err = fmt.Errorf("batch: voiding the reservations of a denied request: %w", err)
		b.SettleErr = errors.Join(b.SettleErr, err)
	}
}

// mixed reports whether a batch mixes charges or refunds with Takes of
// other keys (a probe's Take and Refund share a key).
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

// takeSplit sends one part of a mixed batch: its Takes (takes), or its
// other ops, the probes' refunds then with cost 0 when takesDenied (their
// Takes charged nothing).
func takeSplit(ctx context.Context, st sluice.Store, b *Batch, takes, takesDenied bool) error {
	var ops []sluice.Op
	var at []int
	for i := range b.Ops {
		if takes && b.Ops[i].Action != sluice.Take {
			b.Results[i] = sluice.Result{Allowed: true} // sent later; never denied
		}
		if (b.Ops[i].Action == sluice.Take) == takes {
			op := b.Ops[i]
			if takesDenied && op.Action == sluice.Refund && b.role(i) == Probe {
				op.Cost = 0
			}
			ops, at = append(ops, op), append(at, i)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	res := make([]sluice.Result, len(ops))
	if err := st.Take(ctx, ops, res); err != nil {
		return err
	}
	for j, i := range at {
		b.Results[i] = res[j]
	}
	return nil
}

// settleAlone applies, on their own, the Settle ops of a batch that was
// denied (so applied none of them). On an error the results keep the
// state the denied batch reported.
func settleAlone(ctx context.Context, st sluice.Store, b *Batch) {
	var ops []sluice.Op
	var at []int
	for i := range b.Ops {
		if b.role(i) == Settle && (b.Ops[i].Action == sluice.Charge || b.Ops[i].Action == sluice.Refund) {
			ops, at = append(ops, b.Ops[i]), append(at, i)
		}
	}
	if len(ops) == 0 {
		return
	}
	res := make([]sluice.Result, len(ops))
	if err := st.Take(ctx, ops, res); err != nil {
		b.SettleErr = fmt.Errorf("batch: settling charges of a denied request: %w", err)
		return
	}
	for j, i := range at {
		b.Results[i] = res[j]
	}
}

// startPenalties starts the penalties of the ops denied by their own
// limit: one call, after the decision.
func startPenalties(ctx context.Context, st sluice.Store, b *Batch) {
	var ops []sluice.Op
	for i := range b.Ops {
		if b.role(i) != Penalty || !b.Results[i].Allowed {
			continue
		}
		of := b.Of[i]
		if r := b.Results[of]; !r.Allowed && r.Reason == sluice.ReasonLimited && !b.Shadowed[of] {
			pen := b.Ops[i]
			// From fresh, so the microseconds the key's looks hold do not
			// lengthen the penalty.
			ops = append(ops, sluice.Op{Key: pen.Key, Limit: pen.Limit, Action: sluice.Reset},
				sluice.Op{Key: pen.Key, Limit: pen.Limit, Cost: 2*pen.Limit.Burst - 1, Action: sluice.Charge})
		}
	}
	if len(ops) == 0 {
		return
	}
	if err := st.Take(ctx, ops, make([]sluice.Result, len(ops))); err != nil {
		b.PenaltyErr = fmt.Errorf("batch: starting a penalty: %w", err)
	}
}

// Plain is a Decider over a store that is not one: Decide is Run in mode
// Split (what holds for any store).
type Plain struct{ sluice.Store }

// Decide implements Decider with Run.
func (p Plain) Decide(ctx context.Context, b *Batch) error { return Run(ctx, p.Store, b, Split) }
