package pg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/tenant"
)

func open(t *testing.T, url string) *Store {
	t.Helper()
	// A connect timeout a loaded machine cannot miss (tests of an outage
	// stop PostgreSQL: refused at once, not timed out).
	s, err := Open(Options{URL: url, ConnectTimeout: 10 * time.Second, PingInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func migrated(t *testing.T, srv *pgtest.Server) *Store {
	t.Helper()
	s := open(t, srv.NewDatabase(t))
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func override(desc string, n int64) tenant.Override {
	return tenant.Override{Domain: "api", Descriptor: desc, Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: n, Window: time.Minute}, RequestsPerUnit: uint32(n), Unit: "minute"}
}

// One server for the tests that need no crash; each gets its own database.
func TestStore(t *testing.T) {
	srv := pgtest.Start(t)
	t.Run("migrate", func(t *testing.T) { testMigrate(t, srv) })
	t.Run("crud and audit", func(t *testing.T) { testCRUD(t, srv) })
	t.Run("concurrent put", func(t *testing.T) { testRace(t, srv) })
	t.Run("list pages", func(t *testing.T) { testList(t, srv) })
}

func testMigrate(t *testing.T, srv *pgtest.Server) {
	s := open(t, srv.NewDatabase(t))
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	applied := make([][]string, 3)
	for i := range 3 { // instances starting together
		wg.Go(func() { applied[i], errs[i] = s.Migrate(ctx) })
	}
	wg.Wait()
	total := 0
	for i := range 3 {
		if errs[i] != nil {
			t.Fatalf("Migrate %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	if total != len(names(t)) {
		t.Errorf("migrations applied %d times in all, want %d, each once (%v)", total, len(names(t)), applied)
	}
	again, err := s.Migrate(ctx)
	if err != nil || len(again) != 0 {
		t.Errorf("Migrate again = %v, %v; want nothing, nil", again, err)
	}
}

func testCRUD(t *testing.T, srv *pgtest.Server) {
	s := migrated(t, srv)
	ctx := ctxT(t)
	exp := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := tenant.Record{Tenant: "acme", Tier: rules.TierEnterprise, ExpiresAt: exp,
		Overrides: []tenant.Override{override("endpoint:POST /orders", 500), override("", 50)}}
	got, err := s.Put(ctx, "alice", rec)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if got.Tier != rules.TierEnterprise || len(got.Overrides) != 2 || !got.ExpiresAt.Equal(exp) || got.CreatedAt.IsZero() {
		t.Fatalf("Put returned %+v", got)
	}
	if o := got.Overrides[1]; o.Descriptor != "endpoint:POST /orders" || o.Limit != (sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 500, Window: time.Minute}) || o.Unit != "minute" {
		t.Errorf("override read back as %+v", o)
	}
	created := got.CreatedAt

	rec.Tier, rec.Overrides, rec.ExpiresAt = rules.TierPro, []tenant.Override{override("", 60)}, time.Time{}
	got, err = s.Put(ctx, "bob", rec)
	if err != nil {
		t.Fatalf("Put again: %v", err)
	}
	if len(got.Overrides) != 1 || got.Overrides[0].Limit.Quota != 60 || !got.CreatedAt.Equal(created) || !got.ExpiresAt.IsZero() {
		t.Errorf("after replace: %+v (created %v)", got, created)
	}
	loaded, found, err := s.Load(ctx, "acme")
	if err != nil || !found || loaded.Tier != rules.TierPro || len(loaded.Overrides) != 1 {
		t.Errorf("Load = %+v, %v, %v", loaded, found, err)
	}
	if found, err := s.Delete(ctx, "carol", "acme"); err != nil || !found {
		t.Fatalf("Delete = %v, %v; want true, nil", found, err)
	}
	if found, err := s.Delete(ctx, "carol", "acme"); err != nil || found {
		t.Errorf("Delete again = %v, %v; want false, nil", found, err)
	}
	if _, found, _ := s.Load(ctx, "acme"); found {
		t.Error("Load after Delete found the record")
	}
	log, err := s.AuditLog(ctx, "tenant:acme", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ actor, action string }{{"alice", "put"}, {"bob", "put"}, {"carol", "delete"}}
	if len(log) != len(want) {
		t.Fatalf("audit rows = %d, want %d", len(log), len(want))
	}
	for i, w := range want {
		if log[i].Actor != w.actor || log[i].Action != w.action {
			t.Errorf("audit %d = %s %s, want %s %s", i, log[i].Actor, log[i].Action, w.actor, w.action)
		}
	}
	if log[0].Before != nil || log[2].After != nil {
		t.Errorf("first put has before %s, delete has after %s; want none", log[0].Before, log[2].After)
	}
	if string(log[1].Before) != string(log[0].After) || string(log[2].Before) != string(log[1].After) {
		t.Error("audit rows do not chain: each before must equal the previous after")
	}

	if err := s.SetSwitch(ctx, "dave", "api", "remote_address", rules.SwitchShadow); err != nil {
		t.Fatal(err)
	}
	sw, err := s.Switches(ctx)
	if err != nil || len(sw) != 1 || sw[0].State != rules.SwitchShadow {
		t.Errorf("Switches = %+v, %v", sw, err)
	}
	if err := s.SetSwitch(ctx, "dave", "api", "remote_address", rules.SwitchOn); err != nil {
		t.Fatal(err)
	}
	if sw, _ := s.Switches(ctx); len(sw) != 0 {
		t.Errorf("Switches after on = %+v, want none", sw)
	}
}

// testRace: concurrent PUTs of one tenant leave exactly one writer's
// record, whole, and an audit log whose rows chain.
func testRace(t *testing.T, srv *pgtest.Server) {
	s := migrated(t, srv)
	ctx := ctxT(t)
	const writers = 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			ovs := []tenant.Override{}
			for i := range w + 1 {
				ovs = append(ovs, override(fmt.Sprintf("endpoint:e%d", i), int64(100*w+i+1)))
			}
			if _, err := s.Put(ctx, fmt.Sprintf("w%d", w), tenant.Record{Tenant: "race", Tier: rules.TierCustom, Overrides: ovs}); err != nil {
				t.Errorf("writer %d: %v", w, err)
			}
		})
	}
	wg.Wait()
	rec, _, err := s.Load(ctx, "race")
	if err != nil {
		t.Fatal(err)
	}
	w := int(rec.Overrides[0].Limit.Quota-1) / 100
	if len(rec.Overrides) != w+1 {
		t.Fatalf("record has %d overrides, but its first is writer %d's, who wrote %d: a mix of writers", len(rec.Overrides), w, w+1)
	}
	for i, o := range rec.Overrides {
		if o.Limit.Quota != int64(100*w+i+1) {
			t.Errorf("override %d quota %d, want writer %d's %d", i, o.Limit.Quota, w, 100*w+i+1)
		}
	}
	log, err := s.AuditLog(ctx, "tenant:race", 100)
	if err != nil || len(log) != writers {
		t.Fatalf("audit rows = %d, %v; want %d", len(log), err, writers)
	}
	for i := 1; i < len(log); i++ {
		if string(log[i].Before) != string(log[i-1].After) {
			t.Errorf("audit row %d's before is not row %d's after", i, i-1)
		}
	}
	var last struct{ Overrides []json.RawMessage }
	_ = json.Unmarshal(log[len(log)-1].After, &last)
	if log[len(log)-1].Actor != fmt.Sprintf("w%d", w) || len(last.Overrides) != w+1 {
		t.Errorf("the last audit row is %s's with %d overrides; the record is w%d's", log[len(log)-1].Actor, len(last.Overrides), w)
	}
}

func testList(t *testing.T, srv *pgtest.Server) {
	s := migrated(t, srv)
	ctx := ctxT(t)
	for i := range 25 {
		tier := rules.TierPro
		if i%5 == 0 {
			tier = rules.TierEnterprise
		}
		rec := tenant.Record{Tenant: fmt.Sprintf("t%02d", i), Tier: tier}
		if i%2 == 0 {
			rec.Overrides = []tenant.Override{override("", int64(i+1))}
		}
		if _, err := s.Put(ctx, "x", rec); err != nil {
			t.Fatal(err)
		}
	}
	var all []tenant.Record
	after := ""
	for {
		page, err := s.List(ctx, nil, after, 10)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < 10 {
			break
		}
		after = page[len(page)-1].Tenant
	}
	if len(all) != 25 || all[0].Tenant != "t00" || all[24].Tenant != "t24" {
		t.Fatalf("paged list: %d records, want 25 in order", len(all))
	}
	if len(all[4].Overrides) != 1 || len(all[5].Overrides) != 0 {
		t.Errorf("overrides in list: t04 has %d, t05 has %d; want 1, 0", len(all[4].Overrides), len(all[5].Overrides))
	}
	ent := rules.TierEnterprise
	page, err := s.List(ctx, &ent, "", 100)
	if err != nil || len(page) != 5 {
		t.Errorf("enterprise tier: %d records, %v; want 5", len(page), err)
	}
}

// TestRegistryFollowsStore: a registry over the store sees a change within
// moments (LISTEN/NOTIFY), keeps its snapshot while PostgreSQL is down and
// says it is stale, and catches up when it returns.
func TestRegistryFollowsStore(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := open(t, url)
	ctx := ctxT(t)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "x", tenant.Record{Tenant: "early", Tier: rules.TierPro}); err != nil {
		t.Fatal(err)
	}
	var errMu sync.Mutex
	var errs []error
	reg := tenant.NewRegistry(s, tenant.Options{Resync: time.Hour, RetryMin: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		OnError: func(err error) { errMu.Lock(); errs = append(errs, err); errMu.Unlock() }})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- reg.Run(rctx) }()
	defer func() { stop(); <-done }()
	<-reg.Synced()

	tierOf := func(name string) (rules.Tier, bool) {
		e, ok := lookupTier(reg.Snapshot(), name)
		return e, ok
	}
	if tier, ok := tierOf("early"); !ok || tier != rules.TierPro {
		t.Fatalf("after the first load: early = %v, %v; want pro", tier, ok)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within a minute: %s (status %+v)", what, reg.Status())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	start := time.Now()
	if _, err := s.Put(ctx, "x", tenant.Record{Tenant: "late", Tier: rules.TierEnterprise}); err != nil {
		t.Fatal(err)
	}
	waitFor("late is enterprise", func() bool { tier, ok := tierOf("late"); return ok && tier == rules.TierEnterprise })
	t.Logf("a write reached the registry in %v", time.Since(start))
	if _, err := s.Delete(ctx, "x", "early"); err != nil {
		t.Fatal(err)
	}
	waitFor("early is gone", func() bool { _, ok := tierOf("early"); return !ok })
	if st := reg.Status(); !st.Live || st.Tenants != 1 {
		t.Errorf("status %+v, want live with 1 tenant", st)
	}

	srv.Kill()
	waitFor("the registry says stale", func() bool { return !reg.Status().Live })
	if tier, ok := tierOf("late"); !ok || tier != rules.TierEnterprise {
		t.Errorf("while PostgreSQL is down: late = %v, %v; want the last known (enterprise)", tier, ok)
	}
	_, err := s.Put(ctx, "x", tenant.Record{Tenant: "down", Tier: rules.TierPro})
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Put while down: %v, want ErrUnavailable", err)
	}
	srv.Start()
	// A pooled connection the restart closed may fail the first write
	// (ErrUnavailable, as while down); the next ones reach the new server.
	for attempt := 1; ; attempt++ {
		_, err := s.Put(ctx, "x", tenant.Record{Tenant: "back", Tier: rules.TierPro})
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnavailable) || attempt == 20 {
			t.Fatalf("Put after restart, attempt %d: %v", attempt, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFor("live again with the new record", func() bool {
		_, ok := tierOf("back")
		return ok && reg.Status().Live
	})
	errMu.Lock()
	defer errMu.Unlock()
	if len(errs) == 0 {
		t.Error("OnError was never told of the outage")
	}
	for _, err := range errs {
		if msg := err.Error(); strings.Contains(msg, url) {
			t.Errorf("error %q holds the connection URL", msg)
		}
	}
}

// lookupTier reads a tenant's tier through Resolve on a rule with one tier
// limit per tier.
func lookupTier(s *tenant.Snapshot, name string) (rules.Tier, bool) {
	r := tierRule()
	tl, _ := s.Resolve(r, []rules.Entry{{Key: "k", Value: name}}, time.Now)
	if tl == nil {
		return 0, false
	}
	return rules.Tier(tl.Limit.Quota), tl.Limit.Quota != 0
}

var tierRuleOnce = sync.OnceValue(func() *rules.Rule {
	snap, err := rules.Parse("t.yaml", []byte(`
domain: d
tenant_key: k
descriptors:
  - key: k
    rate_limit:
      unit: minute
      requests_per_unit: 9
      tiers:
        free: {requests_per_unit: 0}
        pro: {requests_per_unit: 1}
        enterprise: {requests_per_unit: 2}
`), rules.Options{})
	if err != nil {
		panic(err)
	}
	return snap.Match("d", []rules.Entry{{Key: "k", Value: "x"}})
})

func tierRule() *rules.Rule { return tierRuleOnce() }
