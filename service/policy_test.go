package service

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/tenant"
)

// keyPartRules has a rule of every shape a key can take: placements,
// sub-counters, a shared wildcard, a paired step, three levels, and bytes
// the layout escapes in the domain, keys, values and rule IDs.
const keyPartRules = `
domain: "we|ird{dom}"
descriptors:
  - key: "a=b"
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: hy
    rate_limit: {unit: second, requests_per_unit: 10, placement: hybrid}
  - key: lo
    rate_limit: {unit: minute, requests_per_unit: 10, placement: local, sub_counters: 3}
  - key: path
    value: "/api/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: t
    value: "x%y"
    descriptors:
      - key: "u|v"
        descriptors:
          - key: w
            rate_limit: {algorithm: token_bucket, unit: second, requests_per_unit: 5, burst: 9}
  - key: k
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, window: 10m, requests_per_unit: 3, pair_by: request_id}
`

// TestRuleKeyParts: the keys a policy builds from its parts made ready are
// those the key layout names (appendRuleKey, appendKey), for every
// sub-counter, with the rule's own limit and with another.
func TestRuleKeyParts(t *testing.T) {
	h := newHarness(t, keyPartRules, DefaultConfig())
	pol := h.eng.policy()
	const domain = "we|ird{dom}"
	other := sluice.Limit{Algorithm: sluice.GCRA, Quota: 7, Window: time.Minute, Burst: 3}
	for _, entries := range [][]rules.Entry{
		{{Key: "a=b", Value: "v|1{}"}},
		{{Key: "hy", Value: "h"}},
		{{Key: "lo", Value: "l=%"}},
		{{Key: "path", Value: "/api/x"}},
		{{Key: "t", Value: "x%y"}, {Key: "u|v", Value: "1"}, {Key: "w", Value: "z=}"}},
		{{Key: "k", Value: "key"}, {Key: "request_id", Value: "r1"}},
	} {
		r := pol.snap.Match(domain, entries)
		if r == nil {
			t.Fatalf("no rule matches %v", entries)
		}
		info := pol.rules[r]
		for sub := range max(1, r.SubCounters) {
			for _, own := range []*sluice.Limit{nil, &other} {
				got := string(info.appendKey(nil, entries, sub, own))
				want := string(appendRuleKey(nil, domain, entries, r, ruleMiddle(r), sub, own))
				if got != want {
					t.Errorf("rule %s, sub-counter %d, own limit %v: key %q, want %q", r.ID, sub, own, got, want)
				}
			}
		}
	}
	entries := []rules.Entry{{Key: "any|k", Value: "v{"}, {Key: "b", Value: "c=d"}}
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Hour}
	got := string(pol.domains[domain].appendGivenKey(nil, entries, lim))
	want := string(appendKey(nil, domain, entries, nil, string(overrideMiddle(lim))))
	if got != want {
		t.Errorf("a limit given in the request: key %q, want %q", got, want)
	}
}

// sourceRules are two generations of a rule file: the limit of key a is 1
// a minute in the first and 2 in the second.
const sourceRules = `
domain: api
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: %d}
`

