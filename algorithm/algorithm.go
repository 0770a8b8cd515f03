// Package algorithm holds the rate-limiting algorithms as pure step
// functions over integer microseconds.
//
// Each algorithm is a function of (state, now, cost, params) that returns the
// decision and the state to keep when the caller commits it. Nothing here reads
// a clock, allocates on the hot path, or keeps state of its own; the stores
// (store/memory in Go, store/redis in Lua) own the state and decide when to
// commit it. The Lua scripts in store/redis/scripts implement exactly the same
// arithmetic, and store/storetest checks that both agree to the microsecond.
//
// Units: every time and duration is an int64 count of microseconds; "now" is
// microseconds since the Unix epoch. Quotas and costs are int64 counts.
package algorithm

// Bounds that keep every store's arithmetic exact: stores count time in
// integer microseconds, and Lua numbers are doubles, exact below 2^53
// (MaxExact, settle.go). sluice.Limit.Validate refuses a limit outside them.
const (
	// MaxLogQuota caps the quota of sliding_log and concurrency, whose
	// state grows with it (an entry per admitted hit or lease).
	MaxLogQuota = 100_000
	// MinWindow is the shortest window a limit may have, in µs (1ms).
	MinWindow = 1_000
	// MaxWindow is the longest window a limit may have, in µs (3,660 days).
	MaxWindow = 10 * 366 * 24 * 3600 * 1_000_000
)

// Params are the numbers an algorithm needs, derived once from a limit.
//
// The zero value is not valid; build Params with NewParams.
type Params struct {
	// Quota is the number of units allowed per Window (or, for concurrency,
	// the number of units that may be in flight at once).
	Quota int64
	// Window is the window length in microseconds (for concurrency, the lease
	// timeout).
	Window int64
	// Burst is the capacity of token_bucket, gcra and leaky_bucket; the other
	// algorithms ignore it.
	Burst int64
	// Interval is the emission interval of the bucket algorithms: Window /
	// Quota rounded up, so a bucket never admits more than Quota per Window
	// beyond its burst.
	Interval int64
}

// NewParams derives Params from a quota, a window in microseconds and a burst
// (0 means burst = quota). It does not validate; callers validate limits first
// (sluice.Limit.Validate), which guarantees quota ≥ 1, window ≥ quota, and
// burst × interval below 2^53.
func NewParams(quota, window, burst int64) Params {
	if burst == 0 {
		burst = quota
	}
	p := Params{Quota: quota, Window: window, Burst: burst}
	if quota > 0 {
		p.Interval = CeilDiv(window, quota)
	}
	return p
}

// Reason says why a Decision denied, or that it allowed.
type Reason uint8

const (
	// Allowed: the cost was admitted.
	Allowed Reason = iota
	// Limited: the cost is over the limit now; RetryAfter says when it fits.
	Limited
	// CostTooHigh: the cost exceeds what the limit can ever admit (more than
	// its burst or quota); waiting does not help and RetryAfter is zero.
	CostTooHigh
)

// Decision is the outcome of one step. All durations are microseconds.
type Decision struct {
	Reason Reason
	// Limit is the capacity the Remaining figure counts against: the burst
	// for the bucket algorithms, the quota otherwise.
	Limit int64
	// Remaining is the number of units that could still be admitted now,
	// after this step (after the charge when allowed).
	Remaining int64
	// ResetAfter is how long until the state is back to fresh (full quota)
	// with no further traffic.
	ResetAfter int64
	// RetryAfter is how long until the same cost would be allowed with no
	// other traffic: it is allowed after waiting exactly RetryAfter and denied
	// one microsecond earlier (sliding_log and concurrency: when more than
	// ExactRetryUnits units must leave, RetryAfter is ResetAfter, allowed
	// then but maybe earlier too). Zero when allowed or CostTooHigh.
	RetryAfter int64
	// Delay is, for leaky_bucket, how long the admitted request must wait
	// before it may proceed (its place in the queue). Zero otherwise.
	Delay int64
}

// OK reports whether the decision admitted the cost.
func (d Decision) OK() bool { return d.Reason == Allowed }

// CeilDiv returns ⌈a/b⌉ for a ≥ 0 and b > 0.
func CeilDiv(a, b int64) int64 { return FloorDiv(a+b-1, b) }

// FloorDiv returns ⌊a/b⌋ for any a and b > 0 (Go's / truncates toward zero).
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
