package headers

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"testing"
	"time"
)

var fuzzSeeds = []string{
	`"burst";r=45;t=30`,
	`"burst";q=100;w=60, "daily";q=1000;w=86400`,
	`"u";r=1;t=2;pk=:dXNlcg:`,
	`"c";q=8;qu="concurrent-requests"`,
	`("a" "b");r=1, "c";r=2`,
	`a:b:c;r=1, :YQ:;r=2`,
	`"a";r=1,`,
	`"\"";r=-0`,
	`%"caf%c3%a9";r=1;t=@1700000000`,
	`"a";r=1.5;t=?1`,
	``,
}

// FuzzRateLimitHeader: any input, parsed as either field, never panics, and
// whatever it yields renders again and parses back to the same members.
func FuzzRateLimitHeader(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls, err := ParseServiceLimits([]string{s})
		if err != nil {
			if !errors.Is(err, ErrMalformed) || ls != nil {
				t.Fatalf("ParseServiceLimits(%q) = %v, %v; want nil and ErrMalformed", s, ls, err)
			}
		}
		if len(ls) > 0 {
			out, err := FormatServiceLimits(ls...)
			if err != nil {
				t.Fatalf("FormatServiceLimits(%+v) from %q: %v", ls, s, err)
			}
			back, err := ParseServiceLimits([]string{out})
			if err != nil || !reflect.DeepEqual(back, ls) {
				t.Fatalf("re-parse of %q (from %q) = %+v, %v; want %+v", out, s, back, err, ls)
			}
		}
		ps, err := ParsePolicies([]string{s})
		if err != nil && ps != nil {
			t.Fatalf("ParsePolicies(%q) returned members with an error", s)
		}
		if len(ps) > 0 {
			for i := range ps {
				if ps[i].Unit != "" && checkName(string(ps[i].Unit)) != nil {
					return // a unit string with escapes we do not re-render
				}
			}
			out, err := FormatPolicies(ps...)
			if err != nil {
				t.Fatalf("FormatPolicies(%+v) from %q: %v", ps, s, err)
			}
			back, err := ParsePolicies([]string{out})
			if err != nil || !reflect.DeepEqual(back, normalizeUnits(ps)) {
				t.Fatalf("re-parse of %q (from %q) = %+v, %v; want %+v", out, s, back, err, ps)
			}
		}
	})
}

// normalizeUnits: "requests" is the default and is not rendered.
func normalizeUnits(ps []Policy) []Policy {
	out := append([]Policy(nil), ps...)
	for i := range out {
		if out[i].Unit == Requests {
			out[i].Unit = ""
		}
	}
	return out
}

// FuzzAppendServiceLimits: the hand-written fast path renders exactly what the
// structured-fields library renders, for every input the library accepts.
func FuzzAppendServiceLimits(f *testing.F) {
	f.Add("burst", int64(45), int64(30), []byte(nil))
	f.Add(`a"\b`, int64(0), int64(-1), []byte("pk"))
	f.Add("é", int64(-1), int64(MaxInteger+1), []byte{})
	f.Fuzz(func(t *testing.T, name string, r, reset int64, pk []byte) {
		l := ServiceLimit{Name: name, Remaining: r, Reset: reset, PartitionKey: pk}
		want, werr := FormatServiceLimits(l, l)
		got, gerr := AppendServiceLimits(nil, l, l)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("%+v: library error %v, fast path error %v", l, werr, gerr)
		}
		if werr == nil && string(got) != want {
			t.Fatalf("%+v: fast path %q, library %q", l, got, want)
		}
	})
}

// FuzzRetryAfter: never panics, never negative.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "Thu, 01 Jan 2026 00:00:30 GMT", "-1", "", "1e9", "99999999999999999999"} {
		f.Add(s)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		d, ok := ParseRetryAfter(s, now)
		if d < 0 || (!ok && d != 0) {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", s, d, ok)
		}
	})
}

// FuzzProblem: the append-based encoder always produces JSON that decodes to
// the same problem.
func FuzzProblem(f *testing.F) {
	f.Add("https://iana.org/assignments/http-problem-types#quota-exceeded", "t", 429, "d", "burst")
	f.Add("", "\x00<>&\u2028", 0, "\xff", "\"\\")
	f.Fuzz(func(t *testing.T, typ, title string, status int, detail, policy string) {
		p := Problem{Type: typ, Title: title, Status: status, Detail: detail, ViolatedPolicies: []string{policy}}
		var back Problem
		if err := json.Unmarshal(p.Marshal(), &back); err != nil {
			t.Fatalf("Marshal(%+v) = %s is not JSON: %v", p, p.Marshal(), err)
		}
		want, _ := json.Marshal(p)
		var viaStd Problem
		_ = json.Unmarshal(want, &viaStd)
		if !reflect.DeepEqual(back, viaStd) {
			t.Fatalf("Marshal(%+v) decodes to %+v; encoding/json gives %+v", p, back, viaStd)
		}
	})
}

// FuzzParseLegacy: any X-RateLimit-* values, never a panic; what parses is
// non-negative and renders back to the same numbers.
func FuzzParseLegacy(f *testing.F) {
	f.Add("60", "45", "1767225631", "15")
	f.Add(`10, 10;w=1;name="per-ip", 1000;w=3600`, "7", "", "")
	f.Add("-1", "x", "1e9", "99999999999999999999")
	f.Fuzz(func(t *testing.T, limit, remaining, reset, used string) {
		h := http.Header{}
		h.Set(XRateLimitLimit, limit)
		h.Set(XRateLimitRemaining, remaining)
		h.Set(XRateLimitReset, reset)
		h.Set(XRateLimitUsed, used)
		l, ok := ParseLegacy(h)
		if !ok {
			return
		}
		if l.Limit < 0 || l.Remaining < 0 || l.Reset < 0 || l.Used < 0 {
			t.Fatalf("ParseLegacy(%q, %q, %q, %q) = %+v: negative", limit, remaining, reset, used, l)
		}
		h2 := http.Header{}
		SetLegacy(h2, l)
		if back, ok := ParseLegacy(h2); !ok || back != l {
			t.Fatalf("round trip of %+v = %+v, %v", l, back, ok)
		}
	})
}
