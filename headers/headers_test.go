package headers

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The exact strings of PROTOCOLS.md, "HTTP response fields".
func TestGoldenProtocols(t *testing.T) {
	policy, err := FormatPolicies(
		Policy{Name: "burst", Quota: 100, Window: 60},
		Policy{Name: "daily", Quota: 1000, Window: 86400},
	)
	if err != nil {
		t.Fatalf("FormatPolicies: %v", err)
	}
	if want := `"burst";q=100;w=60, "daily";q=1000;w=86400`; policy != want {
		t.Errorf("FormatPolicies = %s\nwant            %s", policy, want)
	}
	limit, err := FormatServiceLimits(ServiceLimit{Name: "burst", Remaining: 45, Reset: 30})
	if err != nil {
		t.Fatalf("FormatServiceLimits: %v", err)
	}
	if want := `"burst";r=45;t=30`; limit != want {
		t.Errorf("FormatServiceLimits = %s, want %s", limit, want)
	}
}

func TestFormatPolicies(t *testing.T) {
	tests := []struct {
		name string
		in   []Policy
		want string
		err  bool
	}{
		{"none", nil, "", false},
		{"quota only", []Policy{{Name: "a", Quota: 5}}, `"a";q=5`, false},
		{"default unit omitted", []Policy{{Name: "a", Quota: 5, Unit: Requests, Window: 1}}, `"a";q=5;w=1`, false},
		{"concurrency", []Policy{{Name: "c", Quota: 8, Unit: ConcurrentRequests}}, `"c";q=8;qu="concurrent-requests"`, false},
		{"bytes with window", []Policy{{Name: "b", Quota: 1 << 20, Unit: ContentBytes, Window: 3600}}, `"b";q=1048576;qu="content-bytes";w=3600`, false},
		{"partition key", []Policy{{Name: "u", Quota: 1, Window: 1, PartitionKey: []byte("user-7")}}, `"u";q=1;w=1;pk=:dXNlci03:`, false},
		{"escaped name", []Policy{{Name: `a"b\c`, Quota: 1}}, `"a\"b\\c";q=1`, false},
		{"zero quota", []Policy{{Name: "blocked", Quota: 0, Window: 60}}, `"blocked";q=0;w=60`, false},
		{"max integer", []Policy{{Name: "m", Quota: MaxInteger}}, `"m";q=999999999999999`, false},
		{"too large", []Policy{{Name: "m", Quota: MaxInteger + 1}}, "", true},
		{"negative quota", []Policy{{Name: "m", Quota: -1}}, "", true},
		{"negative window", []Policy{{Name: "m", Quota: 1, Window: -1}}, "", true},
		{"non-ascii name", []Policy{{Name: "é", Quota: 1}}, "", true},
		{"control in name", []Policy{{Name: "a\nb", Quota: 1}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FormatPolicies(tt.in...)
			if (err != nil) != tt.err {
				t.Fatalf("FormatPolicies(%+v) error = %v, want error %v", tt.in, err, tt.err)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if got != tt.want {
				t.Errorf("FormatPolicies(%+v) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestFormatServiceLimits(t *testing.T) {
	tests := []struct {
		name string
		in   []ServiceLimit
		want string
		err  bool
	}{
		{"none", nil, "", false},
		{"two", []ServiceLimit{{Name: "burst", Remaining: 0, Reset: 1}, {Name: "daily", Remaining: 999, Reset: 86400}}, `"burst";r=0;t=1, "daily";r=999;t=86400`, false},
		{"no reset", []ServiceLimit{{Name: "c", Remaining: 3, Reset: -1}}, `"c";r=3`, false},
		{"partition key", []ServiceLimit{{Name: "u", Remaining: 1, Reset: 2, PartitionKey: []byte{0xff, 0x00}}}, `"u";r=1;t=2;pk=:/wA=:`, false},
		{"empty partition key", []ServiceLimit{{Name: "u", Remaining: 1, Reset: 2, PartitionKey: []byte{}}}, `"u";r=1;t=2;pk=::`, false},
		{"negative remaining", []ServiceLimit{{Name: "u", Remaining: -1}}, "", true},
		{"reset too large", []ServiceLimit{{Name: "u", Reset: MaxInteger + 1}}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FormatServiceLimits(tt.in...)
			if (err != nil) != tt.err {
				t.Fatalf("FormatServiceLimits(%+v) error = %v, want error %v", tt.in, err, tt.err)
			}
			if got != tt.want {
				t.Errorf("FormatServiceLimits(%+v) = %q, want %q", tt.in, got, tt.want)
			}
			app, aerr := AppendServiceLimits(nil, tt.in...)
			if (aerr != nil) != tt.err {
				t.Fatalf("AppendServiceLimits(%+v) error = %v, want error %v", tt.in, aerr, tt.err)
			}
			if aerr == nil && string(app) != tt.want {
				t.Errorf("AppendServiceLimits(%+v) = %q, want %q", tt.in, app, tt.want)
			}
		})
	}
}

func TestParseServiceLimits(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []ServiceLimit
		err    bool
	}{
		{"absent", nil, nil, false},
		{"golden", []string{`"burst";r=45;t=30`}, []ServiceLimit{{Name: "burst", Remaining: 45, Reset: 30}}, false},
		{"two lines combine", []string{`"a";r=1;t=2`, `"b";r=3`}, []ServiceLimit{{Name: "a", Remaining: 1, Reset: 2}, {Name: "b", Remaining: 3, Reset: -1}}, false},
		{"unknown params ignored", []string{`"a";r=1;t=2;x=?1;foo="bar"`}, []ServiceLimit{{Name: "a", Remaining: 1, Reset: 2}}, false},
		{"missing r skipped", []string{`"a";t=2, "b";r=0;t=1`}, []ServiceLimit{{Name: "b", Remaining: 0, Reset: 1}}, false},
		{"negative r skipped", []string{`"a";r=-1;t=2`}, nil, false},
		{"decimal r skipped", []string{`"a";r=1.5;t=2`}, nil, false},
		{"string t skipped", []string{`"a";r=1;t="2"`}, nil, false},
		{"token name skipped", []string{`a;r=1;t=2, "b";r=2`}, []ServiceLimit{{Name: "b", Remaining: 2, Reset: -1}}, false},
		{"inner list skipped", []string{`("a" "b");r=1, "c";r=2`}, []ServiceLimit{{Name: "c", Remaining: 2, Reset: -1}}, false},
		{"padded pk", []string{`"u";r=1;t=2;pk=:dXNlci03:`}, []ServiceLimit{{Name: "u", Remaining: 1, Reset: 2, PartitionKey: []byte("user-7")}}, false},
		{"unpadded pk accepted", []string{`"u";r=1;t=2;pk=:dXNlcg:`}, []ServiceLimit{{Name: "u", Remaining: 1, Reset: 2, PartitionKey: []byte("user")}}, false},
		{"unpadded pk one pad", []string{`"u";r=1;pk=:dXNlcjE:, "v";r=2`}, []ServiceLimit{{Name: "u", Remaining: 1, Reset: -1, PartitionKey: []byte("user1")}, {Name: "v", Remaining: 2, Reset: -1}}, false},
		{"token with colon untouched", []string{`"u";r=1;x=a:bc:d;pk=:dXNlcg:`}, []ServiceLimit{{Name: "u", Remaining: 1, Reset: -1, PartitionKey: []byte("user")}}, false},
		{"string with colons untouched", []string{`":ab:";r=1;pk=:YQ:`}, []ServiceLimit{{Name: ":ab:", Remaining: 1, Reset: -1, PartitionKey: []byte("a")}}, false},
		{"whitespace", []string{`  "a";r=1 ,	"b";r=2`}, []ServiceLimit{{Name: "a", Remaining: 1, Reset: -1}, {Name: "b", Remaining: 2, Reset: -1}}, false},
		{"malformed trailing comma", []string{`"a";r=1,`}, nil, true},
		{"malformed unterminated string", []string{`"a;r=1`}, nil, true},
		{"malformed 16 digits", []string{`"a";r=1000000000000000`}, nil, true},
		{"malformed bad base64", []string{`"a";r=1;pk=:a:`}, nil, true},
		{"malformed draft-03 style", []string{`10, 10;w=1;name="per-ip"`}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServiceLimits(tt.values)
			if (err != nil) != tt.err {
				t.Fatalf("ParseServiceLimits(%q) error = %v, want error %v", tt.values, err, tt.err)
			}
			if err != nil && !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseServiceLimits(%q) = %+v, want %+v", tt.values, got, tt.want)
			}
		})
	}
}

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		name   string
		values []string
		want   []Policy
		err    bool
	}{
		{"golden", []string{`"burst";q=100;w=60, "daily";q=1000;w=86400`}, []Policy{{Name: "burst", Quota: 100, Window: 60}, {Name: "daily", Quota: 1000, Window: 86400}}, false},
		{"unit", []string{`"c";q=8;qu="concurrent-requests"`}, []Policy{{Name: "c", Quota: 8, Unit: ConcurrentRequests}}, false},
		{"missing q skipped", []string{`"a";w=1, "b";q=1`}, []Policy{{Name: "b", Quota: 1}}, false},
		{"zero w skipped", []string{`"a";q=1;w=0`}, nil, false},
		{"token qu skipped", []string{`"a";q=1;qu=requests`}, nil, false},
		{"bool pk skipped", []string{`"a";q=1;pk`}, nil, false},
		{"unpadded pk", []string{`"a";q=1;pk=:YWI:`}, []Policy{{Name: "a", Quota: 1, PartitionKey: []byte("ab")}}, false},
		{"malformed", []string{`"a";q=1;;`}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicies(tt.values)
			if (err != nil) != tt.err {
				t.Fatalf("ParsePolicies(%q) error = %v, want error %v", tt.values, err, tt.err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParsePolicies(%q) = %+v, want %+v", tt.values, got, tt.want)
			}
		})
	}
}

