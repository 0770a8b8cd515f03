package sluice

import (
	"context"
	"errors"
	"time"
)

// Op is one check-and-update of one key against one limit: a Take of Cost
// units unless Action or Release says otherwise. Ops are plain values; a
// store never keeps or modifies the caller's. A store refuses an op that
// store/stack.CheckOp refuses (a negative cost, an invalid Limit, an action
// that does not apply to its algorithm).
type Op struct {
	// Key names the counter. Stores keep one state per key; a key must always
	// be used with the same Limit (the service puts the rule in the key).
	Key string
	// Limit is the limit to apply.
	Limit Limit
	// Cost is the number of units to take, ≥ 0. Zero looks without charging
	// and is always allowed.
	Cost int64
	// Release, for Concurrency limits, frees the lease named Lease instead of
	// acquiring. A release is always allowed; releasing a lease that has
	// expired or was never granted does nothing. On a reservation (a
	// nonzero Lease on another algorithm, see Lease) it voids it: when the
	// reservation has no record, one is written saying denied (a later op
	// of that Lease is a look); otherwise nothing changes. Package batch
	// voids the reservations of a denied request this way.
	Release bool
	// Lease names the lease to release (from Result.Lease of the acquire).
	// On a Concurrency acquire (cost > 0, not Release) a nonzero Lease is
	// the ID the caller chooses for the lease it asks for, instead of one
	// the store picks: a caller that pairs an acquire with its release by
	// a name of its own (a request ID, hashed) sets it. An acquire whose
	// chosen ID is still held is admitted as a look, holding nothing more
	// (a retried acquire takes one slot, not two); its Result names the
	// lease held.
	//
	// On a Take of any other algorithm, a nonzero Lease names a
	// reservation (reserve-then-settle, paired by a request ID the caller
	// hashes): the store keeps a record per key and Lease, living
	// SettleWithin, and decides the op by it, in one atomic step. No
	// record: the op reserves, a Take of Cost (Reserve when Cost is 0);
	// admitted, the record holds the units reserved; denied by its own
	// limit, the record says denied. A record holding n units: the op
	// settles, its Cost being the actual usage a: a Charge of a − n when
	// positive, a Refund of n − a when negative, never denied; the record
	// says settled. A record that says denied or settled: the op is a look
	// (a duplicate settle changes nothing). A reservation whose settle
	// never comes stands; a settle after its record expired reserves anew.
	// When a batch is denied, a reservation it admitted is undone with the
	// batch (no record is left; see Release to void it) and so is a
	// settle. Ignored on other ops.
	Lease uint64
	// Reserve, on a reservation (see Lease), is the units it reserves when
	// Cost is 0, ≥ 0. Ignored on other ops.
	Reserve int64
	// SettleWithin, on a reservation (see Lease), is how long its record
	// lives: a whole number of milliseconds from 1ms to the longest
	// Limit.Window. Ignored on other ops.
	SettleWithin time.Duration
	// Action says what the op does to its key; the zero value, Take, admits
	// Cost only if it fits. Charge, Refund and Reset are never denied.
	Action Action
	// UndoIfUnknown asks, for a Take of cost > 0, that a charge the caller
	// could not learn of be taken back: when the store fails the Take with
	// ErrStoreTimeout (the outcome is unknown) and learns later that the op
	// was charged after all (a reply that came back late), it refunds the
	// charge, in the background, as soon as it can. Set it when a Take that
	// times out is treated as not admitted (denied, or decided elsewhere),
	// so that the refused request uses no quota; leave it unset when such a
	// Take is treated as admitted (it paid once). It is a best effort, never
	// a promise: a store that cannot do it ignores it (store/memory never
	// times out), and a charge whose outcome the store never learns stays.
	// It changes nothing in a Take that answers in time. Ignored on
	// releases, actions, looks and reservations (see Lease: a refund of
	// the cost would not undo one).
	UndoIfUnknown bool
	// Script asks a store that decides windows with native counters
	// (store/redis Options.NativeFixedWindow, NativeSlidingWindow) to decide
	// this op with its script instead, as a rule's rate_limit.redis_path:
	// script and a window reservation do. Every Take, Charge and Refund of
	// one counter must say the same (its state lives where its path keeps
	// it); a Reset clears both. Other stores and algorithms ignore it.
	Script bool
}

// Action is what an Op does to its key. The zero value is Take.
//
// Charge and Refund settle a cost known only after the fact (a response's
// real size, a query's points): the caller took an estimate before and
// settles the difference after. Neither applies to Concurrency limits
// (release the lease instead); Reset applies to every algorithm.
//
// In a batch, Charge, Refund and Reset ops are never denied themselves, but
// the batch stays all-or-nothing: when a Take of the same batch is denied,
// none of them is applied either.
type Action uint8

