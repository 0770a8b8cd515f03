// Package sluice is the vocabulary of the Sluice rate limiter: limits, the
// operations a store performs on them, their results, and the Store interface
// that in-process and Redis stores implement. Limiter is the convenience for
// programs that embed Sluice as a library.
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

// Algorithms lists every valid Algorithm.
func Algorithms() []Algorithm {
	return []Algorithm{TokenBucket, GCRA, LeakyBucket, FixedWindow, SlidingWindow, SlidingLog, Concurrency}
}

// String returns the algorithm's name as used in rule files ("token_bucket").
func (a Algorithm) String() string {
	if a.Valid() {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// Valid reports whether a is one of the defined algorithms.
func (a Algorithm) Valid() bool { return a >= TokenBucket && a <= Concurrency }

// HasBurst reports whether the algorithm uses Limit.Burst.
func (a Algorithm) HasBurst() bool { return a == TokenBucket || a == GCRA || a == LeakyBucket }

// ParseAlgorithm returns the Algorithm named s (case-insensitive).
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if strings.EqualFold(s, algorithmNames[a]) {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want one of %s)", s, strings.Join(algorithmNames[1:], ", "))
}

// MarshalText implements encoding.TextMarshaler.
func (a Algorithm) MarshalText() ([]byte, error) {
	if !a.Valid() {
		return nil, fmt.Errorf("invalid algorithm %d", uint8(a))
	}
	return []byte(a.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (a *Algorithm) UnmarshalText(b []byte) error {
	v, err := ParseAlgorithm(string(b))
	if err != nil {
		return err
	}
	*a = v
	return nil
}

// Bounds that keep every store's arithmetic exact: stores count time in
// integer microseconds, and Lua numbers are doubles, exact below 2^53.
const (
	// MinWindow is the shortest window a Limit may have.
	MinWindow = time.Millisecond
	// MaxWindow is the longest window a Limit may have.
	MaxWindow = 10 * 366 * 24 * time.Hour
	// MaxExact is the largest integer every store represents exactly.
	MaxExact = 1<<53 - 1
	// MaxLogQuota caps Quota for SlidingLog and Concurrency, whose state grows
	// with it.
	MaxLogQuota = 100_000
)

// Limit is one rate limit: Quota units per Window, decided by Algorithm.
//
// The zero value is invalid; check a Limit with Validate before use. Limits
// are small values, compared with ==.
type Limit struct {
	// Algorithm decides how hits are counted.
	Algorithm Algorithm
	// Quota is the number of units allowed per Window; for Concurrency, the
	// number in flight at once. Zero denies every hit that costs anything.
	Quota int64
	// Window is the period of the quota (any duration from MinWindow to
	// MaxWindow, whole microseconds); for Concurrency, the lease timeout.
	Window time.Duration
	// Burst is the bucket capacity of TokenBucket, GCRA and LeakyBucket;
	// zero means Quota. It must be zero for the other algorithms.
	Burst int64
}

// PerSecond, PerMinute, PerHour: shorthands for common limits.

// PerSecond returns a limit of n per second with algorithm a.
func PerSecond(a Algorithm, n int64) Limit {
	return Limit{Algorithm: a, Quota: n, Window: time.Second}
}

// PerMinute returns a limit of n per minute with algorithm a.
func PerMinute(a Algorithm, n int64) Limit {
	return Limit{Algorithm: a, Quota: n, Window: time.Minute}
}

// Capacity is the most units one hit may cost: Burst (or Quota) for the
// bucket algorithms, Quota otherwise.
func (l Limit) Capacity() int64 {
	if l.Algorithm.HasBurst() && l.Burst != 0 {
		return l.Burst
	}
	return l.Quota
}

// Validate returns nil if the limit can be used, or an error that lists every
// problem with it (errors.Join), one *FieldError per problem.
func (l Limit) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if !l.Algorithm.Valid() {
		bad("algorithm", "%v is not a valid algorithm", l.Algorithm)
	}
	switch {
	case l.Window <= 0:
		bad("window", "%v must be positive", l.Window)
	case l.Window < MinWindow:
		bad("window", "%v is shorter than the minimum %v", l.Window, MinWindow)
	case l.Window > MaxWindow:
		bad("window", "%v is longer than the maximum %v", l.Window, MaxWindow)
	case l.Window%time.Microsecond != 0:
		bad("window", "%v is not a whole number of microseconds", l.Window)
	}
	switch {
	case l.Quota < 0:
		bad("quota", "%d must not be negative", l.Quota)
	case l.Quota > MaxExact:
		bad("quota", "%d is above the maximum %d", l.Quota, int64(MaxExact))
	case (l.Algorithm == SlidingLog || l.Algorithm == Concurrency) && l.Quota > MaxLogQuota:
		bad("quota", "%d is above %d, the most %v keeps state for", l.Quota, MaxLogQuota, l.Algorithm)
	}
	switch {
	case l.Burst < 0:
		bad("burst", "%d must not be negative (0 means quota)", l.Burst)
	case l.Burst != 0 && l.Algorithm.Valid() && !l.Algorithm.HasBurst():
		bad("burst", "%v has no burst; remove it", l.Algorithm)
	case l.Burst != 0 && l.Quota == 0:
		bad("burst", "%d with quota 0 would never refill", l.Burst)
	}
	if len(errs) == 0 && l.Algorithm.HasBurst() && l.Quota > 0 {
		w := l.Window.Microseconds()
		if l.Quota > w {
			bad("quota", "%d per %v is more than one per microsecond, the finest interval the bucket algorithms count", l.Quota, l.Window)
		} else if p := l.params(); p.Burst > MaxExact/p.Interval {
			bad("burst", "%d × interval %dµs exceeds 2^53µs", p.Burst, p.Interval)
		}
	}
	return errors.Join(errs...)
}

// FieldError is one problem Limit.Validate finds: the field at fault
// ("algorithm", "window", "quota" or "burst") and what is wrong with it.
// Validate joins them (errors.Join); find them with errors.As on each of
// the joined errors, or FieldErrors.
type FieldError struct {
	Field string
	Msg   string
}

// Error returns "field: msg".
func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// FieldErrors returns the FieldErrors in err (as Validate returns it), in
// order; nil when there are none.
func FieldErrors(err error) []*FieldError {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var out []*FieldError
	for _, e := range errs {
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		}
	}
	return out
}

// params returns the algorithm parameters of a valid limit.
func (l Limit) params() algorithm.Params {
	return algorithm.NewParams(l.Quota, l.Window.Microseconds(), l.Burst)
}

// Params returns the integer parameters the algorithms use for this limit.
// The limit must be valid.
func (l Limit) Params() algorithm.Params { return l.params() }

// String formats the limit as "10/1s gcra burst 20".
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%v %v", l.Quota, l.Window, l.Algorithm)
	if l.Burst != 0 {
		s += fmt.Sprintf(" burst %d", l.Burst)
	}
	return s
}

// ok is a fast check, without allocation, that Validate would return nil
// for the properties stores rely on to avoid dividing by zero or overflowing.
// Stores call it on every op; Validate gives the reasons.
func (l Limit) ok() bool {
	if !l.Algorithm.Valid() || l.Window < MinWindow || l.Window > MaxWindow ||
		l.Window%time.Microsecond != 0 || l.Quota < 0 || l.Quota > MaxExact || l.Burst < 0 {
		return false
	}
	if l.Algorithm.HasBurst() {
		if l.Quota == 0 {
			return l.Burst == 0
		}
		if l.Quota > l.Window.Microseconds() {
			return false
		}
		p := l.params()
		return p.Burst <= MaxExact/p.Interval
	}
	return l.Burst == 0 && ((l.Algorithm != SlidingLog && l.Algorithm != Concurrency) || l.Quota <= MaxLogQuota)
}
