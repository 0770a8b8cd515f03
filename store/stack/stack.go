// Package stack is the protocol among the layers of Sluice's store stack
// (store/memory, store/redis, store/hybrid, store/compose) and the engine
// above it (package service), kept out of the root package's vocabulary:
// allotments leased from a global store (Allotter), announcements of resets
// and refunds (Invalidator, ResetAnnouncer), key listing for operators
// (KeyLister), node health (HealthReporter), the placement byte a key
// starts with (KeyHybrid, KeyLocal), and the helpers on limits and ops that
// every store shares (CheckOp, Params, Capacity, FromDecision).
//
// Library users who only call a Store or a sluice.Limiter need none of it.
// A store of one's own (one that implements sluice.Store) may use CheckOp
// and FromDecision, and offer the optional interfaces here to the layers
// above it.
//
// It imports only the standard library, package sluice and package
// algorithm, so any package of the module may import it.
package stack

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
)

// Placement of a counter, as the first byte of its Op.Key: the engine
// (package service) writes it, a composed store (store/compose) routes by
// it. A key that starts with neither byte is placed global (the engine's
// global keys start with their hash tag's '{').
const (
	// KeyHybrid starts the keys of counters placed hybrid: decided from
	// local allotments of a global store.
	KeyHybrid byte = 'h'
	// KeyLocal starts the keys of counters placed local: decided by this
	// process alone.
	KeyLocal byte = 'l'
)

// Errors of the store stack.
var (
	// ErrResultsLength: Take was given a results slice of the wrong length.
	ErrResultsLength = errors.New("sluice: len(results) != len(ops)")
	// ErrNoKeyLister: the store cannot list its keys (it is not a
	// KeyLister, or a layer of it forwards Keys to a store that is not).
	// Test with errors.Is.
	ErrNoKeyLister = errors.New("sluice: the store cannot list its keys")
)

// KeyLister is implemented by stores that can list the keys they hold. It is
// for operators' tools (resetting or reading every counter of one tenant),
// never for the hot path: it may scan the whole store, in bounded steps.
//
// Keys returns up to max keys (max ≥ 1) that start with prefix, as Op.Key
// names them, in no particular order, and whether there may be more. A key
// listed may have expired since. Safe for concurrent use.
type KeyLister interface {
	Keys(ctx context.Context, prefix string, max int) (keys []string, more bool, err error)
}

// HealthReporter is implemented by stores that can tell the health of each
// node they talk to (store/redis: one entry per node, each with its own
// circuit breaker). Health must be safe for concurrent use and cheap enough
// to call on every metrics scrape or readiness probe.
type HealthReporter interface {
	Health() []NodeHealth
}

// NodeHealth is one store node's health, as a HealthReporter tells it.
type NodeHealth struct {
	// Node names the node: a host:port, never a URL or anything carrying
	// credentials.
	Node string
	// State is the node's circuit breaker: "closed" (healthy), "half-open"
	// (probing) or "open" (Takes for its keys fail fast with
	// sluice.ErrStoreUnavailable).
	State string
	// LastError is the last failure seen on the node, free of secrets; empty
	// when none.
	LastError string
}

// Bounds of a limit's window, as durations: algorithm.MinWindow and
// algorithm.MaxWindow (µs).
const (
	// MinWindow is the shortest window a Limit may have: 1ms.
	MinWindow = time.Duration(algorithm.MinWindow) * time.Microsecond
	// MaxWindow is the longest window a Limit may have: 3,660 days.
	MaxWindow = time.Duration(algorithm.MaxWindow) * time.Microsecond
)

// Algorithms lists every valid sluice.Algorithm, in their numeric order.
// It returns a new slice on each call.
func Algorithms() []sluice.Algorithm {
	return []sluice.Algorithm{sluice.TokenBucket, sluice.GCRA, sluice.LeakyBucket, sluice.FixedWindow,
		sluice.SlidingWindow, sluice.SlidingLog, sluice.Concurrency}
}

// ValidAlgorithm reports whether a is one of the defined algorithms.
func ValidAlgorithm(a sluice.Algorithm) bool {
	return a >= sluice.TokenBucket && a <= sluice.Concurrency
}

// HasBurst reports whether the algorithm uses Limit.Burst: token_bucket,
// gcra and leaky_bucket.
func HasBurst(a sluice.Algorithm) bool {
	return a == sluice.TokenBucket || a == sluice.GCRA || a == sluice.LeakyBucket
}

// Capacity is the most units one hit of limit l may cost: Burst (or Quota
// when Burst is zero) for the bucket algorithms, Quota otherwise. It is
// what Result.Limit reports.
func Capacity(l sluice.Limit) int64 {
	if HasBurst(l.Algorithm) && l.Burst != 0 {
		return l.Burst
	}
	return l.Quota
}

// Params returns the integer parameters the algorithms use for limit l,
// which must be valid (CheckOp or Limit.Validate).
func Params(l sluice.Limit) algorithm.Params {
	return algorithm.NewParams(l.Quota, l.Window.Microseconds(), l.Burst)
}

