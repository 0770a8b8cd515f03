package pg

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/tenant"
)

// blob is the shared copy in a real Redis, through a store of its own (as
// each instance has).
func blob(t *testing.T, url string) *redis.Blob {
	t.Helper()
	st, err := redis.New(redis.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := st.Blob("tenants:test", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runRegistry(t *testing.T, reg *tenant.Registry) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = reg.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
}

// TestRegistrySharedCopy: a live registry writes the fleet's copy when it
// has changes, and not on a resync that brings none; a registry started
// while PostgreSQL is down, with no file, restores it (source "redis");
// the newer of file and copy wins; a copy that is too large or does not
// decode is refused and nothing is loaded.
func TestRegistrySharedCopy(t *testing.T) {
	srv := pgtest.Start(t)
	url := srv.NewDatabase(t)
	rd := redistest.Start(t)
	s := open(t, url)
	ctx := ctxT(t)
	if _, err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	o := override("", 7)
	put := func(q int64) {
		t.Helper()
		o.Limit.Quota, o.RequestsPerUnit = q, uint32(q)
		if _, err := s.Put(ctx, "alice", tenant.Record{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{o}}); err != nil {
			t.Fatal(err)
		}
	}
	put(7)
	api, _ := twoRules(t)
	copyA := blob(t, rd.URL())
	base := tenant.Options{RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, CopyEvery: 50 * time.Millisecond, CopyWait: 50 * time.Millisecond}

	opts := base
	opts.Copy, opts.Resync = copyA, 100*time.Millisecond
	first := tenant.NewRegistry(s, opts)
	runRegistry(t, first)
	waitFor(t, "the first registry writes the copy", func() bool { return !first.Status().CopyWritten.IsZero() })
	put(8) // a change notified: the copy gets it
	waitFor(t, "the copy holds the change", func() bool {
		_, d, err := copyA.Get(ctx, 1<<20)
		return err == nil && strings.Contains(string(d), `"quota":8`)
	})
	v0, err := copyA.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Five resyncs that change nothing write nothing.
	since := first.Status().LastSync
	waitFor(t, "five resyncs", func() bool { return first.Status().LastSync.Sub(since) >= 5*opts.Resync })
	if v, err := copyA.Version(ctx); v != v0 || err != nil {
		t.Errorf("copy version after resyncs that changed nothing: %d, %v; want %d (not rewritten)", v, err, v0)
	}
	if st := first.Status(); st.CopyErr != nil || !first.Loaded() {
		t.Errorf("first registry: %+v, loaded %v; want no copy error, loaded", st, first.Loaded())
	}

	srv.Kill()
	killed := time.Now()
	file := func(q int64, at time.Time) string {
		t.Helper()
		o2 := override("", q)
		path := filepath.Join(t.TempDir(), "tenants.snapshot")
		if err := tenant.WriteFile(path, tenant.NewSnapshot([]tenant.Record{{Tenant: "acme", Tier: rules.TierCustom, Overrides: []tenant.Override{o2}}}, nil, at), 0); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name     string
		file     string
		source   string
		copyRead string
		quota    int64
	}{
		{"no file", "", tenant.SourceCopy, tenant.CopyRestored, 8},
		{"an older file", file(5, time.Now().Add(-time.Hour)), tenant.SourceCopy, tenant.CopyRestored, 8},
		{"a newer file", file(9, time.Now().Add(time.Hour)), tenant.SourceFile, tenant.CopyOlder, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := base
			opts.Copy, opts.File = blob(t, rd.URL()), tc.file
			reg := tenant.NewRegistry(open(t, url), opts)
			if tc.file != "" {
				if err := reg.Restore(); err != nil {
					t.Fatal(err)
				}
			} else if reg.Loaded() {
				t.Fatal("Loaded before anything was")
			}
			runRegistry(t, reg)
			waitFor(t, "the copy read", func() bool { return reg.Status().CopyRead != tenant.CopyUnread })
			st := reg.Status()
			if st.Source != tc.source || st.CopyRead != tc.copyRead || !reg.Loaded() || st.Live || st.Tenants != 1 {
				t.Errorf("status %+v, loaded %v; want source %q, copy %q, loaded, not live, 1 tenant", st, reg.Loaded(), tc.source, tc.copyRead)
			}
			if q := quotaOf(reg.Snapshot(), api, "acme"); q != tc.quota {
				t.Errorf("quota %d, want %d", q, tc.quota)
			}
		})
	}

	// Refused copies: nothing is loaded, the reason is kept.
	for _, tc := range []struct {
		name     string
		maxBytes int64
		data     string
		want     string
	}{
		{"over the bound", 64, "", "larger than its bound"},
		{"not a snapshot", 0, `{"format":"other","version":1}` + "\n", "format"},
		{"cut short", 0, `{"format":"sluice-tenant-snapshot","version":1,"at":"2026-01-01T00:00:00Z","records":2,"switches":[]}` + "\n" + `{"t":"acme","tier":"pro"}` + "\n", "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := blob(t, rd.URL())
			if tc.data != "" {
				v, _ := b.Version(ctx)
				if _, err := b.Put(ctx, v+1, []byte(tc.data)); err != nil {
					t.Fatal(err)
				}
			}
			opts := base
			opts.Copy, opts.CopyMaxBytes = b, tc.maxBytes
			reg := tenant.NewRegistry(open(t, url), opts)
			restored, err := reg.RestoreCopy(ctx)
			if restored || err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("RestoreCopy = %v, %v; want false and an error saying %q", restored, err, tc.want)
			}
			if st := reg.Status(); reg.Loaded() || st.Source != tenant.SourceNone || st.CopyErr == nil {
				t.Errorf("after a refused copy: %+v, loaded %v; want nothing loaded, the error kept", st, reg.Loaded())
			}
		})
	}
	// Not live, the first registry wrote none of it back: only data read
	// from PostgreSQL goes to the copy.
	if st := first.Status(); st.Live || !st.CopyWritten.Before(killed) {
		t.Errorf("first registry after PostgreSQL went down: %+v; want not live, no copy written since", st)
	}
}
