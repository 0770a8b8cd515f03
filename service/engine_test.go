package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/rules"
)

const testRules = `
domain: test
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: ip
    value: 9.9.9.9
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: big
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /own/*
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: user
    rate_limit: {name: per_user, unit: minute, requests_per_unit: 2}
  - key: plan
    value: premium
    descriptors:
      - key: user
        rate_limit: {name: premium, unit: minute, requests_per_unit: 5, replaces: [{name: per_user}]}
  - key: tb
    rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 10, burst: 2}
  - key: win
    rate_limit: {window: 90s, requests_per_unit: 1}
  - key: detail
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// step is one check in a trace: advance the clock, send req, compare.
type step struct {
	advance   time.Duration
	req       Request
	overall   Code
	codes     []Code  // per status
	remaining []int64 // per status; -1 (or a nil slice) skips the check
}

func req(ds ...Descriptor) Request { return Request{Domain: "test", Descriptors: ds} }

func TestCheckTraces(t *testing.T) {
	OK, OVER := CodeOK, CodeOverLimit
	override := desc("ip", "1.2.3.4")
	override.Limit = &LimitOverride{RequestsPerUnit: 2, Unit: "MINUTE"}
	withHits := func(d Descriptor, h uint64) Descriptor { d.Hits = u64(h); return d }
	tests := []struct {
		name  string
		steps []step
	}{
		{"fixed window counts and resets", []step{
			{req: req(desc("ip", "1.1.1.1")), overall: OK, codes: []Code{OK}, remaining: []int64{2}},
			{req: req(desc("ip", "1.1.1.1")), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
			{req: req(desc("ip", "1.1.1.1")), overall: OK, codes: []Code{OK}, remaining: []int64{0}},
			{req: req(desc("ip", "1.1.1.1")), overall: OVER, codes: []Code{OVER}, remaining: []int64{0}},
			{req: req(desc("ip", "2.2.2.2")), overall: OK, codes: []Code{OK}, remaining: []int64{2}},
			{advance: time.Second, req: req(desc("ip", "1.1.1.1")), overall: OK, codes: []Code{OK}, remaining: []int64{2}},
		}},
		{"exact value beats the bare key", []step{
			{req: req(desc("ip", "9.9.9.9")), overall: OVER, codes: []Code{OVER}},
		}},
		{"no rule and unknown domain allow", []step{
			{req: req(desc("nothing", "here")), overall: OK, codes: []Code{OK}},
			{req: req(desc("ip", "1.1.1.1", "deeper", "x")), overall: OK, codes: []Code{OK}},
			{req: Request{Domain: "nope", Descriptors: []Descriptor{desc("ip", "1.1.1.1")}}, overall: OK, codes: []Code{OK}},
		}},
		{"unlimited never limits", []step{
			{req: req(desc("internal", "a")), overall: OK, codes: []Code{OK}},
			{req: req(desc("internal", "a")), overall: OK, codes: []Code{OK}},
			{req: Request{Domain: "test", Hits: 1 << 40, Descriptors: []Descriptor{desc("internal", "a")}}, overall: OK, codes: []Code{OK}},
		}},
		{"a denied request charges none of its limits", []step{
			{req: req(desc("big", "a"), desc("one", "a")), overall: OK, codes: []Code{OK, OK}, remaining: []int64{9, 0}},
			{req: req(desc("big", "a"), desc("one", "a")), overall: OVER, codes: []Code{OK, OVER}, remaining: []int64{9, 0}},
			{req: req(desc("big", "a")), overall: OK, codes: []Code{OK}, remaining: []int64{8}},
		}},
		{"shadow mode counts but allows, and enforced limits are still charged", []step{
			{req: req(desc("shadow", "s"), desc("big", "b")), overall: OK, codes: []Code{OK, OK}, remaining: []int64{0, 9}},
			{req: req(desc("shadow", "s"), desc("big", "b")), overall: OK, codes: []Code{OK, OK}, remaining: []int64{0, 8}},
			{req: req(desc("big", "b")), overall: OK, codes: []Code{OK}, remaining: []int64{7}},
		}},
		{"a shadow denial does not hide an enforced denial", []step{
			{req: req(desc("shadow", "s"), desc("one", "b")), overall: OK, codes: []Code{OK, OK}, remaining: []int64{0, 0}},
			{req: req(desc("shadow", "s"), desc("one", "b")), overall: OVER, codes: []Code{OK, OVER}},
		}},
		{"replaces drops the named limit", []step{
			{req: req(desc("user", "u"), desc("plan", "premium", "user", "u")), overall: OK, codes: []Code{OK, OK}, remaining: []int64{-1, 4}},
			{req: req(desc("user", "u"), desc("plan", "premium", "user", "u")), overall: OK, codes: []Code{OK, OK}, remaining: []int64{-1, 3}},
			{req: req(desc("user", "u"), desc("plan", "premium", "user", "u")), overall: OK, codes: []Code{OK, OK}, remaining: []int64{-1, 2}},
			// per_user was never charged.
			{req: req(desc("user", "u")), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
		}},
		{"hits: request, per descriptor, and zero looks", []step{
			{req: Request{Domain: "test", Hits: 3, Descriptors: []Descriptor{desc("big", "h")}}, overall: OK, codes: []Code{OK}, remaining: []int64{7}},
			{req: req(withHits(desc("big", "h"), 0)), overall: OK, codes: []Code{OK}, remaining: []int64{7}},
			{req: Request{Domain: "test", Hits: 1, Descriptors: []Descriptor{withHits(desc("big", "h"), 5)}}, overall: OK, codes: []Code{OK}, remaining: []int64{2}},
			{req: req(withHits(desc("big", "h"), 3)), overall: OVER, codes: []Code{OVER}, remaining: []int64{2}},
			{req: req(withHits(desc("big", "h"), 11)), overall: OVER, codes: []Code{OVER}},
			{req: req(withHits(desc("one", "h"), 0)), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
		}},
		{"wildcards: shared and per-value counters", []step{
			{req: req(desc("path", "/api/a")), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
			{req: req(desc("path", "/api/b")), overall: OK, codes: []Code{OK}, remaining: []int64{0}},
			{req: req(desc("path", "/api/c")), overall: OVER, codes: []Code{OVER}},
			{req: req(desc("path", "/own/a")), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
			{req: req(desc("path", "/own/b")), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
			{req: req(desc("path", "/own/a")), overall: OK, codes: []Code{OK}, remaining: []int64{0}},
			{req: req(desc("path", "/own/a")), overall: OVER, codes: []Code{OVER}},
		}},
		{"a limit in the request overrides the rules", []step{
			{req: req(override), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
			{req: req(override), overall: OK, codes: []Code{OK}, remaining: []int64{0}},
			{req: req(override), overall: OVER, codes: []Code{OVER}},
			{req: req(desc("ip", "1.2.3.4")), overall: OK, codes: []Code{OK}, remaining: []int64{2}},
		}},
		{"token bucket with burst", []step{
			{req: req(desc("tb", "x")), overall: OK, codes: []Code{OK}, remaining: []int64{1}},
			{req: req(desc("tb", "x")), overall: OK, codes: []Code{OK}, remaining: []int64{0}},
			{req: req(desc("tb", "x")), overall: OVER, codes: []Code{OVER}},
			{advance: 100 * time.Millisecond, req: req(desc("tb", "x")), overall: OK, codes: []Code{OK}, remaining: []int64{0}},
		}},
		{"a window of any length", []step{
			{req: req(desc("win", "x")), overall: OK, codes: []Code{OK}},
			{advance: 89 * time.Second, req: req(desc("win", "x")), overall: OVER, codes: []Code{OVER}},
			{advance: time.Second, req: req(desc("win", "x")), overall: OK, codes: []Code{OK}},
		}},
		{"statuses come back in request order", []step{
			{req: req(desc("nothing", "x"), desc("one", "o"), desc("internal", "i"), desc("big", "o")),
				overall: OK, codes: []Code{OK, OK, OK, OK}, remaining: []int64{-1, 0, -1, 9}},
			{req: req(desc("big", "o"), desc("nothing", "x"), desc("one", "o"), desc("internal", "i")),
				overall: OVER, codes: []Code{OK, OK, OVER, OK}, remaining: []int64{9, -1, 0, -1}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, testRules, DefaultConfig())
			for i, s := range tt.steps {
				h.clock.Advance(s.advance)
				resp := h.check(t, s.req)
				if resp.OverallCode != s.overall {
					t.Errorf("step %d: overall = %v, want %v (statuses %+v)", i, resp.OverallCode, s.overall, resp.Statuses)
				}
				for j, st := range resp.Statuses {
					if j < len(s.codes) && st.Code != s.codes[j] {
						t.Errorf("step %d: status %d code = %v, want %v", i, j, st.Code, s.codes[j])
					}
					if j < len(s.remaining) && s.remaining[j] >= 0 && st.Result.Remaining != s.remaining[j] {
						t.Errorf("step %d: status %d remaining = %d, want %d", i, j, st.Result.Remaining, s.remaining[j])
					}
				}
			}
		})
	}
}

func TestCheckStatusFields(t *testing.T) {
	h := newHarness(t, testRules, DefaultConfig())
	override := desc("ip", "1.2.3.4")
	override.Limit = &LimitOverride{RequestsPerUnit: 7, Unit: "hour"}
	resp := h.check(t, req(desc("nothing", "x"), desc("internal", "i"), desc("shadow", "s"), desc("shadow", "s"), override, desc("win", "w"),
		desc("user", "u"), desc("plan", "premium", "user", "u")))
	st := resp.Statuses
	if st[0].Rule != nil || st[0].CurrentLimit != nil || st[0].Unlimited {
		t.Errorf("no match: got rule %v, current limit %v, unlimited %v; want nil, nil, false", st[0].Rule, st[0].CurrentLimit, st[0].Unlimited)
	}
	if !st[1].Unlimited || st[1].Rule == nil || st[1].Rule.ID != "internal" {
		t.Errorf("unlimited: got unlimited %v, rule %v; want true, internal", st[1].Unlimited, st[1].Rule)
	}
	// Two descriptors on one shadow key in one batch: the second is denied
	// (limit 1), shadow mode reports it OK.
	if st[3].Code != CodeOK || !st[3].Shadowed || st[3].Result.Allowed {
		t.Errorf("shadow: got code %v, shadowed %v, allowed %v; want OK, true, false", st[3].Code, st[3].Shadowed, st[3].Result.Allowed)
	}
	wantOverride := CurrentLimit{RequestsPerUnit: 7, Unit: "hour", Window: time.Hour}
	if st[4].Rule != nil || st[4].CurrentLimit == nil || *st[4].CurrentLimit != wantOverride {
		t.Errorf("override: got rule %v, current limit %+v; want nil, %+v", st[4].Rule, st[4].CurrentLimit, wantOverride)
	}
	wantWin := CurrentLimit{RequestsPerUnit: 1, Unit: "", Window: 90 * time.Second}
	if st[5].CurrentLimit == nil || *st[5].CurrentLimit != wantWin {
		t.Errorf("window rule: got current limit %+v, want %+v", st[5].CurrentLimit, wantWin)
	}
	if st[6].Rule != nil || st[6].CurrentLimit != nil || st[6].Code != CodeOK {
		t.Errorf("replaced: got rule %v, current limit %v, code %v; want nil, nil, OK", st[6].Rule, st[6].CurrentLimit, st[6].Code)
	}
	wantPremium := CurrentLimit{Name: "premium", RequestsPerUnit: 5, Unit: "minute", Window: time.Minute}
	if st[7].CurrentLimit == nil || *st[7].CurrentLimit != wantPremium {
		t.Errorf("replacing rule: got current limit %+v, want %+v", st[7].CurrentLimit, wantPremium)
	}
	for i, s := range st {
		if s.Degraded != "" {
			t.Errorf("status %d: degraded %q with a healthy store", i, s.Degraded)
		}
	}
}

func TestCheckInvalidRequests(t *testing.T) {
	h := newHarness(t, testRules, DefaultConfig())
	badUnit := desc("ip", "1")
	badUnit.Limit = &LimitOverride{RequestsPerUnit: 1, Unit: "fortnight"}
	tooMany := desc("ip", "1")
	tooMany.Hits = u64(algorithm.MaxExact + 1)
	tests := []struct {
		name string
		req  Request
		want string
	}{
		{"empty domain", Request{Descriptors: []Descriptor{desc("ip", "1")}}, "empty domain"},
		{"no descriptors", Request{Domain: "test"}, "no descriptors"},
		{"invalid override unit", req(badUnit), `limit unit "fortnight"`},
		{"hits too large", req(tooMany), "hits 9007199254740992 above"},
		{"request hits too large", Request{Domain: "test", Hits: 1 << 60, Descriptors: []Descriptor{desc("ip", "1")}}, "hits 1152921504606846976 above"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.eng.Check(context.Background(), tt.req)
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("Check error = %v, want ErrInvalidRequest", err)
			}
			if got := err.Error(); !strings.Contains(got, tt.want) {
				t.Errorf("Check error = %q, want it to contain %q", got, tt.want)
			}
		})
	}
}

func TestOneStoreCallPerRequest(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{}
	h := newHarnessSnap(t, snap, DefaultConfig(), cs)
	cs.next = h.store
	h.check(t, req(desc("ip", "1"), desc("big", "1"), desc("one", "1"), desc("nothing", "1"), desc("internal", "1")))
	if cs.calls != 1 || len(cs.ops[0]) != 3 {
		t.Fatalf("store calls = %d with %v ops, want 1 call with 3 ops", cs.calls, cs.ops)
	}
	h.check(t, req(desc("nothing", "1"), desc("internal", "1")))
	if cs.calls != 1 {
		t.Errorf("a request with no limits called the store: calls = %d, want 1", cs.calls)
	}
	// The one exception: only a shadow limit denies, so the batch is taken
	// again with the shadow limit as a look, charging the enforced one.
	h.check(t, req(desc("shadow", "x"), desc("big", "x")))
	h.check(t, req(desc("shadow", "x"), desc("big", "x")))
	if cs.calls != 4 {
		t.Fatalf("store calls = %d, want 4 (1 + 1 + 2)", cs.calls)
	}
	if retry := cs.ops[3]; retry[0].Cost != 0 || retry[1].Cost != 1 {
		t.Errorf("retry batch costs = %d, %d; want 0 (shadow, look) and 1", retry[0].Cost, retry[1].Cost)
	}
}

func TestStoreKeys(t *testing.T) {
	override := desc("ip", "1.2.3.4")
	override.Limit = &LimitOverride{RequestsPerUnit: 2, Unit: "minute"}
	tests := []struct {
		d    Descriptor
		want string
	}{
		{desc("ip", "1.2.3.4"), "{test|ip=1.2.3.4}|r:ip|fixed_window:3:1000000"},
		{desc("plan", "premium", "user", "u"), "{test|plan=premium}|r:plan=premium.user|fixed_window:5:60000000|user=u"},
		{desc("path", "/api/x"), "{test|path=/api/*}|r:path=/api/*|fixed_window:2:60000000"},
		{desc("path", "/own/x"), "{test|path=/own/x}|r:path=/own/*|fixed_window:2:60000000"},
		{desc("ip", "a|b{c}=%"), "{test|ip=a%7Cb%7Bc%7D%3D%25}|r:ip|fixed_window:3:1000000"},
		{override, "{test|ip=1.2.3.4}|o|fixed_window:2:60000000"},
		{desc("tb", "x"), "{test|tb=x}|r:tb|token_bucket:10:1000000:b2"},
		{desc("win", "x"), "{test|win=x}|r:win|fixed_window:1:90000000"},
	}
	snap, err := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := &countingStore{}
	h := newHarnessSnap(t, snap, DefaultConfig(), cs)
	cs.next = h.store
	for i, tt := range tests {
		h.check(t, req(tt.d))
		if got := cs.ops[i][0].Key; got != tt.want {
			t.Errorf("key for %+v = %q, want %q", tt.d.Entries, got, tt.want)
		}
	}
}

func TestFailurePolicy(t *testing.T) {
	const yaml = `
