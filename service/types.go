// Package service is Sluice's transport-free decision engine: it matches a
// request's descriptors to rules, applies every limit in one store call,
// combines the answers, honours shadow mode and per-limit failure modes, and
// records metrics.
package service

import (
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Request asks whether a request may proceed. It mirrors envoy's
// RateLimitRequest without its protobuf types.
type Request struct {
	// Domain selects the rule file. Required.
	Domain string
	// Descriptors each describe one thing to limit. At least one is required.
	Descriptors []Descriptor
	// Hits is what each descriptor costs unless it says otherwise; 0 means 1.
	Hits uint64
}

// Descriptor is one list of entries to match against the rules.
type Descriptor struct {
	// Entries are matched level by level; at least one, each with a key.
	Entries []rules.Entry
	// Limit, when set, replaces the rule files' limit for this descriptor.
	Limit *LimitOverride
	// Hits, when set, overrides Request.Hits for this descriptor; 0 checks
	// without charging.
	Hits *uint64
	// Refund (envoy's is_negative_hits) gives the descriptor's hits back
	// instead of taking them: never denied, never past a fresh counter (a
	// counter gives back at most what it holds, and nothing of a window
	// that has passed). A concurrency rule's hits are not refunded (give
	// its lease back with Engine.Release).
	Refund bool
}

// LimitOverride is a limit given in the request itself (envoy's
// RateLimitDescriptor.limit).
type LimitOverride struct {
	RequestsPerUnit uint32
	// Unit is an envoy unit name: second, minute, hour, day, week, month,
	// year.
	Unit string
}

// Code is the decision for one descriptor or a whole request.
type Code uint8

const (
	// CodeOK: allowed.
	CodeOK Code = iota + 1
	// CodeOverLimit: denied.
	CodeOverLimit
)

// String returns "OK" or "OVER_LIMIT".
func (c Code) String() string {
	switch c {
	case CodeOK:
		return "OK"
	case CodeOverLimit:
		return "OVER_LIMIT"
	}
	return "UNKNOWN"
}

// CurrentLimit is the limit that applied to a descriptor, in envoy's terms.
type CurrentLimit struct {
	Name            string
	RequestsPerUnit uint32
	// Unit is the envoy unit name, or "" when the rule used a window that no
	// envoy unit expresses (see Window).
	Unit   string
	Window time.Duration
}

// Status is the decision for one request descriptor.
type Status struct {
	Code Code
	// Rule is the rule that matched, nil when none did (or for an override).
	Rule *rules.Rule
	// CurrentLimit is nil when no rule matched.
	CurrentLimit *CurrentLimit
	// Unlimited: the matching rule is unlimited (LimitRemaining is max uint32
	// on the envoy wire).
	Unlimited bool
	// Result is the store's answer for this descriptor's limit (zero when no
	// rule matched, unlimited, or the store failed).
	Result sluice.Result
	// Shadowed: the limit denied but is in shadow mode, so the request is
	// not denied for it. Code is OK, except under Config.ShadowMode alone
	// (not a rule's shadow_mode), where it stays OVER_LIMIT as
	// envoyproxy/ratelimit reports it (unless Config.ShadowStatusOK).
	Shadowed bool
	// Degraded says how the failure policy decided; NotDegraded when the
	// store answered.
	Degraded Degraded
	// Lease names the lease an admitted concurrency limit holds for this
	// descriptor until Engine.Release gives it back (or the limit's window
	// passes). Zero when the status holds none: not a concurrency limit, or
	// the request was denied (a denied request charges nothing).
	Lease uint64

	// Untried: the descriptor is an alternative of a choice group
	// (rules.Rule.Choice) that was not tried, because an earlier one was
	// admitted or a requirement denied the request. Code is OK and
	// CurrentLimit nil: nothing was asked of its counter, nothing charged.
	Untried bool
	// PassedOver: the descriptor is an alternative of a choice group that
	// was over its limit at its try, in a request then admitted with a
	// later alternative — or, when every alternative was over, one that
	// frees later than another (the request waits for the first to free).
	// Code is OVER_LIMIT and Result its denial, but the request is not
	// denied for it (and an edge advertises it no more than a shadowed
	// limit).
	PassedOver bool

	// Skipped, in an answer of Engine.Charge, says why the descriptor's cost
	// was not applied; empty when it was (and always in Check's answers).
	Skipped Skip

	// key is the store key the check used, for Engine.Release (which finds
	// the limit in Rule, and the store in Degraded: see Engine.leaseStore).
	key string
}

// Skip says why Engine.Charge left a descriptor's cost unapplied. It is a
// string so it reads as itself in JSON and logs.
type Skip string

// The reasons a charge skips a descriptor.
const (
	// SkipNoLimit: no limit applies to the descriptor (no rule matches, its
	// rule is switched off, or another matched rule replaces it), so Check
	// charged nothing either.
	SkipNoLimit Skip = "no_limit"
	// SkipUnlimited: the rule is unlimited; it has no counter.
	SkipUnlimited Skip = "unlimited"
	// SkipConcurrency: the rule is a concurrency limit, which counts
	// requests in flight; give its lease back instead (Engine.Release).
	SkipConcurrency Skip = "concurrency"
)

// ChargeRequest settles costs known only after the fact (a response's real
// size, a query's points) on the counters a Check of the same descriptors
// uses: see Engine.Charge.
type ChargeRequest struct {
	// Domain selects the rule file. Required.
	Domain string
	// Descriptors name the counters, as in the Check whose cost is settled.
	// At least one.
	Descriptors []ChargeDescriptor
}

// ChargeDescriptor is one descriptor of a ChargeRequest.
type ChargeDescriptor struct {
	// Entries are matched against the rules as Check matches them; at least
	// one, each with a key.
	Entries []rules.Entry
	// Limit, when set, names the counter of a limit given in the request
	// (as Descriptor.Limit does in Check).
	Limit *LimitOverride
	// Cost is the units to settle: positive charges them (whether or not
	// they fit: they were spent), negative refunds them, zero only reads the
	// state. |Cost| is at most algorithm.MaxExact.
	Cost int64
}

// Response is the decision for a whole request.
type Response struct {
	// OverallCode is CodeOverLimit if any status is, else CodeOK.
	OverallCode Code
	// Statuses has one entry per request descriptor, in request order.
	Statuses []Status
	// DecidedAt is the latest instant, µs since the Unix epoch on the
	// store's clock, at which the store decided one of the request's limits
	// (the greatest sluice.Result.At of the ops it answered); zero when no
	// store clock decided any (no limit matched, the store failed, a
	// deny-list or local-only decision). It places the request in time for
	// the proof harness; nothing decides by it.
	DecidedAt int64
	// Choice names the alternative a request with a choice group
	// (rules.Rule.Choice) was admitted with, the one charged; nil when the
	// request has no alternatives or was denied.
	Choice *Choice
}

// Choice is the alternative of a choice group that a request was admitted
// with: the first, in request order, that admitted together with every
// requirement (first with quota). A gateway routes on it.
type Choice struct {
	// Group is the rules' rate_limit.choice.
	Group string
	// Index is the alternative's place among the group's alternatives of
	// the request, in request order, from 0.
	Index int
	// Descriptor is its index in Request.Descriptors.
	Descriptor int
	// Key and Value are the descriptor's last entry, which names the
	// alternative (model=gpt-4o-mini).
	Key, Value string
}

// Leases reports whether any status of r holds a lease that Engine.Release
// must give back.
func (r *Response) Leases() bool {
	for i := range r.Statuses {
		if r.Statuses[i].Lease != 0 {
			return true
		}
	}
	return false
}