func TestRoundTrip(t *testing.T) {
	policies := []Policy{
		{Name: "burst", Quota: 100, Window: 60},
		{Name: `we"ird\name`, Quota: 0, Window: 1, Unit: ContentBytes},
		{Name: "pk", Quota: MaxInteger, Window: MaxInteger, PartitionKey: []byte{0, 1, 2, 3, 254, 255}},
		{Name: "", Quota: 7, Unit: ConcurrentRequests},
	}
	s, err := FormatPolicies(policies...)
	if err != nil {
		t.Fatalf("FormatPolicies: %v", err)
	}
	got, err := ParsePolicies([]string{s})
	if err != nil {
		t.Fatalf("ParsePolicies(%q): %v", s, err)
	}
	if !reflect.DeepEqual(got, policies) {
		t.Errorf("policies round trip through %q:\n got %+v\nwant %+v", s, got, policies)
	}
	limits := []ServiceLimit{
		{Name: "burst", Remaining: 45, Reset: 30},
		{Name: "x", Remaining: 0, Reset: -1, PartitionKey: []byte("k")},
		{Name: "y", Remaining: MaxInteger, Reset: 0},
	}
	s, err = FormatServiceLimits(limits...)
	if err != nil {
		t.Fatalf("FormatServiceLimits: %v", err)
	}
	gotL, err := ParseServiceLimits([]string{s})
	if err != nil {
		t.Fatalf("ParseServiceLimits(%q): %v", s, err)
	}
	if !reflect.DeepEqual(gotL, limits) {
		t.Errorf("limits round trip through %q:\n got %+v\nwant %+v", s, gotL, limits)
	}
}

