// Package edge is the one mapping from a decision of the engine
// (service.Response) to what an HTTP edge sends: the RateLimit and
// RateLimit-Policy members, the status, Retry-After and the problem+json
// body. The gRPC server's response_headers_to_add, the HTTP API and the
// middleware all render through Decision, so they cannot disagree. The
// fields themselves are rendered by package headers, which stays free of the
// engine so that clients can use it alone.
package edge

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/stack"
)

// Decision is how one rate-limit decision appears on the wire: the members
// of RateLimit and RateLimit-Policy, the HTTP status, Retry-After and the
// problem+json body. It is the one mapping every transport uses (the gRPC
// server's response_headers_to_add, the HTTP API, the middleware), so they
// cannot disagree.
//
// Build one with Add (a service.Response) and AddLimit (a limit the caller
// applied itself); Reset empties it for reuse. The zero value is an empty
// decision that lets the request through. A Decision is not safe for
// concurrent use.
type Decision struct {
	// Status is 0 when the request may proceed, 429 when a policy refused
	// it, 503 when a limit could not be decided and fails closed (or the
	// caller sheds load).
	Status int
	// Reason is "" when the request may proceed, else headers.ReasonLimited,
	// headers.ReasonCostTooHigh or headers.ReasonUnavailable.
	Reason string
	// RetryAfter is the Retry-After in whole seconds; 0 sends none (allowed,
	// or a cost no wait can cure).
	RetryAfter int64
	// Delay is how long a request a leaky_bucket admitted must wait before
	// proceeding: the longest Delay of its limits.
	Delay time.Duration
	// Limits are the RateLimit members, one per advertised policy.
	Limits []headers.ServiceLimit
	// Policies are the RateLimit-Policy members, Policies[i] for Limits[i].
	Policies []headers.Policy
	// Rules[i] is the rule behind Policies[i], nil when there is none; it
	// lets a caller cache the rendered member per rule.
	Rules []*rules.Rule
	// Violated names the policies that refused the request.
	Violated []string
	// Legacy is the most restrictive policy's result, for the X-RateLimit-*
	// fields: the first that refused, else the one with least remaining. Nil
	// when no policy is advertised.
	Legacy *sluice.Result

	legacyRemaining int64
	storeDown       bool
	costTooHigh     bool
	penalty         bool // a refused limit is a penalty (reason penalty)
	denyList        bool // an entry is on a deny list (reason deny_list)
	unknownModel    bool // a money budget prices no such model (reason unknown_model)
}

// Reset empties d, keeping its slices' capacity.
func (d *Decision) Reset() {
	clear(d.Limits)
	clear(d.Policies)
	clear(d.Rules)
	clear(d.Violated)
	*d = Decision{Limits: d.Limits[:0], Policies: d.Policies[:0], Rules: d.Rules[:0], Violated: d.Violated[:0]}
}

// Add adds the statuses of an engine's answer. A status is advertised when a
// limit applied and the store (or the local fallback) decided it: no rule,
// unlimited rules, shadow-mode rules, limits whose store failed open and
// alternatives passed over (service.Status.PassedOver) are left out. A limit that failed closed makes the decision a 503 unless a
// policy refused the request.
func (d *Decision) Add(resp *service.Response) {
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		switch {
		case st.Rule != nil && st.Rule.ShadowMode, st.Shadowed:
			continue // counted, never enforced, not advertised
		case st.PassedOver:
			continue // an alternative over, the request admitted with another
		case st.Code == service.CodeOverLimit && st.Result.Reason == service.ReasonDenyList:
			d.denyList = true
			d.Violated = append(d.Violated, headers.ReasonDenyList)
			continue
		case st.Code == service.CodeOverLimit && st.Result.Reason == service.ReasonUnknownModel:
			d.unknownModel = true
			d.Violated = append(d.Violated, headers.ReasonUnknownModel)
			continue
		case st.Degraded == service.FailedClosed && st.Code == service.CodeOverLimit:
			d.storeDown = true
			continue
		case st.CurrentLimit == nil || st.Unlimited || st.Result == (sluice.Result{}):
			continue // no rule, unlimited, or no store answer (failed open)
		}
		window := st.CurrentLimit.Window
		unit := headers.Requests
		if st.Rule != nil && st.Rule.Limit.Algorithm == sluice.Concurrency {
			unit, window = headers.ConcurrentRequests, 0
		}
		quota := st.Result.Limit
		if quota <= 0 {
			quota = int64(st.CurrentLimit.RequestsPerUnit)
		}
		window = burstWindow(st, quota, window)
		d.add(StatusName(st), quota, window, unit, st.Rule, &st.Result, st.Code == service.CodeOverLimit)
	}
	d.settle()
}

