package service

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/tenant"
)

// adjustRules has a counter of every kind Charge and Reset must find: a
// tenant's own, per value below the tenant key, bucket, sub-counters,
// concurrency, unlimited, shadow, calendar, and a tenant key below the
// first entry.
const adjustRules = `
domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
    descriptors:
      - key: endpoint
        rate_limit: {unit: minute, requests_per_unit: 4}
      - key: bucket
        rate_limit: {algorithm: token_bucket, unit: minute, requests_per_unit: 6}
      - key: split
        rate_limit: {unit: minute, requests_per_unit: 40, sub_counters: 4}
      - key: slots
        rate_limit: {algorithm: concurrency, unit: minute, requests_per_unit: 2}
      - key: free
        rate_limit: {unlimited: true}
      - key: trial
        shadow_mode: true
        rate_limit: {unit: minute, requests_per_unit: 2}
      - key: monthly
        rate_limit: {calendar: month, requests_per_unit: 100}
  - key: region
    descriptors:
      - key: api_key
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
`

func newAdjustHarness(t *testing.T) *harness {
	t.Helper()
	cfg := DefaultConfig()
	h := newHarness(t, adjustRules, cfg)
	h.eng.cfg.Now = h.clock.Now // calendar periods by the fake clock
	return h
}

// charge charges cost on one descriptor and returns its status.
func (h *harness) charge(t *testing.T, cost int64, d Descriptor) Status {
	t.Helper()
	resp, err := h.eng.Charge(context.Background(), ChargeRequest{Domain: "api", Descriptors: []ChargeDescriptor{{Entries: d.Entries, Limit: d.Limit, Cost: cost}}})
	if err != nil {
		t.Fatalf("Charge(%d, %v): %v", cost, d.Entries, err)
	}
	if len(resp.Statuses) != 1 {
		t.Fatalf("Charge: %d statuses for 1 descriptor", len(resp.Statuses))
	}
	return resp.Statuses[0]
}

// look checks one descriptor with zero hits and returns its status.
func (h *harness) look(t *testing.T, d Descriptor) Status {
	t.Helper()
	d.Hits = u64(0)
	return h.check(t, Request{Domain: "api", Descriptors: []Descriptor{d}}).Statuses[0]
}

// take checks one descriptor with one hit and returns the code.
func (h *harness) take(t *testing.T, d Descriptor) Code {
	t.Helper()
	return h.check(t, Request{Domain: "api", Descriptors: []Descriptor{d}}).OverallCode
}

func TestCharge(t *testing.T) {
	h := newAdjustHarness(t)
	for _, tc := range []struct {
		name          string
		d             Descriptor
		costs         []int64 // charged in order
		wantRemaining int64   // the last charge's status, and a check's look after
		wantLimit     int64
	}{
		{"charge then check sees less", desc("api_key", "a1"), []int64{3}, 7, 10},
		{"a refund gives back what was charged", desc("api_key", "a2"), []int64{8, -5}, 7, 10},
		{"a refund never goes past a fresh counter", desc("api_key", "a3"), []int64{2, -5}, 10, 10},
		{"a refund of a fresh counter gives nothing", desc("api_key", "a4"), []int64{-3}, 10, 10},
		{"a charge past the limit leaves none", desc("api_key", "a5"), []int64{25}, 0, 10},
		{"zero only reads", desc("api_key", "a6"), []int64{4, 0}, 6, 10},
		{"a rule below the tenant key", desc("api_key", "a7", "endpoint", "GET /x"), []int64{3}, 1, 4},
		{"a tenant key below the first entry", desc("region", "eu", "api_key", "a7"), []int64{2}, 3, 5},
		{"token bucket", desc("api_key", "a8", "bucket", "b"), []int64{4}, 2, 6},
		{"calendar quota", desc("api_key", "a9", "monthly", "m"), []int64{30}, 70, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st Status
			for _, c := range tc.costs {
				st = h.charge(t, c, tc.d)
			}
			if st.Skipped != "" || st.Rule == nil || st.Result.Remaining != tc.wantRemaining || st.Result.Limit != tc.wantLimit {
				t.Errorf("after charges %v: skipped %q, remaining %d of %d; want remaining %d of %d", tc.costs, st.Skipped, st.Result.Remaining, st.Result.Limit, tc.wantRemaining, tc.wantLimit)
			}
			look := h.look(t, tc.d)
			if look.Result.Remaining != tc.wantRemaining {
				t.Errorf("a check after charges %v: remaining %d, want %d", tc.costs, look.Result.Remaining, tc.wantRemaining)
			}
			if look.Result.ResetAfter != st.Result.ResetAfter {
				t.Errorf("reset after: charge says %v, check says %v", st.Result.ResetAfter, look.Result.ResetAfter)
			}
		})
	}

	t.Run("in debt, checks are denied until the window passes", func(t *testing.T) {
		d := desc("api_key", "debtor")
		h.charge(t, 25, d)
		if got := h.take(t, d); got != CodeOverLimit {
			t.Errorf("check in debt: %v, want OVER_LIMIT", got)
		}
		h.clock.Advance(time.Minute)
		if got := h.take(t, d); got != CodeOK {
			t.Errorf("check a window later: %v, want OK (a fixed window forgets its debt)", got)
		}
	})

	t.Run("a token bucket in debt refills the debt first", func(t *testing.T) {
		d := desc("api_key", "debtor", "bucket", "b")
		h.charge(t, 12, d) // 6 over the burst of 6
		h.clock.Advance(time.Minute)
		if got := h.take(t, d); got != CodeOverLimit {
			t.Errorf("a minute later (refilled 6, owing 6): %v, want OVER_LIMIT", got)
		}
		h.clock.Advance(time.Minute)
		if st := h.look(t, d); st.Result.Remaining != 6 {
			t.Errorf("two minutes later: remaining %d, want the full 6", st.Result.Remaining)
		}
	})

	t.Run("shadow rules are charged", func(t *testing.T) {
		d := desc("api_key", "s1", "trial", "x")
		if st := h.charge(t, 2, d); st.Skipped != "" || st.Result.Remaining != 0 {
			t.Errorf("charge of a shadow rule: skipped %q, remaining %d; want charged, 0", st.Skipped, st.Result.Remaining)
		}
		resp := h.check(t, Request{Domain: "api", Descriptors: []Descriptor{d}})
		if st := resp.Statuses[0]; resp.OverallCode != CodeOK || !st.Shadowed {
			t.Errorf("check after: %v shadowed %v; want OK, shadowed (the shadow rule is spent)", resp.OverallCode, st.Shadowed)
		}
	})

	t.Run("sub-counters share the cost", func(t *testing.T) {
		d := desc("api_key", "s2", "split", "x")
		st := h.charge(t, 8, d)
		if st.Result.Limit != 40 || st.Result.Remaining != 32 {
			t.Errorf("charge 8 over 4 sub-counters of 10: remaining %d of %d, want 32 of 40", st.Result.Remaining, st.Result.Limit)
		}
		for range 8 { // whichever sub-counter a check picks, 2 of its 10 are spent
			if look := h.look(t, d); look.Result.Limit != 10 || look.Result.Remaining != 8 {
				t.Fatalf("check of one sub-counter: remaining %d of %d, want 8 of 10", look.Result.Remaining, look.Result.Limit)
			}
		}
		if st := h.charge(t, -7, d); st.Result.Remaining != 39 {
			t.Errorf("refund 7: remaining %d, want 39", st.Result.Remaining)
		}
	})

	t.Run("a limit given in the request", func(t *testing.T) {
		d := desc("custom", "c")
		d.Limit = &LimitOverride{RequestsPerUnit: 5, Unit: "minute"}
		if st := h.charge(t, 2, d); st.Skipped != "" || st.Result.Remaining != 3 {
			t.Errorf("charge: skipped %q, remaining %d; want 3", st.Skipped, st.Result.Remaining)
		}
		if look := h.look(t, d); look.Result.Remaining != 3 {
			t.Errorf("check after: remaining %d, want 3", look.Result.Remaining)
		}
	})

	t.Run("skipped", func(t *testing.T) {
		resp, err := h.eng.Charge(context.Background(), ChargeRequest{Domain: "api", Descriptors: []ChargeDescriptor{
			{Entries: desc("api_key", "k", "free", "x").Entries, Cost: 5},
			{Entries: desc("api_key", "k", "slots", "x").Entries, Cost: 5},
			{Entries: desc("nothing", "x").Entries, Cost: 5},
			{Entries: desc("api_key", "k").Entries, Cost: 5},
		}})
		if err != nil {
			t.Fatal(err)
		}
		var got []Skip
		for _, st := range resp.Statuses {
			got = append(got, st.Skipped)
		}
		want := []Skip{SkipUnlimited, SkipConcurrency, SkipNoLimit, ""}
		if !slices.Equal(got, want) {
			t.Errorf("skipped = %q, want %q", got, want)
		}
		if rem := resp.Statuses[3].Result.Remaining; rem != 5 {
			t.Errorf("the charged descriptor beside them: remaining %d, want 5", rem)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		before := testutil.ToFloat64(h.m.Charged.WithLabelValues("api", "charge"))
		h.charge(t, 4, desc("api_key", "m1"))
		h.charge(t, -3, desc("api_key", "m1"))
		if got := testutil.ToFloat64(h.m.Charged.WithLabelValues("api", "charge")) - before; got != 4 {
			t.Errorf("sluice_charged_units_total{action=charge} grew by %v, want 4", got)
		}
		if got := testutil.ToFloat64(h.m.Charged.WithLabelValues("api", "refund")); got < 3 {
			t.Errorf("sluice_charged_units_total{action=refund} = %v, want at least 3", got)
		}
	})
}

func TestChargeTenantOverride(t *testing.T) {
	h := newAdjustHarness(t)
	reg := tenant.NewRegistry(nil, tenant.Options{Now: h.clock.Now})
	h.setOverrides(reg)
	reg.Set(tenant.NewSnapshot([]tenant.Record{{Tenant: "big", Tier: rules.TierCustom, Overrides: []tenant.Override{
		{Descriptor: "", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 50, Window: time.Minute}, RequestsPerUnit: 50, Unit: "minute"},
	}}}, nil, h.clock.Now()))
	d := desc("api_key", "big")
	st := h.charge(t, 20, d)
	if st.Result.Limit != 50 || st.Result.Remaining != 30 || st.CurrentLimit.RequestsPerUnit != 50 {
		t.Errorf("charge of an overridden tenant: remaining %d of %d (current %d), want 30 of 50", st.Result.Remaining, st.Result.Limit, st.CurrentLimit.RequestsPerUnit)
	}
	if look := h.look(t, d); look.Result.Remaining != 30 {
		t.Errorf("check after: remaining %d, want 30 (the override's counter)", look.Result.Remaining)
	}
}

func TestChargeInvalid(t *testing.T) {
	h := newAdjustHarness(t)
	for _, tc := range []struct {
		name string
		req  ChargeRequest
	}{
		{"empty domain", ChargeRequest{Descriptors: []ChargeDescriptor{{Entries: desc("api_key", "a").Entries, Cost: 1}}}},
		{"no descriptors", ChargeRequest{Domain: "api"}},
		{"cost too high", ChargeRequest{Domain: "api", Descriptors: []ChargeDescriptor{{Entries: desc("api_key", "a").Entries, Cost: algorithm.MaxExact + 1}}}},
		{"refund too high", ChargeRequest{Domain: "api", Descriptors: []ChargeDescriptor{{Entries: desc("api_key", "a").Entries, Cost: -algorithm.MaxExact - 1}}}},
		{"value too long", ChargeRequest{Domain: "api", Descriptors: []ChargeDescriptor{{Entries: []rules.Entry{{Key: "api_key", Value: strings.Repeat("x", DefaultMaxValueBytes+1)}}, Cost: 1}}}},
	} {
		if _, err := h.eng.Charge(context.Background(), tc.req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%s: err = %v, want ErrInvalidRequest", tc.name, err)
		}
	}
}

