package pg

import (
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/tenant"
)

// names lists the embedded migrations in order.
func names(t *testing.T) []string {
	t.Helper()
	paths, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	return paths
}

// twoRules returns the rule at the tenant key of domains api and billing:
// one path, "", in two domains.
func twoRules(t *testing.T) (api, billing *rules.Rule) {
	t.Helper()
	for _, d := range []string{"api", "billing"} {
		snap, err := rules.Parse(d+".yaml", []byte("domain: "+d+`
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 100}
`), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := snap.Match(d, []rules.Entry{{Key: "api_key", Value: "x"}})
		if d == "api" {
			api = r
		} else {
			billing = r
		}
	}
	return api, billing
}

// quotaOf is the quota rule r enforces for tenant name in snap (0: the
// rule's own).
func quotaOf(snap *tenant.Snapshot, r *rules.Rule, name string) int64 {
	tl, _ := snap.Resolve(r, []rules.Entry{{Key: "api_key", Value: name}}, time.Now)
	if tl == nil {
		return 0
	}
	return tl.Limit.Quota
}

func loadSnapshot(t *testing.T, s *Store) *tenant.Snapshot {
	t.Helper()
	var recs []tenant.Record
	if err := s.LoadAll(ctxT(t), func(r *tenant.Record) error { recs = append(recs, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	return tenant.NewSnapshot(recs, nil, time.Now())
}

func TestOverrideDomains(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("two domains, one path", func(t *testing.T) {
		s := migrated(t, srv)
		ctx := ctxT(t)
		api, billing := twoRules(t)
		ov := func(domain string, n int64) tenant.Override {
			o := override("", n)
			o.Domain = domain
			return o
		}
		if _, err := s.Put(ctx, "alice", tenant.Record{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{ov("api", 7)}}); err != nil {
			t.Fatal(err)
		}
		snap := loadSnapshot(t, s)
		if got := quotaOf(snap, api, "acme"); got != 7 {
			t.Errorf("api: quota %d, want the override's 7", got)
		}
		if got := quotaOf(snap, billing, "acme"); got != 0 {
			t.Errorf("billing: quota %d, want the rule's own (an override of api must not touch billing)", got)
		}
		// Both domains, one path: two rows, each read back with its domain.
		rec, err := s.Put(ctx, "alice", tenant.Record{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{ov("billing", 9), ov("api", 8)}})
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Overrides) != 2 || rec.Overrides[0].Domain != "api" || rec.Overrides[1].Domain != "billing" {
			t.Fatalf("overrides read back %+v, want api's then billing's", rec.Overrides)
		}
		snap = loadSnapshot(t, s)
		if a, b := quotaOf(snap, api, "acme"), quotaOf(snap, billing, "acme"); a != 8 || b != 9 {
			t.Errorf("quotas api %d, billing %d; want 8, 9", a, b)
		}
		// Replacing the set drops the row of the domain left out.
		if _, err := s.Put(ctx, "alice", tenant.Record{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{ov("billing", 9)}}); err != nil {
			t.Fatal(err)
		}
		snap = loadSnapshot(t, s)
		if a, b := quotaOf(snap, api, "acme"), quotaOf(snap, billing, "acme"); a != 0 || b != 9 {
			t.Errorf("after dropping api's: quotas api %d, billing %d; want 0 (own), 9", a, b)
		}
		log, err := s.AuditLog(ctx, "tenant:acme", 10)
		if err != nil || len(log) != 3 || !strings.Contains(string(log[2].After), `"domain": "billing"`) {
			t.Errorf("audit = %d rows, %v; want 3, the last naming domain billing: %s", len(log), err, lastAfter(log))
		}
	})
	t.Run("migration of an old row", func(t *testing.T) {
		s := open(t, srv.NewDatabase(t))
		ctx := ctxT(t)
		if _, err := s.migrate(ctx, "0001_tenants"); err != nil {
			t.Fatal(err)
		}
		// A row as 0001 stored it: no domain.
		if _, err := s.pool.Exec(ctx, `INSERT INTO sluice_tenants (tenant, tier) VALUES ('old', 'custom')`); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(ctx, `INSERT INTO sluice_overrides (tenant, descriptor, requests_per_unit, unit, window_us, algorithm)
			VALUES ('old', '', 5, 'minute', 60000000, 'fixed_window')`); err != nil {
			t.Fatal(err)
		}
		applied, err := s.Migrate(ctx)
		if err != nil || len(applied) != len(names(t))-1 {
			t.Fatalf("Migrate = %v, %v; want the migrations after 0001", applied, err)
		}
		rec, found, err := s.Load(ctx, "old")
		if err != nil || !found || len(rec.Overrides) != 1 || rec.Overrides[0].Domain != tenant.AnyDomain || rec.Overrides[0].Limit != (sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 5, Window: time.Minute}) {
			t.Fatalf("old row after migration: %+v, %v, %v; want one override of domain %q, 5/minute", rec, found, err, tenant.AnyDomain)
		}
		// It keeps its effect: every domain's rule of that path.
		api, billing := twoRules(t)
		snap := loadSnapshot(t, s)
		if a, b := quotaOf(snap, api, "old"), quotaOf(snap, billing, "old"); a != 5 || b != 5 {
			t.Errorf("migrated row: quotas api %d, billing %d; want 5, 5 (as before the migration)", a, b)
		}
		// A PUT naming a domain replaces it.
		o := override("", 6)
		if _, err := s.Put(ctx, "alice", tenant.Record{Tenant: "old", Tier: rules.TierCustom, Overrides: []tenant.Override{o}}); err != nil {
			t.Fatal(err)
		}
		snap = loadSnapshot(t, s)
		if a, b := quotaOf(snap, api, "old"), quotaOf(snap, billing, "old"); a != 6 || b != 0 {
			t.Errorf("after a PUT naming api: quotas api %d, billing %d; want 6, 0 (own)", a, b)
		}
	})
}

func lastAfter(log []AuditEntry) string {
	if len(log) == 0 {
		return ""
	}
	return string(log[len(log)-1].After)
}