// burstWindow is the window to publish with quota for a bucket algorithm,
// whose Result.Limit is its burst, not its rate's quota: the time the rate
// takes to refill the whole burst (burst ÷ rate), so that q/w is the rate a
// generic client reads, and r ≤ q still holds. Otherwise it is window.
func burstWindow(st *service.Status, quota int64, window time.Duration) time.Duration {
	rate := int64(st.CurrentLimit.RequestsPerUnit)
	if st.Rule == nil || !stack.HasBurst(st.Rule.Limit.Algorithm) || rate <= 0 || quota == rate || window <= 0 {
		return window
	}
	secs := math.Ceil(float64(quota) * window.Seconds() / float64(rate))
	return time.Duration(min(secs, float64(math.MaxInt64/int64(time.Second))) * float64(time.Second))
}

// AddLimit adds a policy the caller applied itself (the middleware's own
// concurrency limits, say): name (sanitized with headers.PolicyName), its quota and
// window (0 for a concurrency limit, which is advertised with
// qu="concurrent-requests"), and the store's answer. shed answers a refusal
// with 503 (not the client's fault) instead of 429.
func (d *Decision) AddLimit(name string, quota int64, window time.Duration, unit headers.QuotaUnit, res *sluice.Result, shed bool) {
	if shed && !res.Allowed {
		d.storeDown = true // a 503, as for a store that cannot decide
	}
	d.add(headers.PolicyName(name), quota, window, unit, nil, res, !res.Allowed && !shed)
	d.settle()
}

func (d *Decision) add(name string, quota int64, window time.Duration, unit headers.QuotaUnit, r *rules.Rule, res *sluice.Result, refused bool) {
	reset := headers.Seconds(res.ResetAfter)
	switch {
	case !refused:
	case res.Reason == sluice.ReasonCostTooHigh:
		d.costTooHigh = true
	case res.Reason == service.ReasonPenalty:
		d.penalty = true
		reset = max(headers.Seconds(res.RetryAfter), 1)
		d.RetryAfter = max(d.RetryAfter, reset)
	case unit == headers.ConcurrentRequests:
		// A slot comes back when a holder finishes, usually well before
		// its lease would expire.
		d.RetryAfter = max(d.RetryAfter, 1)
	default:
		// t of a refused policy is when this request would pass, the
		// moment Retry-After names.
		reset = max(headers.Seconds(res.RetryAfter), 1)
		d.RetryAfter = max(d.RetryAfter, reset)
	}
	if refused {
		d.Violated = append(d.Violated, name)
	}
	if unit == headers.ConcurrentRequests {
		reset = -1 // no time to name: slots come back as holders finish
	}
	d.Delay = max(d.Delay, res.Delay)
	remaining := max(res.Remaining, 0)
	d.Limits = append(d.Limits, headers.ServiceLimit{Name: name, Remaining: remaining, Reset: reset})
	p := headers.Policy{Name: name, Quota: quota, Unit: unit}
	if unit != headers.ConcurrentRequests {
		p.Window = max(headers.Seconds(window), 1)
	}
	d.Policies = append(d.Policies, p)
	d.Rules = append(d.Rules, r)
	if d.Legacy == nil || (refused && len(d.Violated) == 1) || (len(d.Violated) == 0 && remaining < d.legacyRemaining) {
		d.Legacy, d.legacyRemaining = res, remaining
	}
}