func parseRules(t testing.TB, yaml string) *rules.Snapshot {
	t.Helper()
	s, err := rules.Parse("t.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	return s
}

// liveOverrides is Overrides and DenyLists without Overlay: asked per
// check, as an Overrides that is not an OverlaySource is.
type liveOverrides struct{ reg *tenant.Registry }

func (l liveOverrides) Resolve(r *rules.Rule, entries []rules.Entry) (*rules.TierLimit, rules.Tier, rules.Switch) {
	return l.reg.Resolve(r, entries)
}

func (l liveOverrides) DenyList(domain string) *rules.DenyList { return l.reg.DenyList(domain) }

// TestSourceChangeSeen: a change of each source the policy is compiled
// from — a rules reload, a tenant override, a kill switch, an admin deny
// entry — is seen by the next check, with nothing else to call; with an
// OverlaySource (compiled in) and with an Overrides asked per check.
func TestSourceChangeSeen(t *testing.T) {
	t.Run("overlay", func(t *testing.T) {
		testSourceChangeSeen(t, func(reg *tenant.Registry) Overrides { return reg })
	})
	t.Run("live", func(t *testing.T) {
		testSourceChangeSeen(t, func(reg *tenant.Registry) Overrides { return liveOverrides{reg} })
	})
}

func testSourceChangeSeen(t *testing.T, overrides func(*tenant.Registry) Overrides) {
	src := &swapRules{}
	src.p.Store(parseRules(t, fmt.Sprintf(sourceRules, 1)))
	reg := tenant.NewRegistry(nil, tenant.Options{})
	st := memory.New(memory.Options{})
	defer st.Close()
	cfg := DefaultConfig()
	cfg.Overrides = overrides(reg)
	e, err := New(cfg, src, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(tn string) Status {
		t.Helper()
		resp, err := e.Check(context.Background(), Request{Domain: "api", Descriptors: []Descriptor{desc("tenant", tn)}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0]
	}
	quota := func(st Status) uint32 {
		if st.CurrentLimit == nil {
			return 0
		}
		return st.CurrentLimit.RequestsPerUnit
	}
	steps := []struct {
		name   string
		change func()
		// the tenant checked, and what its status must say
		tenant string
		want   func(Status) error
	}{
		{"rules as loaded", func() {}, "a", func(s Status) error {
			if quota(s) != 1 {
				return fmt.Errorf("requests_per_unit %d, want 1", quota(s))
			}
			return nil
		}},
		{"rules reloaded", func() { src.p.Store(parseRules(t, fmt.Sprintf(sourceRules, 2))) }, "a", func(s Status) error {
			if quota(s) != 2 {
				return fmt.Errorf("requests_per_unit %d, want 2", quota(s))
			}
			return nil
		}},
		{"tenant override", func() {
			reg.Set(tenant.NewSnapshot([]tenant.Record{{Tenant: "a", Tier: rules.TierCustom, Overrides: []tenant.Override{
				{Domain: "api", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 7, Window: time.Minute}, RequestsPerUnit: 7, Unit: "minute"}}}}, nil, time.Now()))
		}, "a", func(s Status) error {
			if quota(s) != 7 {
				return fmt.Errorf("requests_per_unit %d, want the override's 7", quota(s))
			}
			return nil
		}},
		{"kill switch off", func() {
			reg.Set(tenant.NewSnapshot(nil, []tenant.RuleSwitch{{Domain: "api", Rule: "tenant", State: rules.SwitchOff}}, time.Now()))
		}, "a", func(s Status) error {
			if s.Rule != nil || s.CurrentLimit != nil {
				return fmt.Errorf("rule %v, limit %v: want none (switched off)", s.Rule, s.CurrentLimit)
			}
			return nil
		}},
		{"deny entry", func() {
			reg.Set(tenant.NewSnapshot(nil, nil, time.Now()).WithDeny([]tenant.DenyEntry{{Domain: "api", Key: "tenant", Value: "a"}}))
		}, "a", func(s Status) error {
			if s.Code != CodeOverLimit || s.Result.Reason != ReasonDenyList {
				return fmt.Errorf("code %v reason %q, want OVER_LIMIT deny_list", s.Code, s.Result.Reason)
			}
			return nil
		}},
		{"deny entry removed", func() { reg.Set(tenant.NewSnapshot(nil, nil, time.Now())) }, "a", func(s Status) error {
			if s.Code != CodeOK || quota(s) != 2 {
				return fmt.Errorf("code %v, requests_per_unit %d: want OK under the rule's 2", s.Code, quota(s))
			}
			return nil
		}},
	}
	for _, s := range steps {
		s.change()
		if err := s.want(check(s.tenant)); err != nil {
			t.Errorf("after %s: %v", s.name, err)
		}
	}
}

// genRules is one generation of rules for TestOnePolicyPerCheck: two
// rules with the limit 100+g.
const genRules = `
domain: api
tenant_key: tenant
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: %d}
    descriptors:
      - key: x
        rate_limit: {unit: minute, requests_per_unit: %d}
`

// TestOnePolicyPerCheck: while rules and tenant overlays are replaced as
// fast as they can be, every check decides by one whole policy. Generation
// g of the rules gives two rules the limit 100+g; generation g of the
// tenants gives tenants b and c an override of 100000+g. One check of
// four descriptors (two answered by the rules alone, two by overrides)
// must report one rule generation and one tenant generation: a check that
// read the rules or the tenants twice could mix two of either. The writer
// puts rules g, then tenants g in force; a policy reads the rules first,
// so its tenants are never older than its rules' generation − 1.
func TestOnePolicyPerCheck(t *testing.T) {
	const gens = 300
	snaps := make([]*rules.Snapshot, gens)
	overlays := make([]*tenant.Snapshot, gens)
	for g := range gens {
		snaps[g] = parseRules(t, fmt.Sprintf(genRules, 100+g, 100+g))
		ov := []tenant.Override{{Domain: "api", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: int64(100000 + g), Window: time.Minute}, RequestsPerUnit: uint32(100000 + g), Unit: "minute"}}
		overlays[g] = tenant.NewSnapshot([]tenant.Record{
			{Tenant: "b", Tier: rules.TierCustom, Overrides: ov},
			{Tenant: "c", Tier: rules.TierCustom, Overrides: ov},
		}, nil, time.Now())
	}
	src := &swapRules{}
	src.p.Store(snaps[0])
	reg := tenant.NewRegistry(nil, tenant.Options{})
	reg.Set(overlays[0])
	st := memory.New(memory.Options{})
	defer st.Close()
	cfg := DefaultConfig()
	cfg.Overrides = reg
	e, err := New(cfg, src, st, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Bool
	var wg sync.WaitGroup
	var started sync.WaitGroup // each checker's first check is done
	started.Add(2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer done.Store(true)
		started.Wait()
		for g := 1; g < gens; g++ {
			src.p.Store(snaps[g])
			reg.Set(overlays[g])
			for range 3 { // let checks run between generations
				if _, err := e.Check(context.Background(), Request{Domain: "api", Descriptors: []Descriptor{desc("tenant", "z")}}); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	var checks, mixedAges atomic.Int64
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := Request{Domain: "api", Hits: 0, Descriptors: []Descriptor{
				desc("tenant", "a"), desc("tenant", "b"), desc("tenant", "a", "x", "1"), desc("tenant", "c")}}
			first := true
			for first || !done.Load() {
				resp, err := e.Check(context.Background(), req)
				if first {
					first = false
					started.Done()
				}
				if err != nil {
					t.Error(err)
					return
				}
				var g [4]int
				for i, st := range resp.Statuses {
					g[i] = int(st.CurrentLimit.RequestsPerUnit)
				}
				rule1, rule2, ten1, ten2 := g[0]-100, g[2]-100, g[1]-100000, g[3]-100000
				checks.Add(1)
				if rule1 != rule2 || ten1 != ten2 {
					t.Errorf("one check saw rule generations %d and %d, tenant generations %d and %d", rule1, rule2, ten1, ten2)
					return
				}
				if ten1 < rule1-1 {
					t.Errorf("one check saw rule generation %d with tenant generation %d, older than the rules' previous", rule1, ten1)
					return
				}
				if ten1 != rule1 {
					mixedAges.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if checks.Load() == 0 {
		t.Fatal("no check ran")
	}
	t.Logf("%d checks, %d with the tenants of another generation than the rules (sources change one at a time)", checks.Load(), mixedAges.Load())
}

// TestCalendarPeriodCache: the period a rule's data caches answers as
// rules.Calendar.Limit does, at every instant, whatever the order in which
// instants come (a clock stepping back included).
func TestCalendarPeriodCache(t *testing.T) {
	if _, err := time.LoadLocation("America/New_York"); err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	h := newHarness(t, `
domain: api
descriptors:
  - key: d
    rate_limit: {calendar: day, time_zone: America/New_York, requests_per_unit: 9}
  - key: m
    rate_limit: {calendar: month, requests_per_unit: 9}
`, DefaultConfig())
	pol := h.eng.policy()
	for _, key := range []string{"d", "m"} {
		r := pol.snap.Match("api", []rules.Entry{{Key: key, Value: "x"}})
		info := pol.rules[r]
		day := time.Date(2026, 3, 8, 0, 0, 0, 0, r.Calendar.Location) // a 23-hour day in New York
		var instants []time.Time
		for _, base := range []time.Time{day, day.AddDate(0, 0, 1), time.Date(2026, 4, 1, 0, 0, 0, 0, r.Calendar.Location)} {
			instants = append(instants, base.Add(-time.Microsecond), base, base.Add(time.Microsecond), base.Add(12*time.Hour))
		}
		instants = append(instants, day.Add(-time.Microsecond), day.AddDate(0, 0, 2), day) // back, forward, back
		for _, at := range instants {
			for _, quota := range []int64{9, 4} {
				gotL, gotX := info.calendarLimit(at, quota)
				wantL, wantX := r.Calendar.Limit(at, quota)
				if gotL != wantL || gotX != wantX {
					t.Errorf("rule %s at %v, quota %d: (%v, %v), want (%v, %v)", key, at, quota, gotL, gotX, wantL, wantX)
				}
			}
		}
	}
}
