package pg

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/tenant"
)

// TestRegistryColdStart: a registry that loaded from PostgreSQL writes its
// snapshot file; a second one, started while PostgreSQL is down, restores
// it (source "snapshot") and turns live when PostgreSQL returns.
func TestRegistryColdStart(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	s := open(t, url)
	ctx := ctxT(t)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	o := override("", 7)
	if _, err := s.Put(ctx, "alice", tenant.Record{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{o}}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "tenants.snapshot")
	opts := tenant.Options{File: file, FileEvery: 50 * time.Millisecond, RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond}
	run := func(reg *tenant.Registry) {
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { _ = reg.Run(rctx); close(done) }()
		t.Cleanup(func() { stop(); <-done })
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within 15s: %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	api, _ := twoRules(t)

	first := tenant.NewRegistry(s, opts)
	if err := first.Restore(); err == nil {
		t.Error("Restore with no file yet: nil error")
	}
	run(first)
	waitFor("the first registry writes its file", func() bool { return !first.Status().FileWritten.IsZero() })
	if st := first.Status(); st.Source != tenant.SourceLive || st.FileErr != nil {
		t.Errorf("first registry: %+v, want live, file written", st)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), srv.Addr()) || strings.Contains(string(b), "postgres") {
		t.Errorf("the snapshot file names the database: %s", b)
	}

	srv.Kill()
	second := tenant.NewRegistry(open(t, url), opts)
	if q := quotaOf(second.Snapshot(), api, "acme"); q != 0 {
		t.Fatalf("before Restore: quota %d, want the rule's own", q)
	}
	if err := second.Restore(); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	st := second.Status()
	if st.Source != tenant.SourceFile || st.DataAt.IsZero() || st.Live || st.Tenants != 1 {
		t.Errorf("after Restore: %+v; want source snapshot, its time, not live, 1 tenant", st)
	}
	if q := quotaOf(second.Snapshot(), api, "acme"); q != 7 {
		t.Errorf("restored: quota %d, want the override's 7", q)
	}
	run(second)
	waitFor("the second registry fails to reach PostgreSQL", func() bool { return second.Status().Err != nil })
	if st := second.Status(); st.Source != tenant.SourceFile || quotaOf(second.Snapshot(), api, "acme") != 7 {
		t.Errorf("while PostgreSQL is down: %+v; want the snapshot kept", st)
	}

	srv.Start()
	o.Limit.Quota, o.RequestsPerUnit = 8, 8
	if _, err := s.Put(ctx, "alice", tenant.Record{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{o}}); err != nil {
		t.Fatal(err)
	}
	waitFor("the second registry is live with the new override", func() bool {
		st := second.Status()
		return st.Live && st.Source == tenant.SourceLive && quotaOf(second.Snapshot(), api, "acme") == 8
	})
	// A late Restore does not replace live data.
	if err := second.Restore(); err != nil || quotaOf(second.Snapshot(), api, "acme") != 8 {
		t.Errorf("Restore after a live load: %v, quota %d; want nil, 8", err, quotaOf(second.Snapshot(), api, "acme"))
	}
}