func TestChargeStoreFailure(t *testing.T) {
	snap, err := rules.Parse("a.yaml", []byte(adjustRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fs := &failingStore{err: errStoreDown}
	fs.fail.Store(true)
	h := newHarnessSnap(t, snap, DefaultConfig(), fs)
	_, err = h.eng.Charge(context.Background(), ChargeRequest{Domain: "api", Descriptors: []ChargeDescriptor{{Entries: desc("api_key", "a").Entries, Cost: 1}}})
	if !errors.Is(err, errStoreDown) {
		t.Errorf("Charge with the store down: %v, want an error wrapping the store's", err)
	}
}

// TestChargeConcurrent: concurrent charges are each applied exactly once.
func TestChargeConcurrent(t *testing.T) {
	h := newHarness(t, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n", DefaultConfig())
	testChargeConcurrent(t, h.eng)
}

func testChargeConcurrent(t *testing.T, eng *Engine) {
	t.Helper()
	const workers, each = 8, 50
	d := ChargeDescriptor{Entries: []rules.Entry{{Key: "k", Value: "shared"}}}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				c := d
				c.Cost = 3
				if (w+i)%5 == 0 {
					c.Cost = 7
				}
				if _, err := eng.Charge(context.Background(), ChargeRequest{Domain: "api", Descriptors: []ChargeDescriptor{c}}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := int64(0)
	for w := range workers {
		for i := range each {
			if (w+i)%5 == 0 {
				want += 7
			} else {
				want += 3
			}
		}
	}
	resp, err := eng.Check(context.Background(), Request{Domain: "api", Descriptors: []Descriptor{{Entries: d.Entries, Hits: u64(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Statuses[0].Result.Limit - resp.Statuses[0].Result.Remaining; got != want {
		t.Errorf("after %d concurrent charges: %d used, want %d", workers*each, got, want)
	}
}

func TestReset(t *testing.T) {
	h := newAdjustHarness(t)
	ctx := context.Background()
	one := func(d Descriptor) Request { return Request{Domain: "api", Descriptors: []Descriptor{d}} }

	t.Run("one key", func(t *testing.T) {
		d := desc("api_key", "r1")
		for range 10 {
			h.take(t, d)
		}
		if got := h.take(t, d); got != CodeOverLimit {
			t.Fatalf("11th check: %v, want OVER_LIMIT", got)
		}
		res, err := h.eng.Reset(ctx, one(d), ResetOptions{})
		if err != nil || len(res.Keys) != 1 || res.More {
			t.Fatalf("Reset = %+v, %v; want one key", res, err)
		}
		if st := h.look(t, d); st.Result.Remaining != 10 {
			t.Errorf("after reset: remaining %d, want 10", st.Result.Remaining)
		}
	})

	t.Run("every sub-counter", func(t *testing.T) {
		d := desc("api_key", "r2", "split", "x")
		h.charge(t, 40, d)
		var seen []string
		res, err := h.eng.Reset(ctx, one(d), ResetOptions{Before: func(_ context.Context, keys []string, more bool) error {
			seen = slices.Clone(keys)
			return nil
		}})
		if err != nil || len(res.Keys) != 4 || !slices.Equal(seen, res.Keys) {
			t.Fatalf("Reset = %+v, %v, Before saw %q; want the 4 sub-counters", res, err, seen)
		}
		if st := h.charge(t, 0, d); st.Result.Remaining != 40 {
			t.Errorf("after reset: remaining %d of the 4 sub-counters, want 40", st.Result.Remaining)
		}
	})

	t.Run("Before fails: nothing is reset", func(t *testing.T) {
		d := desc("api_key", "r3")
		h.charge(t, 10, d)
		errAudit := errors.New("audit down (test)")
		_, err := h.eng.Reset(ctx, one(d), ResetOptions{Before: func(context.Context, []string, bool) error { return errAudit }})
		if !errors.Is(err, errAudit) {
			t.Errorf("Reset: %v, want Before's error", err)
		}
		if st := h.look(t, d); st.Result.Remaining != 0 {
			t.Errorf("after a refused reset: remaining %d, want 0 (nothing reset)", st.Result.Remaining)
		}
	})

	t.Run("no limit: nothing to reset, Before not called", func(t *testing.T) {
		called := false
		res, err := h.eng.Reset(ctx, one(desc("nothing", "x")), ResetOptions{Before: func(context.Context, []string, bool) error { called = true; return nil }})
		if err != nil || len(res.Keys) != 0 || called {
			t.Errorf("Reset = %+v, %v, Before called %v; want nothing", res, err, called)
		}
	})

	t.Run("a tenant override's counter", func(t *testing.T) {
		reg := tenant.NewRegistry(nil, tenant.Options{Now: h.clock.Now})
		reg.Set(tenant.NewSnapshot([]tenant.Record{{Tenant: "r4", Tier: rules.TierCustom, Overrides: []tenant.Override{
			{Descriptor: "", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 2, Window: time.Minute}, RequestsPerUnit: 2, Unit: "minute"},
		}}}, nil, h.clock.Now()))
		h.setOverrides(reg)
		t.Cleanup(func() { h.setOverrides(nil) })
		d := desc("api_key", "r4")
		h.take(t, d)
		h.take(t, d)
		if got := h.take(t, d); got != CodeOverLimit {
			t.Fatalf("3rd check at the override's 2: %v, want OVER_LIMIT", got)
		}
		if _, err := h.eng.Reset(ctx, one(d), ResetOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := h.take(t, d); got != CodeOK {
			t.Errorf("after reset: %v, want OK", got)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		if _, err := h.eng.Reset(ctx, Request{Domain: "api"}, ResetOptions{}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Reset without descriptors: %v, want ErrInvalidRequest", err)
		}
	})
}

// used is how much of d's limit is spent (of every sub-counter), read
// without charging.
func (h *harness) used(t *testing.T, d Descriptor) int64 {
	t.Helper()
	st := h.charge(t, 0, d)
	return st.Result.Limit - st.Result.Remaining
}

func TestResetTenant(t *testing.T) {
	h := newAdjustHarness(t)
	reg := tenant.NewRegistry(nil, tenant.Options{Now: h.clock.Now})
	reg.Set(tenant.NewSnapshot([]tenant.Record{{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{
		{Descriptor: "endpoint", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 8, Window: time.Minute}, RequestsPerUnit: 8, Unit: "minute"},
	}}}, nil, h.clock.Now()))
	h.setOverrides(reg)
	ctx := context.Background()
	requestLimit := desc("api_key", "acme", "custom", "c")
	requestLimit.Limit = &LimitOverride{RequestsPerUnit: 5, Unit: "minute"}
	acme := []Descriptor{
		desc("api_key", "acme"),
		desc("api_key", "acme", "endpoint", "GET /a"), // per value, with the tenant's override
		desc("api_key", "acme", "endpoint", "GET /b"),
		desc("api_key", "acme", "bucket", "b"),
		desc("api_key", "acme", "monthly", "m"),
		desc("region", "eu", "api_key", "acme"), // the tenant below the first entry
		desc("region", "us", "api_key", "acme"),
		requestLimit, // a limit given in a request, under the tenant's tag
	}
	others := []Descriptor{
		desc("api_key", "acme2"),
		desc("api_key", "acme2", "endpoint", "GET /a"),
		desc("api_key", "other", "split", "x"),
		desc("region", "eu", "api_key", "other"),
		desc("remote_address", "acme"),
	}
	split := desc("api_key", "acme", "split", "x")
	for _, d := range append(slices.Clone(acme), others...) {
		h.charge(t, 2, d)
	}
	h.charge(t, 40, split) // all 4 sub-counters
	// 8 counters above, and the 4 sub-counters.
	const wantKeys = 12

	t.Run("bounded", func(t *testing.T) {
		res, err := h.eng.ResetTenant(ctx, "acme", ResetOptions{MaxKeys: 5})
		if err != nil || len(res.Keys) != 5 || !res.More {
			t.Fatalf("ResetTenant(MaxKeys 5) = %d keys, more %v, %v; want 5, more", len(res.Keys), res.More, err)
		}
	})
	t.Run("the rest", func(t *testing.T) {
		var audited []string
		res, err := h.eng.ResetTenant(ctx, "acme", ResetOptions{Before: func(_ context.Context, keys []string, _ bool) error {
			audited = slices.Clone(keys)
			return nil
		}})
		if err != nil || len(res.Keys) != wantKeys-5 || res.More {
			t.Fatalf("ResetTenant = %d keys, more %v, %v; want %d, no more", len(res.Keys), res.More, err, wantKeys-5)
		}
		if !slices.Equal(audited, res.Keys) {
			t.Errorf("Before saw %q, reset %q", audited, res.Keys)
		}
		for _, k := range res.Keys {
			if !strings.Contains(k, "=acme}") && !strings.Contains(k, "=acme|") {
				t.Errorf("reset key %q is not acme's", k)
			}
		}
	})
	for _, d := range append(acme, split) {
		if u := h.used(t, d); u != 0 {
			t.Errorf("acme's %v: %d used after the reset, want 0", d.Entries, u)
		}
	}
	for _, d := range others {
		if u := h.used(t, d); u != 2 {
			t.Errorf("%v: %d used after acme's reset, want 2 (untouched)", d.Entries, u)
		}
	}
	if res, err := h.eng.ResetTenant(ctx, "acme", ResetOptions{}); err != nil || len(res.Keys) != 0 || res.More {
		t.Errorf("ResetTenant again = %+v, %v; want nothing left", res, err)
	}
	if got := testutil.ToFloat64(h.m.Resets.WithLabelValues("api")); got != wantKeys {
		t.Errorf("sluice_counters_reset_total{domain=api} = %v, want %d", got, wantKeys)
	}

	t.Run("invalid", func(t *testing.T) {
		if _, err := h.eng.ResetTenant(ctx, "", ResetOptions{}); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("ResetTenant(\"\"): %v, want ErrInvalidRequest", err)
		}
	})
}

// unlisted hides the store's KeyLister.
type unlisted struct{ sluice.Store }

func TestResetTenantNeedsKeyLister(t *testing.T) {
	snap, err := rules.Parse("a.yaml", []byte(adjustRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	h := newHarnessSnap(t, snap, DefaultConfig(), unlisted{m})
	if _, err := h.eng.ResetTenant(context.Background(), "acme", ResetOptions{}); !errors.Is(err, ErrNoKeyLister) {
		t.Errorf("ResetTenant on a store without KeyLister: %v, want ErrNoKeyLister", err)
	}
	hp := newHarnessSnap(t, snap, DefaultConfig(), &compose.Placed{Global: unlisted{m}})
	if _, err := hp.eng.ResetTenant(context.Background(), "acme", ResetOptions{}); !errors.Is(err, ErrNoKeyLister) {
		t.Errorf("ResetTenant on a Placed store without KeyLister: %v, want ErrNoKeyLister", err)
	}
}

func TestTenantEntries(t *testing.T) {
	h := newAdjustHarness(t)
	snap := h.eng.src.Current()
	rule := func(id string) *rules.Rule {
		for _, r := range snap.Rules() {
			if r.ID == id {
				return r
			}
		}
		t.Fatalf("no rule %s", id)
		return nil
	}
	for _, d := range []Descriptor{
		desc("api_key", "acme", "endpoint", "GET /a|b=c"), // bytes the key layout escapes
		desc("api_key", "acme", "endpoint", "GET /b"),
		desc("api_key", "acme2", "endpoint", "GET /c"),
		desc("region", "eu", "api_key", "acme"),
		desc("region", "eu", "api_key", "acme2"),
		desc("api_key", "acme", "split", "y"),
	} {
		h.charge(t, 1, d)
	}
	h.charge(t, 40, desc("api_key", "acme", "split", "x"))
	ctx := context.Background()
	for _, tc := range []struct {
		rule string
		max  int
		want []string
		more bool
	}{
		{"api_key.endpoint", 10, []string{"api_key=acme endpoint=GET /a|b=c", "api_key=acme endpoint=GET /b"}, false},
		{"region.api_key", 10, []string{"region=eu api_key=acme"}, false},
		{"api_key.split", 10, []string{"api_key=acme split=x", "api_key=acme split=y"}, false},
		{"api_key.endpoint", 1, nil, true}, // one of the two
	} {
		got, more, err := h.eng.TenantEntries(ctx, rule(tc.rule), "acme", tc.max)
		if err != nil {
			t.Fatalf("TenantEntries(%s): %v", tc.rule, err)
		}
		var names []string
		for _, es := range got {
			var parts []string
			for _, e := range es {
				parts = append(parts, e.Key+"="+e.Value)
			}
			names = append(names, strings.Join(parts, " "))
		}
		slices.Sort(names)
		if tc.want == nil {
			if len(names) != 1 || more != tc.more {
				t.Errorf("TenantEntries(%s, max %d) = %q, more %v; want one, more", tc.rule, tc.max, names, more)
			}
			continue
		}
		if !slices.Equal(names, tc.want) || more != tc.more {
			t.Errorf("TenantEntries(%s) = %q, more %v; want %q, more %v", tc.rule, names, more, tc.want, tc.more)
		}
	}
}

func TestParseKey(t *testing.T) {
	snap, err := rules.Parse("a.yaml", []byte(adjustRules+`  - key: "we|ird%"
    descriptors:
      - key: "x}{"
        value: "v|%"
        rate_limit: {unit: second, requests_per_unit: 1, placement: local}
`), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range snap.Rules() {
		if r.Unlimited {
			continue
		}
		entries := make([]rules.Entry, len(r.Path))
		for i, st := range r.Path {
			entries[i] = rules.Entry{Key: st.Key, Value: st.Value + "|%=}{v"}
			if st.Kind == rules.MatchExact {
				entries[i].Value = st.Value
			}
		}
		for _, own := range []*sluice.Limit{nil, {Algorithm: sluice.GCRA, Quota: 7, Window: time.Minute, Burst: 9}} {
			key := string(appendRuleKey(nil, "api", entries, r, ruleMiddle(r), 1, own))
			k, ok := parseKey(key)
			if !ok {
				t.Errorf("parseKey(%q) failed", key)
				continue
			}
			wantLimit := r.Limit
			if own != nil {
				wantLimit = *own
			}
			var got []rules.Entry
			for _, kv := range append([]string{k.first}, k.rest...) {
				e, _ := entry(kv)
				got = append(got, e)
			}
			if k.limit != wantLimit || k.rule != string(appendEscapedBut(nil, r.ID, '=')) || k.sub != (r.SubCounters > 1) || !slices.Equal(got, entries) {
				t.Errorf("parseKey(%q) = limit %v rule %q sub %v entries %q; want %v %q %v %q", key, k.limit, k.rule, k.sub, got, wantLimit, r.ID, r.SubCounters > 1, entries)
			}
		}
	}
	for _, bad := range []string{"", "x", "{a|b}", "{a|b=c}|r:x", "{a|b=c}|r:x|fixed_window:1", "{a|b=c}|q|fixed_window:1:1000000", "{a|b=c}|o|nope:1:1", "{ready}"} {
		if _, ok := parseKey(bad); ok {
			t.Errorf("parseKey(%q) = ok, want not one of the engine's keys", bad)
		}
	}
}

func TestPlacedKeys(t *testing.T) {
	mk := func() *memory.Store {
		m := memory.New(memory.Options{})
		t.Cleanup(func() { m.Close() })
		return m
	}
	g, l := mk(), mk()
	p := &compose.Placed{Global: g, Local: l}
	lim := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Minute}
	ops := []sluice.Op{{Key: "{a}1", Limit: lim, Cost: 1}, {Key: "l{a}2", Limit: lim, Cost: 1}, {Key: "h{a}3", Limit: lim, Cost: 1}}
	if err := p.Take(context.Background(), ops, make([]sluice.Result, len(ops))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"{a}", []string{"{a}1"}},
		{"l{a}", []string{"l{a}2"}},
		{"h{a}", []string{"h{a}3"}}, // no hybrid store: kept in the global one
		{"", []string{"h{a}3", "l{a}2", "{a}1"}},
	} {
		got, more, err := p.Keys(context.Background(), tc.prefix, 10)
		slices.Sort(got)
		if err != nil || more || !slices.Equal(got, tc.want) {
			t.Errorf("Keys(%q) = %q, %v, %v; want %q", tc.prefix, got, more, err, tc.want)
		}
	}
	if got, more, err := p.Keys(context.Background(), "", 2); err != nil || len(got) != 2 || !more {
		t.Errorf("Keys(\"\", 2) = %q, more %v, %v; want 2 keys and more", got, more, err)
	}
}