domain: test
descriptors:
  - {key: dflt, rate_limit: {unit: minute, requests_per_unit: 4}}
  - {key: open, rate_limit: {unit: minute, requests_per_unit: 4, failure_mode: open}}
  - {key: closed, rate_limit: {unit: minute, requests_per_unit: 4, failure_mode: closed}}
  - {key: local, rate_limit: {unit: minute, requests_per_unit: 4, failure_mode: local}}
  - {key: shadowclosed, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 4, failure_mode: closed}}
`
	OK, OVER := CodeOK, CodeOverLimit
	type fstep struct {
		req      Request
		overall  Code
		codes    []Code
		degraded []string
	}
	tests := []struct {
		name  string
		dflt  rules.FailureMode
		steps []fstep
	}{
		{"open allows", rules.FailureClosed, []fstep{
			{req(desc("open", "a")), OK, []Code{OK}, []string{OutcomeFailedOpen}},
		}},
		{"closed denies", rules.FailureOpen, []fstep{
			{req(desc("closed", "a")), OVER, []Code{OVER}, []string{OutcomeFailedClosed}},
		}},
		{"shadow mode turns a closed failure into OK", rules.FailureOpen, []fstep{
			{req(desc("shadowclosed", "a")), OK, []Code{OK}, []string{OutcomeFailedClosed}},
		}},
		{"the default mode applies to rules without one", rules.FailureClosed, []fstep{
			{req(desc("dflt", "a")), OVER, []Code{OVER}, []string{OutcomeFailedClosed}},
		}},
		{"the default mode applies to overrides", rules.FailureClosed, []fstep{
			{func() Request {
				d := desc("dflt", "a")
				d.Limit = &LimitOverride{RequestsPerUnit: 9, Unit: "second"}
				return req(d)
			}(), OVER, []Code{OVER}, []string{OutcomeFailedClosed}},
		}},
		{"local limits at quota / replicas", rules.FailureOpen, []fstep{
			{req(desc("local", "a")), OK, []Code{OK}, []string{"local"}},
			{req(desc("local", "a")), OK, []Code{OK}, []string{"local"}},
			{req(desc("local", "a")), OVER, []Code{OVER}, []string{"local"}},
			{req(desc("local", "b")), OK, []Code{OK}, []string{"local"}},
		}},
		{"a closed denial charges no local limit", rules.FailureOpen, []fstep{
			{req(desc("local", "c"), desc("closed", "c")), OVER, []Code{OK, OVER}, []string{"local", OutcomeFailedClosed}},
			{req(desc("local", "c"), desc("closed", "c")), OVER, []Code{OK, OVER}, []string{"local", OutcomeFailedClosed}},
			{req(desc("local", "c")), OK, []Code{OK}, []string{"local"}},
			{req(desc("local", "c")), OK, []Code{OK}, []string{"local"}},
			{req(desc("local", "c")), OVER, []Code{OVER}, []string{"local"}},
		}},
		{"modes mix in one request", rules.FailureOpen, []fstep{
			{req(desc("open", "m"), desc("local", "m"), desc("dflt", "m")), OK, []Code{OK, OK, OK}, []string{OutcomeFailedOpen, "local", OutcomeFailedOpen}},
		}},
	}
	snap, err := rules.Parse("test.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := &failingStore{err: errStoreDown}
			fs.fail.Store(true)
			cfg := DefaultConfig()
			cfg.DefaultFailureMode = tt.dflt
			cfg.ExpectedReplicas = 2
			h := newHarnessSnap(t, snap, cfg, fs)
			h.eng.cfg.Fallback = h.store // the memory store as the local fallback
			for i, s := range tt.steps {
				resp := h.check(t, s.req)
				if resp.OverallCode != s.overall {
					t.Errorf("step %d: overall = %v, want %v", i, resp.OverallCode, s.overall)
				}
				for j, st := range resp.Statuses {
					if st.Code != s.codes[j] || string(st.Degraded) != s.degraded[j] {
						t.Errorf("step %d: status %d = %v/%q, want %v/%q", i, j, st.Code, st.Degraded, s.codes[j], s.degraded[j])
					}
				}
			}
			if got := testutil.ToFloat64(h.m.StoreErrors.WithLabelValues("error")); got != float64(len(tt.steps)) {
				t.Errorf("sluice_store_errors_total{reason=error} = %v, want %d", got, len(tt.steps))
			}
		})
	}
}

func TestFailureMetricsAndNoFallback(t *testing.T) {
	const yaml = `
