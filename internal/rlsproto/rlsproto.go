// Package rlsproto converts between Envoy's rate limit service v3 messages
// (envoy.service.ratelimit.v3) and the engine's types (package service), in
// both directions: a server (server/rls, server/api's /json) reads requests
// and writes responses, a client (httplimit/remote) writes requests and
// reads responses. It is the only place that converts between them, so the
// two sides cannot drift apart.
package rlsproto

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// ErrInvalidRequest marks a request that cannot be converted: an empty
// domain, no descriptors, or a limit override one side cannot express.
var ErrInvalidRequest = errors.New("invalid rate limit request")

// Unlimited is limit_remaining for a descriptor whose rule is unlimited, as
// envoyproxy/ratelimit sends it.
const Unlimited = math.MaxUint32

// FromProto converts an envoy RateLimitRequest into a service.Request. It
// validates what envoyproxy/ratelimit validates (and a little more) and
// returns an error wrapping ErrInvalidRequest that names the offending field,
// for example "descriptors[1].entries[0].key: empty". It enforces the
// default service.RequestBounds. It never panics, even on a nil request.
func FromProto(req *rlsv3.RateLimitRequest) (service.Request, error) {
	return FromProtoLimits(req, service.RequestBounds{})
}

// FromProtoLimits is FromProto enforcing lim: a request over one of them is
// refused, before anything is allocated for it, with an error wrapping both
// ErrInvalidRequest and a *service.LimitError that names the limit.
func FromProtoLimits(req *rlsv3.RateLimitRequest, lim service.RequestBounds) (service.Request, error) {
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
	out := service.Request{Domain: req.GetDomain(), Hits: uint64(req.GetHitsAddend())}
	if len(descs) == 1 && len(descs[0].GetEntries()) <= len(oneDescriptor{}.entries) {
		// The common case, one descriptor of a few entries, in one
		// allocation.
		one := new(oneDescriptor)
		out.Descriptors = one.desc[:]
		n := len(descs[0].GetEntries())
		conv, err := descriptorFromProtoInto(descs[0], one.entries[:n:n])
		if err != nil {
			return service.Request{}, fmt.Errorf("%w: descriptors[%d].%w", ErrInvalidRequest, 0, err)
		}
		out.Descriptors[0] = conv
		return out, nil
	}
	out.Descriptors = make([]service.Descriptor, len(descs))
	for i, d := range descs {
		conv, err := descriptorFromProto(d)
		if err != nil {
			return service.Request{}, fmt.Errorf("%w: descriptors[%d].%w", ErrInvalidRequest, i, err)
		}
		out.Descriptors[i] = conv
	}
	return out, nil
}

// descriptorFromProto converts one descriptor. One with no entries, or
// with an entry whose key is empty, is converted as it is: it matches no
// rule, so the engine answers it OK, as envoyproxy/ratelimit does.
// is_negative_hits makes it a refund of its hits (service.Descriptor.Refund).
// oneDescriptor holds the converted descriptor of a one-descriptor request
// of at most two entries (what Envoy sends most).
type oneDescriptor struct {
	desc    [1]service.Descriptor
	entries [2]rules.Entry
}

func descriptorFromProto(d *ratelimitv3.RateLimitDescriptor) (service.Descriptor, error) {
	return descriptorFromProtoInto(d, make([]rules.Entry, len(d.GetEntries())))
}