const (
	// Take admits Cost if it fits the limit now, and charges it then.
	Take Action = iota
	// Charge adds Cost whether or not it fits: it was already spent. The key
	// may go into debt, by at most one more capacity (what is in use is capped
	// at 2 × the limit's capacity, see Limit), and is refused until the limit has refilled or
	// its window has passed. The Result is allowed and reports the state
	// after the charge (Remaining 0 when in debt).
	Charge
	// Refund gives back up to Cost units the key holds, newest first, and
	// never goes below a fresh key: Remaining never exceeds the capacity, and
	// a refund of units whose window has passed gives nothing back. The
	// Result is allowed and reports the state after the refund.
	Refund
	// Reset forgets the key's state, as if it had never been used; Cost is
	// ignored. The Result is allowed and reports a fresh key.
	Reset
)

// Reason says why a Result is what it is. The zero value is
// ReasonAllowed. A store sets ReasonAllowed, ReasonLimited or
// ReasonCostTooHigh; the engine (package service) adds its own three.
type Reason uint8

const (
	// ReasonAllowed: the op was admitted (or was a look or a release).
	ReasonAllowed Reason = iota
	// ReasonLimited: over the limit now; RetryAfter says when the same op
	// would be admitted.
	ReasonLimited
	// ReasonCostTooHigh: the cost exceeds what the limit can ever admit
	// (its capacity, see Limit); waiting will not help and RetryAfter is
	// zero.
	ReasonCostTooHigh
	// Reasons 3, 4 and 5 are the engine's, set by it and never by a
	// store: service.ReasonPenalty, service.ReasonDenyList and
	// service.ReasonUnknownModel.
	reasonPenalty
	reasonDenyList
	reasonUnknownModel
)

// String names the reason: "allowed", "limited", "cost_too_high", and the
// engine's "penalty", "deny_list" and "unknown_model".
func (r Reason) String() string {
	switch r {
	case ReasonAllowed:
		return "allowed"
	case ReasonLimited:
		return "limited"
	case ReasonCostTooHigh:
		return "cost_too_high"
	case reasonPenalty:
		return "penalty"
	case reasonDenyList:
		return "deny_list"
	case reasonUnknownModel:
		return "unknown_model"
	}
	return "unknown"
}

// Result is the outcome of one Op.
type Result struct {
	// Allowed reports whether the op was admitted. In a batch that was denied,
	// an op that would have been allowed still reports true, but was not
	// charged: its other fields describe its state as it stands.
	Allowed bool
	// Reason says why Allowed is false (or ReasonAllowed).
	Reason Reason
	// Limit is the capacity Remaining counts against: Burst for the bucket
	// algorithms, Quota otherwise.
	Limit int64
	// Remaining is how many units could still be admitted now.
	Remaining int64
	// ResetAfter is how long until the full quota is back, with no more
	// traffic.
	ResetAfter time.Duration
	// RetryAfter is how long until the same op would be allowed, with no other
	// traffic: it is allowed after exactly this wait and denied one
	// microsecond earlier. Zero when allowed and when the cost is too high.
	RetryAfter time.Duration
	// Delay is, for LeakyBucket, how long the admitted hit must wait before
	// proceeding so that work leaves at the configured rate. Zero otherwise.
	Delay time.Duration
	// Lease, for an admitted Concurrency acquire, names the lease to release.
	Lease uint64
	// At is the instant that decided the op: the store clock's reading, in
	// µs since the Unix epoch, that the decision was made at (for Redis, the
	// TIME its script or native call read; for the memory store, its clock
	// when it took the op; under a test clock, that clock's reading; for a
	// hybrid store's local spend of a fixed window, the grant's instant plus
	// the local time since it arrived: never later than the spend, always
	// inside the window its units were granted in). Zero when no store
	// clock decided it or the instant is unknown: a hybrid store's local
	// spend of a bucket, a remembered denial, a fail-open or degraded-mode
	// answer. It is for placing decisions in time (the proof
	// harness does); the decision itself never depends on it.
	At int64
}

// Store keeps rate-limit state and applies ops to it.
//
// Take applies ops and fills results[i] with the Result of ops[i];
// len(results) must equal len(ops). Each op is atomic. A batch is
// all-or-nothing: if any op is denied, no op of the batch is charged (a
// request with several limits must not burn quota it was refused). Ops with
// Action Charge, Refund or Reset are never denied (see Action). Take
// returns an error only when the store could not decide (bad input, a store
// that is down, ctx done); then results are unspecified and nothing may be
// assumed charged or not.
//
// Implementations are safe for concurrent use.
type Store interface {
	Take(ctx context.Context, ops []Op, results []Result) error
}

// Errors stores and the Limiter return.
var (
	// ErrCostExceedsLimit: the cost is more than the limit can ever admit.
	ErrCostExceedsLimit = errors.New("sluice: cost exceeds limit capacity")
	// ErrWouldExceedDeadline: Wait would have to wait past ctx's deadline.
	ErrWouldExceedDeadline = errors.New("sluice: wait would exceed context deadline")
	// ErrStoreUnavailable: the store declined a Take without trying it,
	// because the node that owns one of its keys is known to be down (its
	// circuit breaker is open). Nothing was charged.
	ErrStoreUnavailable = errors.New("sluice: store unavailable")
	// ErrStoreTimeout: the store sent a Take but no reply came within the
	// store's own timeout, counted from when the call was written (not from
	// when it was queued). The outcome is unknown: the Take may have charged.
	ErrStoreTimeout = errors.New("sluice: store did not answer in time")
)
