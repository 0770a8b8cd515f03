package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/headers/edge"
	"github.com/sluice-rl/sluice/internal/strictjson"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/stack"
)

// CheckRequest is the body of POST /v1/check.
//
//	{"domain": "edge",
//	 "descriptors": [{"entries": [{"key": "remote_address", "value": "1.2.3.4"}]}],
//	 "hits": 1}
type CheckRequest struct {
	// Domain selects the rule file. Required.
	Domain string `json:"domain"`
	// Descriptors are the things to limit, each matched on its own. At
	// least one.
	Descriptors []CheckDescriptor `json:"descriptors"`
	// Hits is what each descriptor costs unless it says otherwise; absent
	// means 1, and 0 looks without charging (as a descriptor's own 0 does).
	Hits *uint64 `json:"hits,omitempty"`
}

// CheckDescriptor is one descriptor of a CheckRequest.
type CheckDescriptor struct {
	// Entries are matched level by level against the rules. At least one,
	// each with a non-empty key.
	Entries []Entry `json:"entries"`
	// Hits, when present, overrides CheckRequest.Hits for this descriptor;
	// 0 checks without charging.
	Hits *uint64 `json:"hits,omitempty"`
	// Limit, when present, is used instead of the rule files' limit: a
	// rules.Spec of requests_per_unit and unit (rules.RequestLimit).
	Limit *rules.Spec `json:"limit,omitempty"`
}

// Entry is one key/value pair.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// CheckResponse is the body of a 200 answer to POST /v1/check.
type CheckResponse struct {
	// Allowed is false when any descriptor is over its limit.
	Allowed bool `json:"allowed"`
	// Code is "OK" or "OVER_LIMIT".
	Code string `json:"code"`
	// Reason says why a request is not allowed: "limited" (retry after the
	// statuses' retry_after_ms), "cost_too_high" (a limit can never admit
	// this cost: do not retry it), "unavailable" (a limit's store is down
	// and it fails closed) or "unknown_model" (a money budget applies and
	// the price table prices no such model: do not retry it). Absent when
	// allowed.
	Reason string `json:"reason,omitempty"`
	// Statuses has one entry per request descriptor, in request order.
	Statuses []CheckStatus `json:"statuses"`
	// Choice names, by choice group (rate_limit.choice), the alternative
	// the request was admitted with and charged (first with quota); absent
	// when the request has no alternatives or was denied.
	Choice map[string]ChoiceJSON `json:"choice,omitempty"`
}

// ChoiceJSON is the alternative of a choice group a request was admitted
// with: its descriptor's last entry (value, key), its place among the
// group's alternatives (index) and among the request's descriptors
// (descriptor), each from 0.
type ChoiceJSON struct {
	Value      string `json:"value"`
	Key        string `json:"key"`
	Index      int    `json:"index"`
	Descriptor int    `json:"descriptor"`
}

// CheckStatus is the decision for one descriptor. Durations are whole
// milliseconds, rounded up.
type CheckStatus struct {
	// Code is "OK" or "OVER_LIMIT".
	Code string `json:"code"`
	// Rule is the ID of the rule that matched ("tenant=acme.user"); absent
	// when none did or the limit came from the request.
	Rule string `json:"rule,omitempty"`
	// Limit is the limit that applied; absent when no rule matched.
	Limit *LimitJSON `json:"limit,omitempty"`
	// Unlimited: the matching rule is unlimited.
	Unlimited bool `json:"unlimited,omitempty"`
	// Reason says why the status is OVER_LIMIT: "limited", "cost_too_high",
	// "unavailable" or "unknown_model" (see CheckResponse.Reason). Absent
	// when OK.
	Reason string `json:"reason,omitempty"`
	// Remaining is how many more hits the limit admits now. Present exactly
	// when Limit is (a limit applied); no rule and unlimited rules have none.
	Remaining int64 `json:"remaining,omitempty"`
	// ResetAfterMs: time until the full quota is back. Present exactly when
	// Limit is.
	ResetAfterMs int64 `json:"reset_after_ms,omitempty"`
	// RetryAfterMs: time until the same request would be allowed (over limit
	// only, and never for cost_too_high, which no wait cures).
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// DelayMs: for leaky_bucket, how long the caller should wait before
	// proceeding.
	DelayMs int64 `json:"delay_ms,omitempty"`
	// Shadowed: the limit denied, but its rule is in shadow mode.
	Shadowed bool `json:"shadowed,omitempty"`
	// Degraded says how the failure policy decided when the store failed:
	// "failed_open", "failed_closed" or "local".
	Degraded string `json:"degraded,omitempty"`
	// Lease names the slot an admitted concurrency limit holds; give it back
	// with POST /v1/release when the work is done (else it is freed when the
	// limit's window passes). Absent when the status holds none.
	Lease uint64 `json:"lease,omitempty"`
	// Untried: the descriptor is an alternative of a choice group that was
	// not tried (an earlier one was admitted, or a requirement denied the
	// request): nothing was asked of its counter, so it has no limit.
	Untried bool `json:"untried,omitempty"`
	// PassedOver: the descriptor is an alternative of a choice group that
	// was over its limit at its try (code OVER_LIMIT, with its reason and
	// retry_after_ms), in a request admitted with a later alternative: the
	// request is allowed all the same.
	PassedOver bool `json:"passed_over,omitempty"`
}

// MarshalJSON writes remaining and reset_after_ms, zero or not, exactly when
// a limit applied and its counter was read, so that "remaining": 0 always
// means none left. A failed_open or failed_closed status read no counter
// (the store failed): both are absent, not 0.
func (s CheckStatus) MarshalJSON() ([]byte, error) {
	type plain CheckStatus // without this method
	if s.Limit == nil || s.Degraded == string(service.FailedOpen) || s.Degraded == string(service.FailedClosed) {
		p := plain(s)
		p.Remaining, p.ResetAfterMs = 0, 0 // omitted: unknown
		return json.Marshal(p)
	}
	return json.Marshal(struct {
		plain
		Remaining    int64 `json:"remaining"`
		ResetAfterMs int64 `json:"reset_after_ms"`
	}{plain(s), s.Remaining, s.ResetAfterMs})
}

// ReleaseRequest is the body of POST /v1/release: the check's request as it
// was sent (its hits are ignored) and the leases its answer named.
//
//	{"domain": "edge",
//	 "descriptors": [{"entries": [{"key": "tenant", "value": "acme"}]}],
//	 "leases": [42]}
type ReleaseRequest struct {
	CheckRequest
	// Leases has one entry per descriptor, in order: the lease of its
	// status, or 0 for none.
	Leases []uint64 `json:"leases"`
}