// descriptorFromProtoInto is descriptorFromProto converting the entries
// into into, of their count.
func descriptorFromProtoInto(d *ratelimitv3.RateLimitDescriptor, into []rules.Entry) (service.Descriptor, error) {
	entries := d.GetEntries()
	var out service.Descriptor
	out.Entries = into
	for j, e := range entries {
		out.Entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	out.Refund = d.GetIsNegativeHits()
	if h := d.GetHitsAddend(); h != nil {
		v := h.GetValue()
		out.Hits = &v
	}
	if l := d.GetLimit(); l != nil {
		unit, ok := unitName(typev3.RateLimitUnit_name, int32(l.GetUnit()))
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

// unitName maps a number of one of envoy's unit enums (names is its _name
// map: type.v3.RateLimitUnit's, or RateLimitResponse.RateLimit.Unit's, which
// adds WEEK) to its rule-file spelling. Both enums spell the units as
// rules.Units does, upper case, so that table is the only one.
func unitName(names map[int32]string, n int32) (string, bool) {
	name, ok := names[n]
	if !ok || n == 0 {
		return "", false
	}
	name = strings.ToLower(name)
	_, known := rules.UnitWindow(name)
	return name, known
}

// responseUnit is the response enum of a rule-file unit name.
func responseUnit(name string) (rlsv3.RateLimitResponse_RateLimit_Unit, bool) {
	v, ok := lowerUnits[name] // rule files spell units in lower case: no copy
	if !ok {
		v, ok = rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(name)]
	}
	return rlsv3.RateLimitResponse_RateLimit_Unit(v), ok && v != 0
}

// lowerUnits is RateLimitResponse_RateLimit_Unit_value by lower-case name.
var lowerUnits = func() map[string]int32 {
	m := make(map[string]int32, len(rlsv3.RateLimitResponse_RateLimit_Unit_value))
	for name, v := range rlsv3.RateLimitResponse_RateLimit_Unit_value {
		m[strings.ToLower(name)] = v
	}
	return m
}()

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
		if u, ok := responseUnit(cl.Unit); ok {
			out.Unit = u
			return
		}
	}
	w := cl.Window
	if w <= 0 {
		return // unit UNKNOWN: nothing better to say
	}
	if w%time.Second == 0 {
		for _, u := range rules.Units() {
			if w%u.Window == 0 {
				out.Unit, _ = responseUnit(u.Name)
				if m := w / u.Window; m != 1 {
					if m > math.MaxUint32 {
						break
					}
					out.UnitMultiplier = wrapperspb.UInt32(uint32(m))
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
// overall_code is resp.OverallCode (a quota-mode status may be OVER_LIMIT in
// an admitted request); when that is unset, OVER_LIMIT if any status is,
// else OK; never UNKNOWN. The
// response carries no response_headers_to_add: the caller adds them (from
// edge.Decision) when configured to. A response with a choice
// (service.Response.Choice) carries it in dynamic_metadata, under
// ChoiceKey (see ChoiceValue); no other dynamic_metadata.
func ToProto(resp service.Response) *rlsv3.RateLimitResponse {
	var one *OneStatus
	if len(resp.Statuses) == 1 {
		one = new(OneStatus)
	}
	return ToProtoIn(one, resp)
}

// ToProtoIn is ToProto building a one-status response in one, which must
// be zero (and not nil for one status), instead of in an allocation of its
// own: for a caller that encodes the response and then zeroes one to use it
// again.
func ToProtoIn(one *OneStatus, resp service.Response) *rlsv3.RateLimitResponse {
	n := len(resp.Statuses)
	var out *rlsv3.RateLimitResponse
	var ptrs []*rlsv3.RateLimitResponse_DescriptorStatus
	var statuses []rlsv3.RateLimitResponse_DescriptorStatus
	var limits []rlsv3.RateLimitResponse_RateLimit
	var resets []durationpb.Duration
	if n == 1 {
		// The common case, one descriptor: every message in one allocation.
		b := one
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
		if resp.OverallCode == 0 && st.Code == rlsv3.RateLimitResponse_OVER_LIMIT {
			out.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	if resp.Choice != nil {
		out.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{ChoiceKey: ChoiceValue(resp.Choice)}}
	}
	return out
}

// ChoiceKey is the dynamic_metadata field that names the alternative a
// request was admitted with (first with quota, rules.Rule.Choice). Envoy's
// rate limit filter keeps dynamic_metadata under its namespace,
// envoy.filters.http.ratelimit, so the chosen value is at the path
// [sluice.choice, <group>, value] there.
const ChoiceKey = "sluice.choice"

// ChoiceValue is c as the value of ChoiceKey: a Struct keyed by the group,
// {"<group>": {"value": "<value>", "key": "<key>", "index": <index>,
// "descriptor": <descriptor>}}: the chosen descriptor's last entry (key and
// value), its place among the group's alternatives (index, from 0) and in
// the request (descriptor, from 0).
func ChoiceValue(c *service.Choice) *structpb.Value {
	return structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		c.Group: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			"value":      structpb.NewStringValue(c.Value),
			"key":        structpb.NewStringValue(c.Key),
			"index":      structpb.NewNumberValue(float64(c.Index)),
			"descriptor": structpb.NewNumberValue(float64(c.Descriptor)),
		}}),
	}})
}

