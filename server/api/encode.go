package api

import (
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/stack"
)

// appendCheckResponse appends r as marshal writes it (encoding/json, HTML
// not escaped at the top level, a newline at the end) without reflection:
// the same bytes, field for field (TestAppendCheckResponseMatchesMarshal).
// CheckStatus.MarshalJSON's encoding is kept: its strings are HTML-escaped
// (json.Marshal's default), and remaining and reset_after_ms come last,
// written exactly when a limit applied and its counter was read.
func appendCheckResponse(b []byte, r *CheckResponse) []byte {
	b = appendCheckHead(b, r)
	if r.Statuses == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Statuses {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCheckStatus(b, &r.Statuses[i])
		}
		b = append(b, ']')
	}
	if len(r.Choice) > 0 {
		b = append(b, `,"choice":{`...)
		for i, g := range slices.Sorted(maps.Keys(r.Choice)) {
			if i > 0 {
				b = append(b, ',')
			}
			c := r.Choice[g]
			b = appendChoice(b, g, &c)
		}
		b = append(b, '}')
	}
	return append(b, "}\n"...)
}

// appendChoice appends one member of the answer's choice field, as
// marshal writes it: "group":{"value":…,"key":…,"index":…,"descriptor":…}.
func appendChoice(b []byte, group string, c *ChoiceJSON) []byte {
	b = appendJSONString(b, group, false)
	b = append(b, `:{"value":`...)
	b = appendJSONString(b, c.Value, false)
	b = append(b, `,"key":`...)
	b = appendJSONString(b, c.Key, false)
	b = append(b, `,"index":`...)
	b = strconv.AppendInt(b, int64(c.Index), 10)
	b = append(b, `,"descriptor":`...)
	b = strconv.AppendInt(b, int64(c.Descriptor), 10)
	return append(b, '}')
}

// appendCheck appends what marshal(EncodeCheckResponse(*resp)) writes,
// without building the CheckResponse on the heap: each status is rendered
// into a CheckStatus on the stack and appended (TestAppendCheckMatches).
func appendCheck(b []byte, resp *service.Response) []byte {
	head := CheckResponse{Allowed: resp.OverallCode != service.CodeOverLimit, Code: codeString(resp.OverallCode)}
	for i := range resp.Statuses {
		if resp.Statuses[i].Code == service.CodeOverLimit && !resp.Statuses[i].PassedOver {
			head.Allowed, head.Code = false, codeString(service.CodeOverLimit)
		}
	}
	if !head.Allowed {
		head.Reason = reason(resp)
		if head.Reason == "" { // only statuses the edge does not advertise refused
			head.Reason = headers.ReasonLimited
		}
	}
	b = append(appendCheckHead(b, &head), '[')
	for i := range resp.Statuses {
		if i > 0 {
			b = append(b, ',')
		}
		s := &resp.Statuses[i]
		cs := CheckStatus{Code: codeString(s.Code), Unlimited: s.Unlimited, Shadowed: s.Shadowed, Degraded: string(s.Degraded), Lease: s.Lease, Untried: s.Untried, PassedOver: s.PassedOver}
		if s.Code == service.CodeOverLimit {
			cs.Reason = statusReason(s)
		}
		if s.Rule != nil {
			cs.Rule = s.Rule.ID
		}
		var lj LimitJSON
		if cl := s.CurrentLimit; cl != nil && !s.Unlimited {
			lj = LimitJSON{Name: cl.Name, RequestsPerUnit: cl.RequestsPerUnit, Unit: cl.Unit, WindowMs: ms(cl.Window)}
			if s.Rule != nil && stack.ValidAlgorithm(s.Rule.Limit.Algorithm) {
				lj.Algorithm = s.Rule.Limit.Algorithm.String()
			}
			cs.Limit = &lj
			cs.Remaining = max(s.Result.Remaining, 0)
			cs.ResetAfterMs = ms(s.Result.ResetAfter)
			cs.RetryAfterMs = ms(s.Result.RetryAfter)
			cs.DelayMs = ms(s.Result.Delay)
		}
		b = appendCheckStatus(b, &cs)
	}
	b = append(b, ']')
	if c := resp.Choice; c != nil {
		cj := choiceJSON(c)
		b = append(b, `,"choice":{`...)
		b = append(appendChoice(b, c.Group, &cj), '}')
	}
	return append(b, "}\n"...)
}

