package service

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// newRedisHarness is newAdjustHarness over the real Redis at url (a fresh
// key prefix), with the store's clock the harness's fake one.
func newRedisHarness(t *testing.T, url, yaml string) *harness {
	t.Helper()
	snap, err := rules.Parse("a.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return newRedisHarnessSnap(t, url, snap)
}

// newRedisHarnessSnap is newRedisHarness of a compiled snapshot.
func newRedisHarnessSnap(t *testing.T, url string, snap *rules.Snapshot) *harness {
	t.Helper()
	clock := storetest.NewClock()
	st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second, Prefix: fmt.Sprintf("t%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := newHarnessSnap(t, snap, DefaultConfig(), st)
	h.clock = clock
	h.eng.cfg.Now = clock.Now
	return h
}

// TestAdjustRedis: charges, refunds, debt and resets (of one key and of a
// tenant, found by SCAN on every master) decide on Redis, single and
// Cluster, as on the memory store.
func TestAdjustRedis(t *testing.T) {
	t.Run("single", func(t *testing.T) { testAdjustRedis(t, redistest.Start(t).URL()) })
	t.Run("cluster", func(t *testing.T) { testAdjustRedis(t, redistest.StartCluster(t).URL()) })
}

func testAdjustRedis(t *testing.T, url string) {
	h := newRedisHarness(t, url, adjustRules)
	ctx := context.Background()
	d := desc("api_key", "acme")
	if st := h.charge(t, 3, d); st.Result.Remaining != 7 {
		t.Errorf("charge 3 of 10: remaining %d, want 7", st.Result.Remaining)
	}
	if st := h.look(t, d); st.Result.Remaining != 7 {
		t.Errorf("check after: remaining %d, want 7", st.Result.Remaining)
	}
	if st := h.charge(t, -5, d); st.Result.Remaining != 10 {
		t.Errorf("refund 5 of 3 spent: remaining %d, want 10 (never above the limit)", st.Result.Remaining)
	}
	h.charge(t, 25, d)
	if got := h.take(t, d); got != CodeOverLimit {
		t.Errorf("check in debt: %v, want OVER_LIMIT", got)
	}
	split := desc("api_key", "acme", "split", "x")
	if st := h.charge(t, 8, split); st.Result.Limit != 40 || st.Result.Remaining != 32 {
		t.Errorf("charge 8 over 4 sub-counters: remaining %d of %d, want 32 of 40", st.Result.Remaining, st.Result.Limit)
	}
	perValue := desc("api_key", "acme", "endpoint", "GET /a*[b]?") // glob bytes in a value
	deep := desc("region", "eu", "api_key", "acme")
	other := desc("api_key", "acme2")
	for _, x := range []Descriptor{perValue, deep, other} {
		h.charge(t, 2, x)
	}

	res, err := h.eng.Reset(ctx, Request{Domain: "api", Descriptors: []Descriptor{d}}, ResetOptions{})
	if err != nil || len(res.Keys) != 1 {
		t.Fatalf("Reset = %+v, %v; want one key", res, err)
	}
	if got := h.take(t, d); got != CodeOK {
		t.Errorf("check after reset: %v, want OK", got)
	}
	res, err = h.eng.ResetTenant(ctx, "acme", ResetOptions{})
	// acme's own counter (checked again above), the 4 sub-counters, the
	// per-value counter and the deeper rule's.
	if err != nil || len(res.Keys) != 7 || res.More {
		t.Fatalf("ResetTenant = %d keys %q, more %v, %v; want 7", len(res.Keys), res.Keys, res.More, err)
	}
	for _, x := range []Descriptor{d, split, perValue, deep} {
		if u := h.used(t, x); u != 0 {
			t.Errorf("%v after the tenant's reset: %d used, want 0", x.Entries, u)
		}
	}
	if u := h.used(t, other); u != 2 {
		t.Errorf("acme2 after acme's reset: %d used, want 2", u)
	}
}

func TestChargeConcurrentRedis(t *testing.T) {
	h := newRedisHarness(t, redistest.Start(t).URL(), "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n")
	testChargeConcurrent(t, h.eng)
}
