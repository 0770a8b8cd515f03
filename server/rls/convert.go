package rls

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// ErrInvalidRequest marks a RateLimitRequest that FromProto rejects: an empty
// domain, no descriptors, a descriptor without entries, an entry with an
// empty key, or a limit override Sluice cannot express.
var ErrInvalidRequest = errors.New("invalid rate limit request")

// Unlimited is limit_remaining for a descriptor whose rule is unlimited, as
// envoyproxy/ratelimit sends it.
const Unlimited = math.MaxUint32

// FromProto converts an envoy RateLimitRequest into a service.Request. It
// validates what envoyproxy/ratelimit validates (and a little more) and
// returns an error wrapping ErrInvalidRequest that names the offending field,
// for example "descriptors[1].entries[0].key: empty". It enforces the
// default service.Limits. It never panics, even on a nil request.
func FromProto(req *rlsv3.RateLimitRequest) (service.Request, error) {
	return FromProtoLimits(req, service.Limits{})
}

// FromProtoLimits is FromProto enforcing lim: a request over one of them is
// refused, before anything is allocated for it, with an error wrapping both
// ErrInvalidRequest and a *service.LimitError that names the limit.
func FromProtoLimits(req *rlsv3.RateLimitRequest, lim service.Limits) (service.Request, error) {
	if req.GetDomain() == "" {
		return service.Request{}, fmt.Errorf("%w: domain: empty", ErrInvalidRequest)
	}
	if err := lim.CheckDomain(req.GetDomain()); err != nil {
		return service.Request{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return service.Request{}, fmt.Errorf("%w: descriptors: none given", ErrInvalidRequest)
	}
	if err := lim.CheckCount(len(descs)); err != nil {
		return service.Request{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	for i, d := range descs {
		es := d.GetEntries()
		if err := lim.CheckEntries(i, len(es), func(j int) (string, string) { return es[j].GetKey(), es[j].GetValue() }); err != nil {
			return service.Request{}, fmt.Errorf("%w: %w", ErrInvalidRequest, err)
		}
	}
	out := service.Request{
		Domain:      req.GetDomain(),
		Hits:        uint64(req.GetHitsAddend()),
		Descriptors: make([]service.Descriptor, len(descs)),
	}
	for i, d := range descs {
		conv, err := descriptorFromProto(d)
		if err != nil {
			return service.Request{}, fmt.Errorf("%w: descriptors[%d].%w", ErrInvalidRequest, i, err)
		}
		out.Descriptors[i] = conv
	}
	return out, nil
}

func descriptorFromProto(d *ratelimitv3.RateLimitDescriptor) (service.Descriptor, error) {
	entries := d.GetEntries()
	if len(entries) == 0 {
		return service.Descriptor{}, errors.New("entries: none given")
	}
	var out service.Descriptor
	out.Entries = make([]rules.Entry, len(entries))
	for j, e := range entries {
		if e.GetKey() == "" {
			return service.Descriptor{}, fmt.Errorf("entries[%d].key: empty", j)
		}
		out.Entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	if d.GetIsNegativeHits() {
		return service.Descriptor{}, errors.New("is_negative_hits: not supported (Sluice never refunds through the check API)")
	}
	if h := d.GetHitsAddend(); h != nil {
		v := h.GetValue()
		out.Hits = &v
	}
	if l := d.GetLimit(); l != nil {
		unit, ok := unitName(l.GetUnit())
		if !ok {
			return service.Descriptor{}, fmt.Errorf("limit.unit: %v is not a unit Sluice knows", l.GetUnit())
		}
		if m := l.GetUnitMultiplier(); m != nil && m.GetValue() != 1 {
			return service.Descriptor{}, fmt.Errorf("limit.unit_multiplier: %d is not supported (only 1)", m.GetValue())
		}
		out.Limit = &service.LimitOverride{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: unit}
	}
	return out, nil
}

// unitName maps envoy's RateLimitUnit to the rule-file spelling.
func unitName(u typev3.RateLimitUnit) (string, bool) {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return "second", true
	case typev3.RateLimitUnit_MINUTE:
		return "minute", true
	case typev3.RateLimitUnit_HOUR:
		return "hour", true
	case typev3.RateLimitUnit_DAY:
		return "day", true
	case typev3.RateLimitUnit_MONTH:
		return "month", true
	case typev3.RateLimitUnit_YEAR:
		return "year", true
	}
	return "", false
}

// envoy units, longest first, with their lengths as envoyproxy/ratelimit
// counts them (month 30 days, year 365 days).
var units = []struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	name string
	d    time.Duration
}{
	{rlsv3.RateLimitResponse_RateLimit_YEAR, "year", 365 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MONTH, "month", 30 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_WEEK, "week", 7 * 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_DAY, "day", 24 * time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_HOUR, "hour", time.Hour},
	{rlsv3.RateLimitResponse_RateLimit_MINUTE, "minute", time.Minute},
	{rlsv3.RateLimitResponse_RateLimit_SECOND, "second", time.Second},
}

// CurrentLimitProto renders the limit that applied to a descriptor as envoy's
// RateLimit message. A rule written with an envoy unit keeps it. A rule
// written with Sluice's window extension gets the longest unit that divides
// the window exactly, with unit_multiplier for the rest (90s → 90 × SECOND,
// 2h → 2 × HOUR). A window of less than a second, or not a whole number of
// seconds, has no envoy spelling: it is sent as SECOND with requests_per_unit
// scaled to the rate per second (rounded down, at least 1 when the quota is
// not zero) so that a client computing a rate gets it right.
func CurrentLimitProto(cl *service.CurrentLimit) *rlsv3.RateLimitResponse_RateLimit {
	if cl == nil {
		return nil
	}
	out := &rlsv3.RateLimitResponse_RateLimit{}
	fillCurrentLimit(out, cl)
	return out
}

// fillCurrentLimit sets out (zero) from cl, as CurrentLimitProto documents.
func fillCurrentLimit(out *rlsv3.RateLimitResponse_RateLimit, cl *service.CurrentLimit) {
	out.Name, out.RequestsPerUnit = cl.Name, cl.RequestsPerUnit
	if cl.Unit != "" {
		for _, u := range units {
			if strings.EqualFold(u.name, cl.Unit) {
				out.Unit = u.unit
				return
			}
		}
	}
	w := cl.Window
	if w <= 0 {
		return // unit UNKNOWN: nothing better to say
	}
	if w%time.Second == 0 {
		for _, u := range units {
			if w%u.d == 0 {
				out.Unit = u.unit
				if m := w / u.d; m != 1 {
					if m > math.MaxUint32 {
						break
					}
					out.UnitMultiplier = wrapU32(uint32(m))
				}
				return
			}
		}
	}
	out.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	perSec := float64(cl.RequestsPerUnit) * float64(time.Second) / float64(w)
	switch {
	case perSec >= math.MaxUint32:
		out.RequestsPerUnit = math.MaxUint32
	case perSec < 1 && cl.RequestsPerUnit > 0:
		out.RequestsPerUnit = 1
	default:
		out.RequestsPerUnit = uint32(perSec)
	}
}

// ResponseOptions says what ToProto adds beyond the decision itself.
type ResponseOptions struct {
	// Headers adds response_headers_to_add: RateLimit and RateLimit-Policy
	// (draft-ietf-httpapi-ratelimit-headers-10) for the most restrictive
	// limited descriptor, and Retry-After when the request is over limit.
	Headers bool
}

// ToProto renders a service.Response the way envoyproxy/ratelimit fills its
// RateLimitResponse:
//   - no rule matched: OK, no current_limit, limit_remaining 0, no
//     duration_until_reset;
//   - unlimited: OK, no current_limit, limit_remaining 4294967295;
//   - limited: current_limit, limit_remaining (0 when over limit) and
//     duration_until_reset, the time until the limit's quota is fully back
//     (for fixed_window, the end of the window, as envoy's), rounded up to
//     whole seconds for windows of a second or more, as envoy's;
//   - shadow mode: code OK, the remaining the store reported.
//
// overall_code is OVER_LIMIT if any status is, else OK; never UNKNOWN.
func ToProto(resp service.Response, opts ResponseOptions) *rlsv3.RateLimitResponse {
	n := len(resp.Statuses)
	var out *rlsv3.RateLimitResponse
	var ptrs []*rlsv3.RateLimitResponse_DescriptorStatus
	var statuses []rlsv3.RateLimitResponse_DescriptorStatus
	var limits []rlsv3.RateLimitResponse_RateLimit
	var resets []durationpb.Duration
	if n == 1 {
		// The common case, one descriptor: every message in one allocation.
		b := new(oneStatus)
		out, ptrs, statuses, limits, resets = &b.resp, b.ptrs[:], b.status[:], b.limit[:], b.reset[:]
	} else {
		out = new(rlsv3.RateLimitResponse)
		ptrs = make([]*rlsv3.RateLimitResponse_DescriptorStatus, n)
		statuses = make([]rlsv3.RateLimitResponse_DescriptorStatus, n)
		limits = make([]rlsv3.RateLimitResponse_RateLimit, n)
		resets = make([]durationpb.Duration, n)
	}
	out.OverallCode = codeProto(resp.OverallCode)
	out.Statuses = ptrs
	for i := range resp.Statuses {
		st := &statuses[i]
		fillStatus(st, &limits[i], &resets[i], &resp.Statuses[i])
		ptrs[i] = st
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if opts.Headers {
		for _, h := range Headers(resp) {
			out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Key, Value: h.Value})
		}
	}
	return out
}

// oneStatus holds every message of a one-descriptor response.
type oneStatus struct {
	resp   rlsv3.RateLimitResponse
	ptrs   [1]*rlsv3.RateLimitResponse_DescriptorStatus
	status [1]rlsv3.RateLimitResponse_DescriptorStatus
	limit  [1]rlsv3.RateLimitResponse_RateLimit
	reset  [1]durationpb.Duration
}

func codeProto(c service.Code) rlsv3.RateLimitResponse_Code {
	if c == service.CodeOverLimit {
		return rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return rlsv3.RateLimitResponse_OK
}

// fillStatus sets out (zero) from s, using limit and reset (zero) as its
// current_limit and duration_until_reset when it has them.
func fillStatus(out *rlsv3.RateLimitResponse_DescriptorStatus, limit *rlsv3.RateLimitResponse_RateLimit, reset *durationpb.Duration, s *service.Status) {
	out.Code = codeProto(s.Code)
	switch {
	case s.Unlimited:
		out.LimitRemaining = Unlimited
		return
	case s.CurrentLimit == nil:
		return
	}
	fillCurrentLimit(limit, s.CurrentLimit)
	out.CurrentLimit = limit
	if s.Code == service.CodeOK {
		out.LimitRemaining = clampU32(s.Result.Remaining)
	}
	d := ResetDuration(s)
	reset.Seconds, reset.Nanos = int64(d/time.Second), int32(d%time.Second)
	out.DurationUntilReset = reset
}

// ResetDuration is duration_until_reset for a limited status: the store's
// ResetAfter, rounded up to whole seconds when the limit's window is a second
// or longer (envoyproxy/ratelimit reports whole seconds), exact otherwise.
// When the store did not answer (a degraded decision), or denied with
// nothing to wait for (quota 0, cost above capacity), it is the window.
func ResetDuration(s *service.Status) time.Duration {
	d := s.Result.ResetAfter
	w := time.Duration(0)
	if s.CurrentLimit != nil {
		w = s.CurrentLimit.Window
	}
	if d == 0 && (s.Degraded != "" || s.Code == service.CodeOverLimit) {
		// The store did not answer, or the limit denies outright (quota 0,
		// a cost above capacity): nothing will come back sooner than a
		// window, which is what envoyproxy/ratelimit would say at most.
		d = w
	}
	if w >= time.Second || w == 0 {
		d = ceilSeconds(d)
	}
	return d
}

func ceilSeconds(d time.Duration) time.Duration {
	if r := d % time.Second; r != 0 {
		d += time.Second - r
	}
	return d
}

func clampU32(n int64) uint32 {
	switch {
	case n <= 0:
		return 0
	case n >= math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(n)
}

// Header is one response header to add.
type Header struct{ Key, Value string }

// Headers returns the draft-10 RateLimit and RateLimit-Policy fields for the
// descriptor closest to its limit (the first over-limit one, else the one
// with the least remaining), and Retry-After (whole seconds, rounded up, at
// least 1) when the response is over limit. It returns nil when no descriptor
// was limited by a rule (no match or unlimited).
func Headers(resp service.Response) []Header {
	best := -1
	for i := range resp.Statuses {
		s := &resp.Statuses[i]
		if s.CurrentLimit == nil || s.Unlimited {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &resp.Statuses[best]
		if (s.Code == service.CodeOverLimit) != (b.Code == service.CodeOverLimit) {
			if s.Code == service.CodeOverLimit {
				best = i
			}
			continue
		}
		if s.Code != service.CodeOverLimit && s.Result.Remaining < b.Result.Remaining {
			best = i
		}
	}
	if best < 0 {
		return nil
	}
	s := &resp.Statuses[best]
	name := policyName(s)
	quota := s.Result.Limit
	if quota <= 0 {
		quota = int64(s.CurrentLimit.RequestsPerUnit)
	}
	window := int64(ceilSeconds(s.CurrentLimit.Window) / time.Second)
	if window < 1 {
		window = 1
	}
	remaining := int64(0)
	if s.Code == service.CodeOK {
		remaining = max(s.Result.Remaining, 0)
	}
	reset := int64(ceilSeconds(ResetDuration(s)) / time.Second)
	hs := []Header{
		{"RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=%d", name, quota, window)},
		{"RateLimit", fmt.Sprintf("%s;r=%d;t=%d", name, remaining, reset)},
	}
	if resp.OverallCode == service.CodeOverLimit {
		retry := s.Result.RetryAfter
		if retry <= 0 {
			retry = ResetDuration(s)
		}
		secs := int64(ceilSeconds(retry) / time.Second)
		if secs < 1 {
			secs = 1
		}
		hs = append(hs, Header{"Retry-After", strconv.FormatInt(secs, 10)})
	}
	return hs
}

// policyName is the draft-10 policy name of a status: the rule's name, else
// its ID, as a Structured Fields String (printable ASCII, quoted, with \ and
// " escaped; anything else dropped).
func policyName(s *service.Status) string {
	n := s.CurrentLimit.Name
	if n == "" && s.Rule != nil {
		n = s.Rule.ID
	}
	if n == "" {
		n = "default"
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(n); i++ {
		c := n[i]
		if c < 0x20 || c > 0x7e {
			continue
		}
		if c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}

func wrapU32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }
