package service

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/tenant"
)

const tenantRules = `
domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 3
      tiers:
        pro: {requests_per_unit: 5}
    descriptors:
      - key: endpoint
        value: POST /orders
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 4}
`

// admitted checks req n times and returns how many were allowed.
func admitted(t *testing.T, h *harness, req Request, n int) int {
	t.Helper()
	got := 0
	for range n {
		if h.check(t, req).OverallCode == CodeOK {
			got++
		}
	}
	return got
}

func TestOverrides(t *testing.T) {
	h := newHarness(t, tenantRules, DefaultConfig())
	reg := tenant.NewRegistry(nil, tenant.Options{Now: h.clock.Now})
	h.setOverrides(reg)
	now := h.clock.Now()
	reg.Set(tenant.NewSnapshot([]tenant.Record{
		{Tenant: "pro-co", Tier: rules.TierPro},
		{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{
			{Descriptor: "", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}, RequestsPerUnit: 10, Unit: "minute"},
			{Descriptor: "endpoint:POST /orders", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1, Window: time.Minute}, RequestsPerUnit: 1, Unit: "minute",
				ExpiresAt: now.Add(time.Minute)},
		}},
		{Tenant: "later", Tier: rules.TierPro, EffectiveAt: now.Add(time.Hour)},
	}, []tenant.RuleSwitch{
		{Domain: "api", Rule: "remote_address", State: rules.SwitchShadow},
	}, now))

	one := func(kv ...string) Request { return Request{Domain: "api", Descriptors: []Descriptor{desc(kv...)}} }
	for _, tc := range []struct {
		name string
		req  Request
		rpu  uint32
		want int
	}{
		{"no record: the rule's limit", one("api_key", "nobody"), 3, 3},
		{"pro tier", one("api_key", "pro-co"), 5, 5},
		{"override raises", one("api_key", "acme"), 10, 10},
		{"override lowers", one("api_key", "acme", "endpoint", "POST /orders"), 1, 1},
		{"pro tier without a pro limit: the rule's", one("api_key", "pro-co", "endpoint", "POST /orders"), 2, 2},
		{"record not yet effective: free tier", one("api_key", "later"), 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.check(t, tc.req)
			if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.RequestsPerUnit != tc.rpu {
				t.Fatalf("CurrentLimit = %+v, want requests_per_unit %d", cl, tc.rpu)
			}
			if got := 1 + admitted(t, h, tc.req, 2*tc.want); got != tc.want {
				t.Errorf("admitted %d of %d, want %d", got, 2*tc.want+1, tc.want)
			}
		})
	}

	// The override expires: the rule's own limit (2/min) applies, on a
	// counter of its own.
	h.clock.Advance(time.Minute)
	req := one("api_key", "acme", "endpoint", "POST /orders")
	if got := admitted(t, h, req, 5); got != 2 {
		t.Errorf("after expiry: admitted %d of 5, want 2", got)
	}

	// Shadow switch: counted but never denied.
	addr := one("remote_address", "1.2.3.4")
	for i := range 6 {
		resp := h.check(t, addr)
		if resp.OverallCode != CodeOK {
			t.Fatalf("shadowed rule: check %d denied", i)
		}
		if i >= 4 && !resp.Statuses[0].Shadowed {
			t.Errorf("check %d: Shadowed = false, want true (over the limit of 4)", i)
		}
	}
	// Off switch: as if no rule matched.
	reg.Set(tenant.NewSnapshot(nil, []tenant.RuleSwitch{{Domain: "api", Rule: "remote_address", State: rules.SwitchOff}}, now))
	resp := h.check(t, addr)
	if st := resp.Statuses[0]; st.Code != CodeOK || st.Rule != nil || st.CurrentLimit != nil {
		t.Errorf("switched-off rule: status %+v, want OK without rule or limit", st)
	}
}