// OneStatus holds every message of a one-status response (ToProtoIn).
type OneStatus struct {
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
// ResetAfter (RetryAfter for a refused one), rounded up to whole seconds when the limit's window is a second
// or longer (envoyproxy/ratelimit reports whole seconds), exact otherwise.
// When the store did not answer (a degraded decision), or denied with
// nothing to wait for (quota 0, cost above capacity), it is the window, as
// envoyproxy/ratelimit answers a denial.
func ResetDuration(s *service.Status) time.Duration {
	d := s.Result.ResetAfter
	if s.Code == service.CodeOverLimit && s.Result.RetryAfter > 0 {
		// A refused request's reset is when it would pass, as RateLimit's t
		// of a refused policy and Retry-After say: for a bucket, the time
		// until it is full again can be many times longer, and a client
		// reading duration_until_reset (httplimit/remote) would wait that.
		d = s.Result.RetryAfter
	}
	w := time.Duration(0)
	if s.CurrentLimit != nil {
		w = s.CurrentLimit.Window
	}
	if d == 0 && (s.Degraded != service.NotDegraded || s.Code == service.CodeOverLimit) {
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

// Request converts a service.Request to Envoy's RateLimitRequest, for a
// client asking a remote server. It returns an error wrapping
// ErrInvalidRequest for what the wire cannot carry (hits above 2³²−1, an
// unknown unit).
func Request(req service.Request) (*rlsv3.RateLimitRequest, error) {
	if req.Hits > math.MaxUint32 {
		return nil, fmt.Errorf("%w: hits %d do not fit the wire's uint32", ErrInvalidRequest, req.Hits)
	}
	out := &rlsv3.RateLimitRequest{Domain: req.Domain, HitsAddend: uint32(req.Hits),
		Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(req.Descriptors))}
	for i, d := range req.Descriptors {
		pd := &ratelimitv3.RateLimitDescriptor{Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, len(d.Entries))}
		for j, e := range d.Entries {
			pd.Entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		if d.Limit != nil {
			u, ok := typev3.RateLimitUnit_value[strings.ToUpper(d.Limit.Unit)]
			if _, known := unitName(typev3.RateLimitUnit_name, u); !ok || !known {
				return nil, fmt.Errorf("%w: descriptor %d: unknown unit %q", ErrInvalidRequest, i, d.Limit.Unit)
			}
			pd.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: typev3.RateLimitUnit(u)}
		}
		if d.Hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.Hits)
		}
		pd.IsNegativeHits = d.Refund
		out.Descriptors[i] = pd
	}
	return out, nil
}