// settle derives Status, Reason and Retry-After from what was added.
func (d *Decision) settle() {
	switch {
	case d.denyList:
		// Refused outright: waiting is pointless.
		d.Status, d.Reason, d.RetryAfter = http.StatusTooManyRequests, headers.ReasonDenyList, 0
	case d.unknownModel:
		d.Status, d.Reason, d.RetryAfter = http.StatusTooManyRequests, headers.ReasonUnknownModel, 0
	case len(d.Violated) > 0 && d.costTooHigh:
		// Some limit can never admit this request: waiting is pointless.
		d.Status, d.Reason, d.RetryAfter = http.StatusTooManyRequests, headers.ReasonCostTooHigh, 0
	case len(d.Violated) > 0 && d.penalty:
		d.Status, d.Reason = http.StatusTooManyRequests, headers.ReasonPenalty
		d.RetryAfter = max(d.RetryAfter, 1)
	case len(d.Violated) > 0:
		d.Status, d.Reason = http.StatusTooManyRequests, headers.ReasonLimited
		d.RetryAfter = max(d.RetryAfter, 1)
	case d.storeDown:
		d.Status, d.Reason, d.RetryAfter = http.StatusServiceUnavailable, headers.ReasonUnavailable, 1
	}
}

// Refuse makes d a 503 for a reason outside the limits (the rate-limit
// service cannot be asked, the request would wait too long, the server is
// shedding load): Retry-After is retryAfter seconds (at least 1).
func (d *Decision) Refuse(retryAfter int64) {
	d.Status, d.Reason, d.RetryAfter = http.StatusServiceUnavailable, headers.ReasonUnavailable, max(retryAfter, 1)
}

// StatusName is the policy name of an engine status: the rule's name, else
// its ID (the path of keys in the rule file), else the name of the limit
// (from a remote server), else per_<unit>, made printable ASCII by
// headers.PolicyName.
func StatusName(st *service.Status) string {
	switch {
	case st.Rule != nil && st.Rule.Name != "":
		return headers.PolicyName(st.Rule.Name)
	case st.Rule != nil:
		return headers.PolicyName(st.Rule.ID)
	case st.CurrentLimit != nil && st.CurrentLimit.Name != "":
		return headers.PolicyName(st.CurrentLimit.Name)
	case st.CurrentLimit != nil && st.CurrentLimit.Unit != "":
		return "per_" + headers.PolicyName(st.CurrentLimit.Unit)
	}
	return "limit"
}

// Field is one header field to send.
type Field struct{ Key, Value string }

// Fields returns the fields of d: RateLimit-Policy and RateLimit when any
// policy is advertised, Retry-After when Retry-After is set. It is what a
// transport without an http.Header (Envoy's response_headers_to_add) sends.
func (d *Decision) Fields() []Field {
	var out []Field
	if len(d.Limits) > 0 {
		policy, err1 := headers.FormatPolicies(d.Policies...)
		limit, err2 := headers.FormatServiceLimits(d.Limits...)
		if err1 == nil && err2 == nil { // names are sanitized and numbers bounded
			out = append(out, Field{headers.RateLimitPolicy, policy}, Field{headers.RateLimit, limit})
		}
	}
	if d.RetryAfter > 0 {
		out = append(out, Field{headers.RetryAfter, strconv.FormatInt(d.RetryAfter, 10)})
	}
	if d.Reason == headers.ReasonPenalty || d.Reason == headers.ReasonDenyList || d.Reason == headers.ReasonUnknownModel {
		out = append(out, Field{headers.SluiceReason, d.Reason})
	}
	return out
}

// Write sets the fields of d on h (see Fields).
func (d *Decision) Write(h http.Header) {
	for _, f := range d.Fields() {
		h[http.CanonicalHeaderKey(f.Key)] = []string{f.Value}
	}
}

// Problem returns the problem+json body of a refused decision: quota-exceeded
// with the violated policies and the reason for a 429, about:blank for a 503.
// detail may be "" for the default text.
func (d *Decision) Problem(detail string) headers.Problem {
	if d.Status == http.StatusTooManyRequests {
		if detail == "" && d.Reason == headers.ReasonCostTooHigh {
			detail = "the request costs more than the quota can ever admit"
		}
		p := headers.QuotaExceeded(d.Violated, detail)
		p.Reason = d.Reason
		return p
	}
	p := headers.Unavailable(detail)
	p.Reason = headers.ReasonUnavailable
	return p
}
