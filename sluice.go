// Package sluice is the vocabulary of the Sluice rate limiter: limits, the
// operations a store performs on them, their results, and the Store interface
// that in-process and Redis stores implement. Limiter is the convenience for
// programs that embed Sluice as a library.
//
// The root keeps only what a library user names: Limit, Algorithm, Op,
// Action, Result, Reason, Store, the errors, and Limiter. The protocol
// among the layers of the store stack (allotments, reset and refund
// announcements, key listing, node health, the placement byte a key starts
// with) and the helpers on limits and ops that stores share (Capacity,
// Params, CheckOp, …) live in package store/stack; the bounds of the
// arithmetic (MaxExact, MaxLogQuota, MinWindow, MaxWindow, in µs) in
// package algorithm. Package service holds the engine's own reasons
// (ReasonPenalty, ReasonDenyList, ReasonUnknownModel).
package sluice

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
)

// Algorithm names a rate-limiting algorithm. The zero value is invalid.
type Algorithm uint8

// The algorithms. Their exact arithmetic is documented in package algorithm.
const (
	// TokenBucket refills Quota tokens per Window up to Burst; a hit takes
	// cost tokens.
	TokenBucket Algorithm = iota + 1
	// GCRA is the generic cell rate algorithm (leaky bucket as a meter). It
	// decides exactly as TokenBucket with the same limit, in one integer of
	// state.
	GCRA
	// LeakyBucket is the leaky bucket as a queue: it admits while the queue of
	// Burst units has room and tells the caller to wait Result.Delay so that
	// work leaves at Quota per Window.
	LeakyBucket
	// FixedWindow counts hits in epoch-aligned windows. It may admit up to
	// 2 × Quota around a window boundary.
	FixedWindow
	// SlidingWindow weighs the previous window's count by how much of it still
	// overlaps the sliding window: O(1) state, approximate.
	SlidingWindow
	// SlidingLog keeps the timestamps of admitted hits: exact, O(Quota) state.
	SlidingLog
	// Concurrency limits hits in flight: an admitted hit holds a lease until it
	// is released or Window passes.
	Concurrency
)

var algorithmNames = [...]string{
	TokenBucket:   "token_bucket",
	GCRA:          "gcra",
	LeakyBucket:   "leaky_bucket",
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	Concurrency:   "concurrency",
}

// algorithms lists every valid Algorithm (store/stack.Algorithms exports it).
func algorithms() []Algorithm {
	return []Algorithm{TokenBucket, GCRA, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency}
}