func TestPolicyName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"per_user", "per_user"},
		{"tenant=acme.user", "tenant=acme.user"},
		{"100%", "100%25"},
		{"naïve", "na%C3%AFve"},
		{"a\nb", "a%0Ab"},
	}
	for _, tt := range tests {
		if got := PolicyName(tt.in); got != tt.want {
			t.Errorf("PolicyName(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if _, err := FormatPolicies(Policy{Name: PolicyName(tt.in), Quota: 1}); err != nil {
			t.Errorf("PolicyName(%q) is not renderable: %v", tt.in, err)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seconds := []struct {
		wait  time.Duration
		reset int64
		want  int64
	}{
		{0, 0, 1},
		{time.Microsecond, 0, 1},
		{time.Second, 0, 1},
		{time.Second + time.Microsecond, 0, 2},
		{1500 * time.Millisecond, 5, 5},
		{10 * time.Second, 3, 10},
		{-time.Second, 0, 1},
	}
	for _, tt := range seconds {
		if got := RetryAfterSeconds(tt.wait, tt.reset); got != tt.want {
			t.Errorf("RetryAfterSeconds(%v, %d) = %d, want %d", tt.wait, tt.reset, got, tt.want)
		}
	}
	parse := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 120 * time.Second, true},
		{" 3 ", 3 * time.Second, true},
		{"0", 0, true},
		{"Thu, 01 Jan 2026 00:00:30 GMT", 30 * time.Second, true},
		{"Thursday, 01-Jan-26 00:01:00 GMT", time.Minute, true},
		{"Thu Jan  1 00:00:05 2026", 5 * time.Second, true},
		{"Wed, 31 Dec 2025 23:00:00 GMT", 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"10s", 0, false},
		{"99999999999999999999", 0, false},
		{"9223372036854775807", 0, false},
		{"tomorrow", 0, false},
	}
	for _, tt := range parse {
		got, ok := ParseRetryAfter(tt.in, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("ParseRetryAfter(%q) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

func TestLegacy(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 500, time.UTC)
	l := NewLegacy(60, 45, 30*time.Second, now)
	h := http.Header{}
	SetLegacy(h, l)
	want := map[string]string{
		"X-Ratelimit-Limit":     "60",
		"X-Ratelimit-Remaining": "45",
		"X-Ratelimit-Reset":     "1767225631", // 2026-01-01T00:00:30.0000005Z rounded up
		"X-Ratelimit-Used":      "15",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	back, ok := ParseLegacy(h)
	if !ok || back != l {
		t.Errorf("ParseLegacy = %+v, %v; want %+v, true", back, ok, l)
	}
	envoy := http.Header{"X-Ratelimit-Limit": {`10, 10;w=1;name="per-ip", 1000;w=3600`}, "X-Ratelimit-Remaining": {"7"}}
	if got, ok := ParseLegacy(envoy); !ok || got.Limit != 10 || got.Remaining != 7 {
		t.Errorf("ParseLegacy(envoy draft-03) = %+v, %v; want limit 10 remaining 7", got, ok)
	}
	for _, bad := range []http.Header{{}, {"X-Ratelimit-Limit": {"x"}, "X-Ratelimit-Remaining": {"1"}}, {"X-Ratelimit-Limit": {"-5"}, "X-Ratelimit-Remaining": {"1"}}} {
		if got, ok := ParseLegacy(bad); ok {
			t.Errorf("ParseLegacy(%v) = %+v, true; want false", bad, got)
		}
	}
}

func TestProblem(t *testing.T) {
	tests := []struct {
		name string
		p    Problem
		want string
	}{
		{"quota exceeded", QuotaExceeded([]string{"burst", `q"x`}, "slow down"),
			`{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"detail":"slow down","violated-policies":["burst","q\"x"]}`},
		{"unavailable", Unavailable("shedding load"),
			`{"type":"about:blank","title":"Service Unavailable","status":503,"detail":"shedding load"}`},
		{"empty", Problem{}, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Marshal()
			if string(got) != tt.want {
				t.Errorf("Marshal = %s\nwant      %s", got, tt.want)
			}
			back, err := ParseProblem(got)
			if err != nil {
				t.Fatalf("ParseProblem(%s): %v", got, err)
			}
			if !reflect.DeepEqual(back, tt.p) {
				t.Errorf("ParseProblem(Marshal(p)) = %+v, want %+v", back, tt.p)
			}
		})
	}
	// Non-ASCII and control characters take encoding/json's path.
	p := Problem{Detail: "naïve <b>\n", ViolatedPolicies: []string{"\x01"}}
	var back Problem
	if err := json.Unmarshal(p.Marshal(), &back); err != nil || !reflect.DeepEqual(back, p) {
		t.Errorf("unusual strings: Unmarshal(%s) = %+v, %v; want %+v", p.Marshal(), back, err, p)
	}
}

func TestWriteProblem(t *testing.T) {
	rec := &recorder{h: http.Header{}}
	WriteProblem(rec, QuotaExceeded([]string{"burst"}, ""))
	if rec.code != 429 {
		t.Errorf("status = %d, want 429", rec.code)
	}
	if got := rec.h.Get("Content-Type"); got != ContentTypeProblem {
		t.Errorf("Content-Type = %q, want %q", got, ContentTypeProblem)
	}
	if got := rec.h.Get("Cache-Control"); got != "no-store" {
		t.Errorf("Cache-Control = %q, want no-store", got)
	}
	if !strings.Contains(rec.body.String(), `"violated-policies":["burst"]`) {
		t.Errorf("body %s lacks violated-policies", rec.body.String())
	}
}

type recorder struct {
	h    http.Header
	code int
	body bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) WriteHeader(code int)        { r.code = code }
func (r *recorder) Write(b []byte) (int, error) { return r.body.Write(b) }

func TestSet(t *testing.T) {
	h := http.Header{}
	h.Set(RateLimit, "old")
	Set(h, `"a";q=1`, "")
	if got := h.Get(RateLimitPolicy); got != `"a";q=1` {
		t.Errorf("RateLimit-Policy = %q, want %q", got, `"a";q=1`)
	}
	if _, ok := h[http.CanonicalHeaderKey(RateLimit)]; ok {
		t.Errorf("RateLimit still set to %q after Set with empty value", h.Get(RateLimit))
	}
}

func BenchmarkFormatServiceLimits(b *testing.B) {
	ls := []ServiceLimit{{Name: "per_user", Remaining: 45, Reset: 30}}
	b.Run("httpsfv", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = FormatServiceLimits(ls...)
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 64)
		for b.Loop() {
			buf, _ = AppendServiceLimits(buf[:0], ls...)
		}
	})
}