// FieldErrors returns the *sluice.FieldError values in err (as
// sluice.Limit.Validate returns it), in order; nil when there are none.
func FieldErrors(err error) []*sluice.FieldError {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []*sluice.FieldError
	for _, e := range errs {
		var fe *sluice.FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		}
	}
	return out
}

// FromDecision converts an algorithm decision (microseconds) to a Result.
func FromDecision(d algorithm.Decision) sluice.Result {
	return sluice.Result{
		Allowed:    d.Reason == algorithm.Allowed,
		Reason:     sluice.Reason(d.Reason),
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		ResetAfter: time.Duration(d.ResetAfter) * time.Microsecond,
		RetryAfter: time.Duration(d.RetryAfter) * time.Microsecond,
		Delay:      time.Duration(d.Delay) * time.Microsecond,
	}
}

// actionNames names the actions in CheckOp's errors.
var actionNames = [...]string{sluice.Take: "take", sluice.Charge: "charge", sluice.Refund: "refund", sluice.Reset: "reset"}

// CheckOp returns nil if a store can apply o, or an error naming the
// problem: a negative cost or one above algorithm.MaxExact, an invalid
// limit (with Limit.Validate's reasons), a release of a limit that is not
// Concurrency, a Charge or Refund of a Concurrency limit, an unknown
// action, a release that also acts. It does not allocate when o is valid,
// so stores call it on every op.
func CheckOp(o *sluice.Op) error {
	if o.Cost < 0 {
		return fmt.Errorf("sluice: op %q: cost %d must not be negative", o.Key, o.Cost)
	}
	if o.Cost > algorithm.MaxExact {
		return fmt.Errorf("sluice: op %q: cost %d is above %d", o.Key, o.Cost, int64(algorithm.MaxExact))
	}
	if !limitOK(o.Limit) {
		err := o.Limit.Validate()
		if err == nil { // limitOK and Validate disagree; keep the store safe anyway
			err = errors.New("invalid limit")
		}
		return fmt.Errorf("sluice: op %q: limit %v: %w", o.Key, o.Limit, err)
	}
	if o.Release && o.Limit.Algorithm != sluice.Concurrency && o.Lease == 0 {
		return fmt.Errorf("sluice: op %q: release is only for concurrency limits and reservations, not %v", o.Key, o.Limit.Algorithm)
	}
	switch o.Action {
	case sluice.Take, sluice.Reset:
	case sluice.Charge, sluice.Refund:
		if o.Limit.Algorithm == sluice.Concurrency {
			return fmt.Errorf("sluice: op %q: %s is not for concurrency limits (release the lease instead)", o.Key, actionNames[o.Action])
		}
	default:
		return fmt.Errorf("sluice: op %q: unknown action %d", o.Key, o.Action)
	}
	if o.Release && o.Action != sluice.Take {
		return fmt.Errorf("sluice: op %q: a release cannot also %s", o.Key, actionNames[o.Action])
	}
	if Paired(o) {
		if o.Reserve < 0 || o.Reserve > algorithm.MaxExact {
			return fmt.Errorf("sluice: op %q: reserve %d is outside [0, %d]", o.Key, o.Reserve, int64(algorithm.MaxExact))
		}
		if o.SettleWithin < time.Millisecond || o.SettleWithin > MaxWindow || o.SettleWithin%time.Millisecond != 0 {
			return fmt.Errorf("sluice: op %q: settle within %v is not a whole number of milliseconds from 1ms to %v", o.Key, o.SettleWithin, MaxWindow)
		}
	}
	return nil
}

// Paired reports whether o is a reservation of reserve-then-settle (see
// sluice.Op.Lease), or its void (with Release): a Take with a nonzero
// Lease on a limit other than Concurrency.
func Paired(o *sluice.Op) bool {
	return o.Lease != 0 && o.Action == sluice.Take && o.Limit.Algorithm != sluice.Concurrency
}

// limitOK is a fast check, without allocation, that Validate would return
// nil for the properties stores rely on to avoid dividing by zero or
// overflowing. CheckOp calls it on every op; Validate gives the reasons.
func limitOK(l sluice.Limit) bool {
	if !ValidAlgorithm(l.Algorithm) || l.Window < MinWindow || l.Window > MaxWindow ||
		l.Window%time.Microsecond != 0 || l.Quota < 0 || l.Quota > algorithm.MaxExact || l.Burst < 0 {
		return false
	}
	if HasBurst(l.Algorithm) {
		if l.Quota == 0 {
			return l.Burst == 0
		}
		if l.Quota > l.Window.Microseconds() {
			return false
		}
		p := Params(l)
		return p.Burst <= algorithm.MaxExact/p.Interval
	}
	return l.Burst == 0 && ((l.Algorithm != sluice.SlidingLog && l.Algorithm != sluice.Concurrency) || l.Quota <= algorithm.MaxLogQuota)
}