// String returns the algorithm's name as used in rule files ("token_bucket").
func (a Algorithm) String() string {
	if a.valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// valid reports whether a is one of the defined algorithms.
func (a Algorithm) valid() bool { return a >= TokenBucket && a <= Concurrency }

// MarshalText implements encoding.TextMarshaler: the algorithm's name, so a
// Limit in a JSON or YAML configuration reads "gcra", not a number. An
// undefined Algorithm is an error.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.valid() {
		return nil, fmt.Errorf("invalid algorithm %d", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler, as ParseAlgorithm
// (case-insensitive names).
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// hasBurst reports whether the algorithm uses Limit.Burst: TokenBucket,
// GCRA and LeakyBucket.
func (a Algorithm) hasBurst() bool { return a == TokenBucket || a == GCRA || a == LeakyBucket }

// ParseAlgorithm returns the Algorithm named s (case-insensitive), as
// String names it; an error naming every algorithm otherwise.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range algorithms() {
		if strings.EqualFold(s, algorithmNames[a]) {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of %s)", s, strings.Join(algorithmNames[1:], ", "))
}

// Bounds that keep every store's arithmetic exact, from package algorithm
// (stores count time in integer microseconds, and Lua numbers are doubles,
// exact below 2^53), as durations here.
const (
	minWindow = time.Duration(algorithm.MinWindow) * time.Microsecond
	maxWindow = time.Duration(algorithm.MaxWindow) * time.Microsecond
)

// Limit is one rate limit: Quota units per Window, decided by Algorithm.
//
// The zero value is invalid; check a Limit with Validate before use (stores
// and NewLimiter refuse an invalid one). Limits are small values, compared
// with ==, safe to copy and to share between goroutines.
//
// The capacity of a limit, the most units one hit may cost, is Burst for
// TokenBucket, GCRA and LeakyBucket (Quota when Burst is zero), and Quota
// for the other algorithms; Result.Limit reports it.
type Limit struct {
	// Algorithm decides how hits are counted.
	Algorithm Algorithm
	// Quota is the number of units allowed per Window; for Concurrency, the
	// number in flight at once. Zero denies every hit that costs anything.
	// At most 2^53 − 1 (algorithm.MaxExact); for SlidingLog and
	// Concurrency, whose state grows with it, at most 100,000
	// (algorithm.MaxLogQuota). For the bucket algorithms, at most one per
	// microsecond of Window.
	Quota int64
	// Window is the period of the quota, in whole microseconds, from 1ms to
	// 3,660 days (algorithm.MinWindow, algorithm.MaxWindow); for
	// Concurrency, the lease timeout.
	Window time.Duration
	// Burst is the bucket capacity of TokenBucket, GCRA and LeakyBucket;
	// zero means Quota. It must be zero for the other algorithms, and Burst
	// × (Window ÷ Quota) must stay below 2^53 µs.
	Burst int64
}

// Validate returns nil if the limit can be used, or an error that lists every
// problem with it (errors.Join), one *FieldError per problem (see Limit's
// fields for the bounds). It does not allocate when the limit is valid.
func (l Limit) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if !l.Algorithm.valid() {
		bad("algorithm", "%v is not a valid algorithm", l.Algorithm)
	}
	switch {
	case l.Window <= 0:
		bad("window", "%v must be positive", l.Window)
	case l.Window < minWindow:
		bad("window", "%v is shorter than the minimum %v", l.Window, minWindow)
	case l.Window > maxWindow:
		bad("window", "%v is longer than the maximum %v", l.Window, maxWindow)
	case l.Window%time.Microsecond != 0:
		bad("window", "%v is not a whole number of microseconds", l.Window)
	}
	switch {
	case l.Quota < 0:
		bad("quota", "%d must not be negative", l.Quota)
	case l.Quota > algorithm.MaxExact:
		bad("quota", "%d is above the maximum %d", l.Quota, int64(algorithm.MaxExact))
	case (l.Algorithm == SlidingLog || l.Algorithm == Concurrency) && l.Quota > algorithm.MaxLogQuota:
		bad("quota", "%d is above %d, the most %v keeps state for", l.Quota, algorithm.MaxLogQuota, l.Algorithm)
	}
	switch {
	case l.Burst < 0:
		bad("burst", "%d must not be negative (0 means quota)", l.Burst)
	case l.Burst != 0 && l.Algorithm.valid() && !l.Algorithm.hasBurst():
		bad("burst", "%v has no burst; remove it", l.Algorithm)
	case l.Burst != 0 && l.Quota == 0:
		bad("burst", "%d with quota 0 would never refill", l.Burst)
	}
	if len(errs) == 0 && l.Algorithm.hasBurst() && l.Quota > 0 {
		w := l.Window.Microseconds()
		if l.Quota > w {
			bad("quota", "%d per %v is more than one per microsecond, the finest interval the bucket algorithms count", l.Quota, l.Window)
		} else if p := algorithm.NewParams(l.Quota, w, l.Burst); p.Burst > algorithm.MaxExact/p.Interval {
			bad("burst", "%d × interval %dµs exceeds 2^53µs", p.Burst, p.Interval)
		}
	}
	return errors.Join(errs...)
}

// FieldError is one problem Limit.Validate finds: the field at fault
// ("algorithm", "window", "quota" or "burst") and what is wrong with it.
// Validate joins them (errors.Join); find them with errors.As on each of
// the joined errors (store/stack.FieldErrors does).
type FieldError struct {
	// Field names the Limit field at fault, in lower case.
	Field string
	// Msg says what is wrong with it.
	Msg string
}

// Error returns "field: msg".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// String formats the limit as "10/1s gcra burst 20".
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%v %v", l.Quota, l.Window, l.Algorithm)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}