domain: test
descriptors:
  - {key: open, rate_limit: {unit: minute, requests_per_unit: 4, failure_mode: open}}
  - {key: closed, rate_limit: {unit: minute, requests_per_unit: 4, failure_mode: closed}}
  - {key: local, rate_limit: {unit: minute, requests_per_unit: 1, failure_mode: local}}
`
	snap, err := rules.Parse("test.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &failingStore{err: errStoreDown}
	fs.fail.Store(true)
	cfg := DefaultConfig()
	h := newHarnessSnap(t, snap, cfg, fs) // no Fallback: local acts as open
	for range 3 {
		resp := h.check(t, req(desc("open", "a"), desc("local", "a")))
		if resp.OverallCode != CodeOK || resp.Statuses[1].Degraded != OutcomeFailedOpen {
			t.Fatalf("local without a fallback store: got %v/%q, want OK/failed_open", resp.OverallCode, resp.Statuses[1].Degraded)
		}
	}
	h.check(t, req(desc("closed", "a")))
	for _, c := range []struct {
		rule, outcome string
		want          float64
	}{
		{"open", OutcomeFailedOpen, 3}, {"local", OutcomeFailedOpen, 3}, {"closed", OutcomeFailedClosed, 1}, {"open", OutcomeAllowed, 0},
	} {
		if got := h.decisions("test", c.rule, c.outcome); got != c.want {
			t.Errorf("decisions{rule=%s,outcome=%s} = %v, want %v", c.rule, c.outcome, got, c.want)
		}
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, testRules, DefaultConfig())
	series := testutil.CollectAndCount(h.m.Decisions)
	for i := range 12 {
		h.check(t, req(desc("big", fmt.Sprint("v", i%2))))
	}
	// 100 distinct values of a rule without detailed_metric: no new series.
	for i := range 100 {
		h.check(t, req(desc("ip", fmt.Sprint("10.0.0.", i))))
	}
	if got := testutil.CollectAndCount(h.m.Decisions); got != series {
		t.Errorf("decision series = %d after 100 distinct values, want %d (values must not become labels)", got, series)
	}
	h.check(t, req(desc("shadow", "s"), desc("shadow", "s")))
	h.check(t, req(desc("detail", "d1")))
	h.check(t, req(desc("detail", "d2")))
	o := desc("x", "y")
	o.Limit = &LimitOverride{RequestsPerUnit: 1, Unit: "second"}
	h.check(t, req(o))
	h.check(t, req(o))
	h.check(t, req(desc("internal", "i")))
	for _, c := range []struct {
		rule, outcome string
		want          float64
	}{
		{"big", OutcomeAllowed, 12},
		{"ip", OutcomeAllowed, 100},
		{"shadow", OutcomeAllowed, 1},
		{"shadow", OutcomeShadowDenied, 1},
		{"detail=d1", OutcomeAllowed, 1},
		{"detail=d2", OutcomeAllowed, 1},
		{"detail", OutcomeAllowed, 0},
		{"override", OutcomeAllowed, 1},
		{"override", OutcomeDenied, 1},
		{"internal", OutcomeAllowed, 1},
	} {
		if got := h.decisions("test", c.rule, c.outcome); got != c.want {
			t.Errorf("decisions{rule=%q,outcome=%s} = %v, want %v", c.rule, c.outcome, got, c.want)
		}
	}
	// big=v0 and big=v1 took 6 of 10 each: none past 8.
	if got := testutil.ToFloat64(h.m.NearLimit.WithLabelValues("test", "big")); got != 0 {
		t.Errorf("near_limit{big} = %v, want 0", got)
	}
	for range 4 {
		h.check(t, req(desc("big", "v0")))
	}
	// Hits 7..10 of 10: the 9th and 10th leave less than 20%.
	if got := testutil.ToFloat64(h.m.NearLimit.WithLabelValues("test", "big")); got != 2 {
		t.Errorf("near_limit{big} = %v, want 2", got)
	}
	if got := testutil.CollectAndCount(h.m.Duration); got != 1 {
		t.Errorf("check duration histogram series = %d, want 1", got)
	}
	if n, err := testutil.GatherAndCount(h.reg, "sluice_check_duration_seconds"); err != nil || n != 1 {
		t.Errorf("registry: duration histogram count = %d, %v; want 1, nil", n, err)
	}
	h.m.ObserveReload(false, errors.New("bad file"))
	h.m.ObserveReload(true, nil)
	if got := testutil.ToFloat64(h.m.Reloads.WithLabelValues("failure")); got != 1 {
		t.Errorf("rule_reloads{failure} = %v, want 1", got)
	}
	if got := testutil.ToFloat64(h.m.ReloadOK); got != 1 {
		t.Errorf("rules_last_reload_success = %v after a good reload, want 1", got)
	}
	problems, err := testutil.GatherAndLint(h.reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %+v, want no problems", err, problems)
	}
}

func TestReloadSwapsRulesAndDropsStaleSeries(t *testing.T) {
	v1, err := rules.Parse("a.yaml", []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 1}}\n  - {key: gone, rate_limit: {unit: minute, requests_per_unit: 1}}\n"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	v2, err := rules.Parse("a.yaml", []byte("domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute, requests_per_unit: 3}}\n"), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var cur atomic.Pointer[rules.Snapshot]
	cur.Store(v1)
	h := newHarnessSnap(t, v1, DefaultConfig(), nil)
	h.eng.src = sourceFunc(cur.Load)
	r := Request{Domain: "d", Descriptors: []Descriptor{desc("k", "x")}}
	h.check(t, r)
	if resp := h.check(t, r); resp.OverallCode != CodeOverLimit {
		t.Fatalf("v1: second hit = %v, want OVER_LIMIT", resp.OverallCode)
	}
	h.check(t, Request{Domain: "d", Descriptors: []Descriptor{desc("gone", "x")}})
	cur.Store(v2)
	if resp := h.check(t, r); resp.OverallCode != CodeOK || resp.Statuses[0].Result.Remaining != 2 {
		t.Fatalf("v2: got %v remaining %d, want OK remaining 2 (a changed limit starts a fresh counter)", resp.OverallCode, resp.Statuses[0].Result.Remaining)
	}
	if n := testutil.CollectAndCount(h.m.Decisions); n != numOutcomes {
		t.Errorf("decision series after reload = %d, want %d (only rule k's)", n, numOutcomes)
	}
}

type sourceFunc func() *rules.Snapshot

func (f sourceFunc) Current() *rules.Snapshot { return f() }

func TestConcurrentChecksAdmitExactlyTheLimit(t *testing.T) {
	h := newHarness(t, testRules, DefaultConfig())
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				// big (10/min) on one key, plus a per-goroutine ip that
				// stays under its limit so batches mix keys.
				resp, err := h.eng.Check(context.Background(), req(desc("big", "shared"), desc("internal", fmt.Sprint(g, i))))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == CodeOK {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if got := allowed.Load(); got != 10 {
		t.Errorf("allowed = %d of 400 concurrent checks, want exactly 10", got)
	}
	if got := h.decisions("test", "big", OutcomeDenied); got != 390 {
		t.Errorf("decisions{big,denied} = %v, want 390", got)
	}
}

func TestReady(t *testing.T) {
	h := newHarness(t, testRules, DefaultConfig())
	if err := h.eng.Ready(context.Background()); err != nil {
		t.Errorf("Ready with rules and a memory store = %v, want nil", err)
	}
	snap, _ := rules.Parse("test.yaml", []byte(testRules), rules.Options{})
	fs := &failingStore{err: errStoreDown}
	fs.fail.Store(true)
	h2 := newHarnessSnap(t, snap, DefaultConfig(), fs)
	if err := h2.eng.Ready(context.Background()); !errors.Is(err, errStoreDown) {
		t.Errorf("Ready with a failing store = %v, want it to wrap %v", err, errStoreDown)
	}
	h3 := newHarnessSnap(t, nil, DefaultConfig(), nil)
	if err := h3.eng.Ready(context.Background()); err == nil {
		t.Error("Ready without rules = nil, want an error")
	}
}

func TestScaleLimit(t *testing.T) {
	tests := []struct {
		in       sluice.Limit
		replicas int
		want     sluice.Limit
	}{
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}, 1, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}, 3, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 4, Window: time.Minute}},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute}, 5, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute}},
		{sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 0, Window: time.Minute}, 5, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 0, Window: time.Minute}},
		{sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 100, Window: time.Second, Burst: 20}, 4,
			sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 25, Window: time.Second, Burst: 5}},
	}
	for _, tt := range tests {
		if got := scaleLimit(tt.in, tt.replicas); got != tt.want {
			t.Errorf("scaleLimit(%v, %d) = %v, want %v", tt.in, tt.replicas, got, tt.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig().Validate() = %v, want nil", err)
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"replicas", func(c *Config) { c.ExpectedReplicas = 0 }, "expected replicas: 0"},
		{"failure mode", func(c *Config) { c.DefaultFailureMode = rules.FailureDefault }, "default failure mode"},
		{"near limit", func(c *Config) { c.NearLimitRatio = 1.5 }, "near-limit ratio: 1.5"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", tt.name, err, tt.want)
		}
		if _, nerr := New(c, StaticRules{}, &countingStore{}, nil, nil); nerr == nil {
			t.Errorf("%s: New accepted an invalid config", tt.name)
		}
	}
}