// LimitJSON describes a limit.
type LimitJSON struct {
	Name            string `json:"name,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	// Unit is the envoy unit, absent when the rule used a window.
	Unit string `json:"unit,omitempty"`
	// WindowMs is the limit's window.
	WindowMs int64 `json:"window_ms"`
	// Algorithm is the algorithm deciding it (when a rule matched).
	Algorithm string `json:"algorithm,omitempty"`
}

// DecodeCheckRequest reads one CheckRequest from r strictly: unknown fields,
// trailing data and wrong types are errors, and the request must satisfy
// what CheckRequest documents and the default service.RequestBounds. The error says
// which field is wrong, in the style "descriptors[0].entries[1].key: empty".
// It never panics.
func DecodeCheckRequest(r io.Reader) (service.Request, error) {
	return decodeCheck(r, service.RequestBounds{})
}

func decodeCheck(r io.Reader, lim service.RequestBounds) (service.Request, error) {
	b, err := readBody(r)
	if err != nil {
		return service.Request{}, fmt.Errorf("body: %w", err)
	}
	return decodeCheckBytes(b, lim)
}

// decodeCheckBytes is decodeCheck of a body already read.
func decodeCheckBytes(b []byte, lim service.RequestBounds) (service.Request, error) {
	var req CheckRequest
	if err := decodeBytes(b, &req, lim); err != nil {
		return service.Request{}, err
	}
	return req.toService(lim)
}

// decodeOne decodes exactly one JSON value from r into v, strictly, in
// one pass (strictjson): unknown fields, members named twice in one object
// (encoding/json would keep the last), nesting deeper than
// strictjson.MaxDepth, invalid UTF-8, trailing data and wrong types are
// errors naming the field; every unknown or repeated member is named at
// once. Arrays are refused past lim's counts as they are read (descriptors,
// entries, leases), so what a body decodes into is bounded by lim, not by
// the body's size; the rest of lim is toService's.
func decodeOne(r io.Reader, v any, lim service.RequestBounds) error {
	b, err := readBody(r)
	if err != nil {
		return fmt.Errorf("body: %w", err)
	}
	return decodeBytes(b, v, lim)
}

// decodeBytes is decodeOne of a body already read.
func decodeBytes(b []byte, v any, lim service.RequestBounds) error {
	err := decoderFor(lim).Decode(b, v)
	var se *strictjson.Error
	if !errors.As(err, &se) {
		return err
	}
	if len(se.Problems) == 0 {
		return fmt.Errorf("%s: %s", se.Where(), se.Msg)
	}
	// The members first, then what stopped the decoding, if anything did.
	return fmt.Errorf("body: %s", se.Error())
}

// readBody reads r to its end; the handlers' bytes.Reader is read into
// one buffer of its length, not io.ReadAll's growing ones.
func readBody(r io.Reader) ([]byte, error) {
	if br, ok := r.(*bytes.Reader); ok {
		b := make([]byte, br.Len())
		_, err := io.ReadFull(br, b)
		return b, err
	}
	return io.ReadAll(r)
}

var decoders sync.Map // service.RequestBounds → *strictjson.Decoder

// lastDecoder is the decoder decoderFor returned last, and its bounds: a
// server has one set, and comparing it costs less than hashing it.
var lastDecoder atomic.Pointer[boundDecoder]

type boundDecoder struct {
	lim service.RequestBounds
	dec *strictjson.Decoder
}

// decoderFor returns the decoder bounding arrays by lim (made once per
// distinct lim: a server has one).
func decoderFor(lim service.RequestBounds) *strictjson.Decoder {
	if l := lastDecoder.Load(); l != nil && l.lim == lim {
		return l.dec
	}
	if d, ok := decoders.Load(lim); ok {
		lastDecoder.Store(&boundDecoder{lim, d.(*strictjson.Decoder)})
		return d.(*strictjson.Decoder)
	}
	descs, entries := lim.MaxDescriptors, lim.MaxEntries
	if descs == 0 {
		descs = service.DefaultMaxDescriptors
	}
	if entries == 0 {
		entries = service.DefaultMaxEntries
	}
	// The messages are service.LimitError's, which toService would give.
	over := func(limit string, max int) func(int) string {
		return func(n int) string { return fmt.Sprintf("%d exceeds the limit %s=%d", n, limit, max) }
	}
	d := strictjson.New(
		strictjson.MaxItems[CheckDescriptor](descs, over("max-descriptors", descs)),
		strictjson.MaxItems[ChargeDescriptor](descs, over("max-descriptors", descs)),
		strictjson.MaxItems[Entry](entries, over("max-entries", entries)),
		strictjson.MaxItems[uint64](descs, func(n int) string {
			return fmt.Sprintf("%d given, more than max-descriptors=%d (want one per descriptor)", n, descs)
		}),
	)
	got, _ := decoders.LoadOrStore(lim, d)
	return got.(*strictjson.Decoder)
}

// DecodeReleaseRequest reads one ReleaseRequest from r, as strictly as
// DecodeCheckRequest, and returns the request and its leases. It never
// panics.
func DecodeReleaseRequest(r io.Reader) (service.Request, []uint64, error) {
	return decodeRelease(r, service.RequestBounds{})
}

func decodeRelease(r io.Reader, lim service.RequestBounds) (service.Request, []uint64, error) {
	var req ReleaseRequest
	if err := decodeOne(r, &req, lim); err != nil {
		return service.Request{}, nil, err
	}
	out, err := req.toService(lim)
	if err != nil {
		return service.Request{}, nil, err
	}
	if len(req.Leases) != len(req.Descriptors) {
		return service.Request{}, nil, fmt.Errorf("leases: %d given for %d descriptors, want one per descriptor (0 for none)", len(req.Leases), len(req.Descriptors))
	}
	return out, req.Leases, nil
}

// toService converts and validates r, refusing it (with an error wrapping
// a *service.LimitError) if it is over one of lim before converting it.
func (r *CheckRequest) toService(lim service.RequestBounds) (service.Request, error) {
	out, err := convert(r.Domain, len(r.Descriptors), func(i int) ([]Entry, *rules.Spec) {
		return r.Descriptors[i].Entries, r.Descriptors[i].Limit
	}, lim)
	if err != nil {
		return service.Request{}, err
	}
	if r.Hits != nil {
		// service.Request.Hits 0 means 1 (envoy's hits_addend); an explicit
		// 0 here means look, so it goes to each descriptor that has no
		// hits of its own.
		out.Hits = *r.Hits
	}
	for i, d := range r.Descriptors {
		sd := &out.Descriptors[i]
		sd.Hits = d.Hits
		if sd.Hits == nil && r.Hits != nil && *r.Hits == 0 {
			sd.Hits = r.Hits
		}
	}
	return out, nil
}

// convert checks a request's domain and n descriptors (at(i) gives
// descriptor i's entries and limit) against lim and what the endpoints
// require, and converts them; the caller adds the hits.
func convert(domain string, n int, at func(i int) ([]Entry, *rules.Spec), lim service.RequestBounds) (service.Request, error) {
	if domain == "" {
		return service.Request{}, errors.New("domain: empty")
	}
	if err := lim.CheckDomain(domain); err != nil {
		return service.Request{}, err
	}
	if n == 0 {
		return service.Request{}, errors.New("descriptors: none given")
	}
	if err := lim.CheckCount(n); err != nil {
		return service.Request{}, err
	}
	for i := range n {
		entries, _ := at(i)
		if err := lim.CheckEntries(i, len(entries), func(j int) (string, string) { return entries[j].Key, entries[j].Value }); err != nil {
			return service.Request{}, err
		}
	}
	out := service.Request{Domain: domain, Descriptors: make([]service.Descriptor, n)}
	for i := range n {
		entries, limit := at(i)
		if len(entries) == 0 {
			return service.Request{}, fmt.Errorf("descriptors[%d].entries: none given", i)
		}
		sd := service.Descriptor{Entries: make([]rules.Entry, len(entries))}
		for j, e := range entries {
			if e.Key == "" {
				return service.Request{}, fmt.Errorf("descriptors[%d].entries[%d].key: empty", i, j)
			}
			sd.Entries[j] = rules.Entry{Key: e.Key, Value: e.Value}
		}
		if limit != nil {
			tl, err := limit.TierLimit(rules.RequestLimit)
			if err != nil {
				var se rules.SpecErrors
				if errors.As(err, &se) {
					err = se.At(fmt.Sprintf("descriptors[%d].limit", i))
				}
				return service.Request{}, err
			}
			sd.Limit = &service.LimitOverride{RequestsPerUnit: tl.RequestsPerUnit, Unit: tl.Unit}
		}
		out.Descriptors[i] = sd
	}
	return out, nil
}

// cutTo is s cut to n bytes (on a rune boundary), marked "…" when cut.
func cutTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ChargeRequest is the body of POST /v1/charge: the descriptors of a check
// whose real cost is known only now, with signed hits.
//
//	{"domain": "api",
//	 "descriptors": [{"entries": [{"key": "api_key", "value": "acme"}], "hits": -3}],
//	 "hits": 5}
type ChargeRequest struct {
	// Domain selects the rule file. Required.
	Domain string `json:"domain"`
	// Descriptors name the counters, as the check named them. At least
	// one.
	Descriptors []ChargeDescriptor `json:"descriptors"`
	// Hits is what each descriptor without hits of its own settles:
	// positive charges, negative refunds, 0 reads. Required unless every
	// descriptor has hits.
	Hits *int64 `json:"hits,omitempty"`
}

// ChargeDescriptor is one descriptor of a ChargeRequest.
type ChargeDescriptor struct {
	// Entries, at least one, each with a non-empty key.
	Entries []Entry `json:"entries"`
	// Hits, when present, overrides ChargeRequest.Hits.
	Hits *int64 `json:"hits,omitempty"`
	// Limit names the counter of a limit the check gave in its request.
	Limit *rules.Spec `json:"limit,omitempty"`
}

// ChargeResponse is the body of a 200 answer to POST /v1/charge.
type ChargeResponse struct {
	// Statuses has one entry per request descriptor, in request order.
	Statuses []ChargeStatus `json:"statuses"`
}

// ChargeStatus is one descriptor's counter after the charge. Durations are
// whole milliseconds, rounded up.
type ChargeStatus struct {
	// Rule is the ID of the rule whose counter was charged; absent for a
	// limit given in the request, or when none applies.
	Rule string `json:"rule,omitempty"`
	// Limit is the limit in force; absent when skipped.
	Limit *LimitJSON `json:"limit,omitempty"`
	// Remaining is what the limit admits now (0 in debt). Present, zero or
	// not, exactly when Limit is.
	Remaining *int64 `json:"remaining,omitempty"`
	// ResetAfterMs is the time until the full quota is back. Present
	// exactly when Limit is.
	ResetAfterMs *int64 `json:"reset_after_ms,omitempty"`
	// Skipped says why nothing was charged: "no_limit" (no rule matches),
	// "unlimited", or "concurrency" (release the lease instead).
	Skipped string `json:"skipped,omitempty"`
}

// DecodeChargeRequest reads one ChargeRequest from r, as strictly as
// DecodeCheckRequest, with the default service.RequestBounds. Each descriptor's
// hits must be given (its own, or the top level's) and within ±(2^53−1).
// It never panics.
func DecodeChargeRequest(r io.Reader) (service.ChargeRequest, error) {
	return decodeCharge(r, service.RequestBounds{})
}

func decodeCharge(r io.Reader, lim service.RequestBounds) (service.ChargeRequest, error) {
	var req ChargeRequest
	if err := decodeOne(r, &req, lim); err != nil {
		return service.ChargeRequest{}, err
	}
	conv, err := convert(req.Domain, len(req.Descriptors), func(i int) ([]Entry, *rules.Spec) {
		return req.Descriptors[i].Entries, req.Descriptors[i].Limit
	}, lim)
	if err != nil {
		return service.ChargeRequest{}, err
	}
	if req.Hits != nil && !exact(*req.Hits) {
		return service.ChargeRequest{}, fmt.Errorf("hits: %d is beyond ±%d", *req.Hits, int64(algorithm.MaxExact))
	}
	out := service.ChargeRequest{Domain: conv.Domain, Descriptors: make([]service.ChargeDescriptor, len(conv.Descriptors))}
	for i, d := range req.Descriptors {
		hits := d.Hits
		if hits == nil {
			hits = req.Hits
		}
		switch {
		case hits == nil:
			return service.ChargeRequest{}, fmt.Errorf("descriptors[%d].hits: missing, and no top-level hits (positive charges, negative refunds)", i)
		case !exact(*hits):
			return service.ChargeRequest{}, fmt.Errorf("descriptors[%d].hits: %d is beyond ±%d", i, *hits, int64(algorithm.MaxExact))
		}
		out.Descriptors[i] = service.ChargeDescriptor{Entries: conv.Descriptors[i].Entries, Limit: conv.Descriptors[i].Limit, Cost: *hits}
	}
	return out, nil
}

// exact reports whether n is a cost every store represents: |n| ≤ 2^53−1.
func exact(n int64) bool { return n <= algorithm.MaxExact && n >= -algorithm.MaxExact }

// EncodeChargeResponse renders Engine.Charge's answer as a ChargeResponse.
func EncodeChargeResponse(resp service.Response) ChargeResponse {
	out := ChargeResponse{Statuses: make([]ChargeStatus, len(resp.Statuses))}
	for i := range resp.Statuses {
		s := &resp.Statuses[i]
		cs := ChargeStatus{Skipped: string(s.Skipped)}
		if s.Rule != nil {
			cs.Rule = s.Rule.ID
		}
		if s.Skipped == "" && s.CurrentLimit != nil {
			remaining, reset := max(s.Result.Remaining, 0), ms(s.Result.ResetAfter)
			cs.Limit, cs.Remaining, cs.ResetAfterMs = limitJSON(s), &remaining, &reset
		}
		out.Statuses[i] = cs
	}
	return out
}

// EncodeCheckResponse renders a service.Response as a CheckResponse.
func EncodeCheckResponse(resp service.Response) CheckResponse {
	out := CheckResponse{
		Allowed:  resp.OverallCode != service.CodeOverLimit,
		Code:     codeString(resp.OverallCode),
		Statuses: make([]CheckStatus, len(resp.Statuses)),
	}
	for i := range resp.Statuses {
		s := &resp.Statuses[i]
		cs := CheckStatus{
			Code:       codeString(s.Code),
			Unlimited:  s.Unlimited,
			Shadowed:   s.Shadowed,
			Degraded:   string(s.Degraded),
			Lease:      s.Lease,
			Untried:    s.Untried,
			PassedOver: s.PassedOver,
		}
		if s.Code == service.CodeOverLimit {
			if !s.PassedOver {
				out.Allowed = false
				out.Code = codeString(service.CodeOverLimit)
			}
			cs.Reason = statusReason(s)
		}
		if s.Rule != nil {
			cs.Rule = s.Rule.ID
		}
		if s.CurrentLimit != nil && !s.Unlimited {
			cs.Limit = limitJSON(s)
			cs.Remaining = max(s.Result.Remaining, 0)
			cs.ResetAfterMs = ms(s.Result.ResetAfter)
			cs.RetryAfterMs = ms(s.Result.RetryAfter)
			cs.DelayMs = ms(s.Result.Delay)
		}
		out.Statuses[i] = cs
	}
	if !out.Allowed {
		out.Reason = reason(&resp)
		if out.Reason == "" { // only statuses the edge does not advertise refused
			out.Reason = headers.ReasonLimited
		}
	}
	if c := resp.Choice; c != nil {
		out.Choice = map[string]ChoiceJSON{c.Group: choiceJSON(c)}
	}
	return out
}

// choiceJSON is c as the answer's choice field gives it.
func choiceJSON(c *service.Choice) ChoiceJSON {
	return ChoiceJSON{Value: c.Value, Key: c.Key, Index: c.Index, Descriptor: c.Descriptor}
}

// limitJSON describes the limit of a status that has one.
func limitJSON(s *service.Status) *LimitJSON {
	cl := s.CurrentLimit
	lj := &LimitJSON{Name: cl.Name, RequestsPerUnit: cl.RequestsPerUnit, Unit: cl.Unit, WindowMs: ms(cl.Window)}
	if s.Rule != nil && stack.ValidAlgorithm(s.Rule.Limit.Algorithm) {
		lj.Algorithm = s.Rule.Limit.Algorithm.String()
	}
	return lj
}

// reason is the reason of a refused request, as edge.Decision gives it
// to every transport.
func reason(resp *service.Response) string {
	var d edge.Decision
	d.Add(resp)
	return d.Reason
}

// statusReason is why a status is OVER_LIMIT.
func statusReason(s *service.Status) string {
	switch {
	case s.Degraded == service.FailedClosed:
		return headers.ReasonUnavailable
	case s.Result.Reason == sluice.ReasonCostTooHigh:
		return headers.ReasonCostTooHigh
	case s.Result.Reason == service.ReasonPenalty:
		return headers.ReasonPenalty
	case s.Result.Reason == service.ReasonDenyList:
		return headers.ReasonDenyList
	case s.Result.Reason == service.ReasonUnknownModel:
		return headers.ReasonUnknownModel
	}
	return headers.ReasonLimited
}

func codeString(c service.Code) string {
	if c == service.CodeOverLimit {
		return "OVER_LIMIT"
	}
	return "OK"
}

// ms is d in whole milliseconds, rounded up.
func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// marshal encodes v as JSON followed by a newline.
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only our own types are encoded here; they always encode.
		return []byte(`{"error":"encoding failed"}` + "\n")
	}
	return b.Bytes()
}