// Response converts Envoy's RateLimitResponse to a service.Response, for a
// client that asked a remote server; n is the number of descriptors asked
// about, which the statuses must match.
//
// The wire carries less than the engine knows: each status has the limit's
// requests_per_unit, unit and name, the remaining count and the time until
// reset, but no algorithm, burst or exact retry time. So Result.Limit is
// requests_per_unit (or the remaining count, when a burst makes that
// larger), a refused status waits duration_until_reset, and a limit of 0
// refuses with sluice.ReasonCostTooHigh (no wait helps). A choice in
// dynamic_metadata (ChoiceKey) becomes Response.Choice, and then an
// OVER_LIMIT status of an admitted response is an alternative passed over
// (service.Status.PassedOver).
func Response(in *rlsv3.RateLimitResponse, n int) (service.Response, error) {
	if len(in.GetStatuses()) != n {
		return service.Response{}, fmt.Errorf("rlsproto: %d statuses for %d descriptors", len(in.GetStatuses()), n)
	}
	out := service.Response{OverallCode: service.CodeOK, Statuses: make([]service.Status, n)}
	if in.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		out.OverallCode = service.CodeOverLimit
	}
	for i, s := range in.GetStatuses() {
		st := &out.Statuses[i]
		st.Code = service.CodeOK
		over := s.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if over {
			st.Code = service.CodeOverLimit
		}
		cl := s.GetCurrentLimit()
		if cl == nil {
			st.Unlimited = !over && s.GetLimitRemaining() == math.MaxUint32
			continue
		}
		unit, ok := unitName(rlsv3.RateLimitResponse_RateLimit_Unit_name, int32(cl.GetUnit()))
		window, _ := rules.UnitWindow(unit)
		if !ok {
			unit, window = "", 0
		}
		if m := cl.GetUnitMultiplier(); m != nil && m.GetValue() > 1 && window > 0 {
			window *= time.Duration(m.GetValue())
		}
		st.CurrentLimit = &service.CurrentLimit{Name: cl.GetName(), RequestsPerUnit: cl.GetRequestsPerUnit(), Unit: unit, Window: window}
		reset := s.GetDurationUntilReset().AsDuration()
		if reset < 0 {
			reset = 0
		}
		st.Result = sluice.Result{
			Allowed: !over,
			// A bucket with a burst above its rate reports more remaining
			// than requests_per_unit; q must not be below r.
			Limit:      max(int64(cl.GetRequestsPerUnit()), int64(s.GetLimitRemaining())),
			Remaining:  int64(s.GetLimitRemaining()),
			ResetAfter: reset,
		}
		if over {
			st.Result.Reason = sluice.ReasonLimited
			st.Result.RetryAfter = reset
			if cl.GetRequestsPerUnit() == 0 {
				st.Result.Reason = sluice.ReasonCostTooHigh
				st.Result.RetryAfter = 0
			}
		}
	}
	if out.Choice = choiceOf(in, n); out.Choice != nil && out.OverallCode == service.CodeOK {
		for i := range out.Statuses {
			out.Statuses[i].PassedOver = out.Statuses[i].Code == service.CodeOverLimit
		}
	}
	return out, nil
}

// choiceOf reads ChoiceValue back from in's dynamic_metadata: the one
// group it names, or nil when there is none or it is not that shape (a
// descriptor index outside the n asked about included).
func choiceOf(in *rlsv3.RateLimitResponse, n int) *service.Choice {
	groups := in.GetDynamicMetadata().GetFields()[ChoiceKey].GetStructValue().GetFields()
	if len(groups) != 1 {
		return nil
	}
	for g, v := range groups {
		f := v.GetStructValue().GetFields()
		value, vok := f["value"].GetKind().(*structpb.Value_StringValue)
		key, kok := f["key"].GetKind().(*structpb.Value_StringValue)
		index, iok := f["index"].GetKind().(*structpb.Value_NumberValue)
		desc, dok := f["descriptor"].GetKind().(*structpb.Value_NumberValue)
		if !vok || !kok || !iok || !dok || index.NumberValue < 0 || index.NumberValue >= float64(n) ||
			desc.NumberValue < 0 || desc.NumberValue >= float64(n) {
			return nil
		}
		return &service.Choice{Group: g, Value: value.StringValue, Key: key.StringValue, Index: int(index.NumberValue), Descriptor: int(desc.NumberValue)}
	}
	return nil
}
