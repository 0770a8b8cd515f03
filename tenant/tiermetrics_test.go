package tenant

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/service/promstats"
	"github.com/sluice-rl/sluice/store/memory"
)

// TestDecisionsByTier: the engine counts each decision of a tenant's rule
// under the tenant's tier (quota use by tier), and nothing for other rules.
func TestDecisionsByTier(t *testing.T) {
	rs := testSnapshot(t)
	reg := NewRegistry(nil, Options{})
	reg.Set(NewSnapshot([]Record{{Tenant: "acme", Tier: rules.TierPro}}, nil, time.Now()))
	ms := memory.New(memory.Options{})
	defer ms.Close()
	m := promstats.New(nil)
	cfg := service.DefaultConfig()
	cfg.Overrides = reg
	eng, err := service.New(cfg, service.StaticRules{Snapshot: rs}, ms, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	check := func(kv ...string) {
		t.Helper()
		var es []rules.Entry
		for i := 0; i+1 < len(kv); i += 2 {
			es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
		}
		if _, err := eng.Check(context.Background(), service.Request{Domain: "api", Descriptors: []service.Descriptor{{Entries: es}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		check("api_key", "acme") // pro: 1000 a minute
	}
	for range 52 {
		check("api_key", "nobody") // no record: free, 50 a minute
	}
	check("remote_address", "1.2.3.4") // not a tenant's rule
	if n := testutil.CollectAndCount(m.Tiers); n != 3 {
		t.Errorf("tier series = %d, want 3 (pro/allowed, free/allowed, free/denied)", n)
	}
	for _, c := range []struct {
		tier, outcome string
		want          float64
	}{{"pro", "allowed", 3}, {"free", "allowed", 50}, {"free", "denied", 2}, {"pro", "denied", 0}} {
		if got := testutil.ToFloat64(m.Tiers.WithLabelValues(c.tier, c.outcome)); got != c.want {
			t.Errorf("sluice_tier_decisions_total{tier=%s,outcome=%s} = %v, want %v", c.tier, c.outcome, got, c.want)
		}
	}
}
