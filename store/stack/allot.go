package stack

import (
	"context"
	"time"

	"github.com/sluice-rl/sluice"
)

// Allotments: the vocabulary between a store that decides locally
// (store/hybrid) and the global store it leases quota from (store/redis).

// AllotRequest asks a global store for an allotment of one key: units taken
// from the key's quota now, in one atomic step, for the caller to spend
// locally.
type AllotRequest struct {
	// Key and Limit name the counter, exactly as an Op would (ops on the
	// same Key and Limit see the allotted units as taken); Limit.Algorithm
	// must satisfy AllotAlgorithm.
	Key   string
	Limit sluice.Limit
	// Want is how many units the caller would like, ≥ 0. The store grants
	// fewer when the quota is short (see Keep and Split); zero only gives
	// back and reports.
	Want int64
	// Keep is the reserve: no allotment brings the key's remaining quota
	// below Keep, so the last Keep units are decided one by one. ≥ 0.
	Keep int64
	// Split caps one grant at 1/Split of what stands above Keep, so that
	// several instances share what is left. < 1 means 1.
	Split int64
	// Give is the unspent part of an earlier allotment, handed back (its
	// units become available again). It is applied only while that
	// allotment's Epoch is still current, so a late give-back never frees
	// quota of a later window.
	Give int64
	// Epoch is the Allotment.Epoch of the allotment Give comes from.
	Epoch int64
}

// Allotment is a global store's answer to an AllotRequest.
type Allotment struct {
	// Granted is the number of units taken for the caller, 0 ≤ Granted ≤
	// Want. They are already counted against the key: spending them needs
	// no further call.
	Granted int64
	// Remaining is what the key has left after the grant.
	Remaining int64
	// TTL is how long the grant may be spent, measured from when the
	// request was sent: for a fixed window, until the window ends; for the
	// bucket algorithms, the lease the caller asked for (capped by the
	// store). Units unspent by then are void.
	TTL time.Duration
	// ResetAfter is how long until the key's quota is whole again.
	ResetAfter time.Duration
	// Epoch identifies the period the grant belongs to (the window index
	// for a fixed window); pass it back with Give.
	Epoch int64
}

// Allotter is a global store that can lease allotments. Implementations are
// safe for concurrent use.
type Allotter interface {
	sluice.Store
	// Allot takes an allotment for each request in one atomic step per
	// request; out must have len(reqs). An error means nothing may be
	// assumed granted (units granted but lost this way come back when the
	// key's window or bucket drains; they are never admitted).
	Allot(ctx context.Context, reqs []AllotRequest, out []Allotment) error
}

// AllotAlgorithm reports whether a global store allots a's quota: a fixed
// window (an allotment is a reservation inside the current window) and gcra
// (tokens taken from the bucket now, spent later). A token_bucket limit
// decides exactly as gcra, so a caller may allot it as gcra.
func AllotAlgorithm(a sluice.Algorithm) bool {
	return a == sluice.FixedWindow || a == sluice.GCRA
}