// TestOverrideKeys: an overridden limit counts under a key of its own, so
// a store never sees two limits for one key.
func TestOverrideKeys(t *testing.T) {
	snap, err := rules.Parse("t.yaml", []byte(tenantRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Match("api", []rules.Entry{{Key: "api_key", Value: "a"}, {Key: "endpoint", Value: "POST /orders"}})
	entries := []rules.Entry{{Key: "api_key", Value: "a|b"}, {Key: "endpoint", Value: "POST /orders"}}
	middle := ruleMiddle(r)
	plain := string(appendKey(nil, "api", entries, r.Path, middle))
	same := string(appendKeyWith(nil, "api", entries, r.Path, middle, r.Limit))
	if same != plain {
		t.Errorf("appendKeyWith with the rule's own limit = %q, want %q", same, plain)
	}
	other := string(appendKeyWith(nil, "api", entries, r.Path, middle, sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 7, Window: time.Minute}))
	want := "{api|api_key=a%7Cb}|r:api_key.endpoint=POST /orders|fixed_window:7:60000000|endpoint=POST /orders"
	if other != want {
		t.Errorf("appendKeyWith = %q, want %q", other, want)
	}
}

const benchTenantRules = `
domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 1000000
      tiers:
        pro: {requests_per_unit: 2000000}
`

// BenchmarkCheckOverrides is BenchmarkCheck's serial case with a tenant
// rule, with and without a registry of 10^6 tenants (half pro, one in 16
// with an override): the difference is what tenant resolution adds.
func BenchmarkCheckOverrides(b *testing.B) {
	snap, err := rules.Parse("t.yaml", []byte(benchTenantRules), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const tenants = 1_000_000
	recs := make([]tenant.Record, tenants)
	for i := range recs {
		recs[i] = tenant.Record{Tenant: "t" + strconv.Itoa(i), Tier: rules.Tier(i % 2)}
		if i%16 == 0 {
			recs[i].Overrides = []tenant.Override{{Descriptor: "", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1e6, Window: time.Minute}, RequestsPerUnit: 1e6, Unit: "minute"}}
		}
	}
	reg := tenant.NewRegistry(nil, tenant.Options{})
	reg.Set(tenant.NewSnapshot(recs, nil, time.Now()))
	reqs := make([]Request, benchKeys)
	for i := range reqs {
		reqs[i] = Request{Domain: "api", Descriptors: []Descriptor{{
			Entries: []rules.Entry{{Key: "api_key", Value: "t" + strconv.Itoa(i*97%tenants)}}}}}
	}
	for _, withRegistry := range []bool{false, true} {
		name := "rules-only"
		cfg := DefaultConfig()
		if withRegistry {
			name, cfg.Overrides = "registry-1e6", reg
		}
		b.Run(name, func(b *testing.B) {
			st := memory.New(memory.Options{})
			defer st.Close()
			eng, err := New(cfg, StaticRules{snap}, st, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			runtime.GC() // the garbage of building 10^6 records is not the check's
			b.ReportAllocs()
			cpu := cpuTime(b)
			i := 0
			for b.Loop() {
				if _, err := eng.Check(ctx, reqs[i%benchKeys]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			reportCPU(b, cpu)
		})
	}
}

// TestCalendarQuota: a monthly quota in Berlin resets at midnight on the
// 1st, local time, and reports that instant as its reset, to the µs.
func TestCalendarQuota(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	h := newHarness(t, `
domain: api
descriptors:
  - key: api_key
    rate_limit: {calendar: month, time_zone: Europe/Berlin, requests_per_unit: 3}
`, DefaultConfig())
	h.eng.cfg.Now = h.clock.Now
	h.clock.Set(time.Date(2026, 11, 30, 23, 0, 0, 0, berlin))
	req := Request{Domain: "api", Descriptors: []Descriptor{desc("api_key", "acme")}}
	if got := admitted(t, h, req, 5); got != 3 {
		t.Fatalf("November: admitted %d of 5, want 3", got)
	}
	st := h.check(t, req).Statuses[0]
	if st.Code != CodeOverLimit || st.Result.RetryAfter != time.Hour || st.Result.ResetAfter != time.Hour {
		t.Errorf("at 23:00 on Nov 30: code %v, retry %v, reset %v; want over limit, 1h, 1h (midnight in Berlin)", st.Code, st.Result.RetryAfter, st.Result.ResetAfter)
	}
	if cl := st.CurrentLimit; cl == nil || cl.Unit != "month" || cl.RequestsPerUnit != 3 {
		t.Errorf("current limit %+v, want 3 per month", cl)
	}
	h.clock.Advance(time.Hour - time.Microsecond)
	if h.check(t, req).OverallCode != CodeOverLimit {
		t.Error("1µs before midnight: allowed, want still denied")
	}
	h.clock.Advance(time.Microsecond)
	if got := admitted(t, h, req, 5); got != 3 {
		t.Errorf("December 1st 00:00: admitted %d of 5, want 3", got)
	}
	h.clock.Set(time.Date(2026, 12, 15, 12, 0, 0, 0, berlin))
	if got := admitted(t, h, req, 2); got != 0 {
		t.Errorf("December 15th: admitted %d, want 0 (December's quota is spent)", got)
	}
}