// appendCheckHead appends r up to its statuses' value: `{"allowed":…,
// "statuses":`.
func appendCheckHead(b []byte, r *CheckResponse) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, r.Allowed)
	b = append(b, `,"code":`...)
	b = appendJSONString(b, r.Code, false)
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, r.Reason, false)
	}
	return append(b, `,"statuses":`...)
}

// appendCheckStatus appends s as CheckStatus.MarshalJSON encodes it.
func appendCheckStatus(b []byte, s *CheckStatus) []byte {
	read := s.Limit != nil && s.Degraded != string(service.FailedOpen) && s.Degraded != string(service.FailedClosed)
	b = append(b, `{"code":`...)
	b = appendJSONString(b, s.Code, true)
	if s.Rule != "" {
		b = append(b, `,"rule":`...)
		b = appendJSONString(b, s.Rule, true)
	}
	if l := s.Limit; l != nil {
		b = append(b, `,"limit":{`...)
		if l.Name != "" {
			b = append(b, `"name":`...)
			b = appendJSONString(b, l.Name, true)
			b = append(b, ',')
		}
		b = append(b, `"requests_per_unit":`...)
		b = strconv.AppendUint(b, uint64(l.RequestsPerUnit), 10)
		if l.Unit != "" {
			b = append(b, `,"unit":`...)
			b = appendJSONString(b, l.Unit, true)
		}
		b = append(b, `,"window_ms":`...)
		b = strconv.AppendInt(b, l.WindowMs, 10)
		if l.Algorithm != "" {
			b = append(b, `,"algorithm":`...)
			b = appendJSONString(b, l.Algorithm, true)
		}
		b = append(b, '}')
	}
	if s.Unlimited {
		b = append(b, `,"unlimited":true`...)
	}
	if s.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, s.Reason, true)
	}
	b = appendNonZero(b, `,"retry_after_ms":`, s.RetryAfterMs)
	b = appendNonZero(b, `,"delay_ms":`, s.DelayMs)
	if s.Shadowed {
		b = append(b, `,"shadowed":true`...)
	}
	if s.Degraded != "" {
		b = append(b, `,"degraded":`...)
		b = appendJSONString(b, s.Degraded, true)
	}
	if s.Lease != 0 {
		b = append(b, `,"lease":`...)
		b = strconv.AppendUint(b, s.Lease, 10)
	}
	if s.Untried {
		b = append(b, `,"untried":true`...)
	}
	if s.PassedOver {
		b = append(b, `,"passed_over":true`...)
	}
	if read {
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, s.Remaining, 10)
		b = append(b, `,"reset_after_ms":`...)
		b = strconv.AppendInt(b, s.ResetAfterMs, 10)
	}
	return append(b, '}')
}

// appendNonZero appends name and v when v is not 0 (omitempty).
func appendNonZero(b []byte, name string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, name...), v, 10)
}

// plainByte[c], for an ASCII byte c, is 1 when encoding/json writes it as
// it is, 2 when it does unless escaping HTML ('<', '>', '&'), 0 when it
// escapes it.
var plainByte = func() (t [utf8.RuneSelf]byte) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		switch c {
		case '"', '\\':
		case '<', '>', '&':
			t[c] = 2
		default:
			t[c] = 1
		}
	}
	return t
}()

// appendJSONString appends s quoted as encoding/json quotes a string:
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped, and, when html,
// '<', '>' and '&' too.
func appendJSONString(b []byte, s string, html bool) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plainByte[c] == 1 || (!html && plainByte[c] == 2) {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
