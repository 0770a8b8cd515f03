package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"
	// Calendar quotas name IANA time zones; embed the database so a rule
	// file does not depend on the host having one (≈ 450 KB).
	_ "time/tzdata"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/tenant"
	"github.com/sluice-rl/sluice/tenant/pg"
)

// Environment variables holding admin tokens directly (instead of, or
// besides, --admin-token-file): one read-write and one read-only token.
const (
	envAdminToken         = "SLUICE_ADMIN_TOKEN"
	envAdminReadonlyToken = "SLUICE_ADMIN_READONLY_TOKEN"
)

// adminTokens gathers the admin API's tokens from the file and the
// environment; none means the admin API is off.
func adminTokens(file string, getenv env) (*admin.Tokens, error) {
	toks := &admin.Tokens{}
	if file != "" {
		t, err := admin.LoadTokens(file)
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		toks = t
	}
	if v := getenv(envAdminToken); v != "" {
		if err := toks.Add("env", admin.ReadWrite, v); err != nil {
			return nil, fmt.Errorf("%s: %w", envAdminToken, err)
		}
	}
	if v := getenv(envAdminReadonlyToken); v != "" {
		if err := toks.Add("env-readonly", admin.ReadOnly, v); err != nil {
			return nil, fmt.Errorf("%s: %w", envAdminReadonlyToken, err)
		}
	}
	return toks, nil
}

// openTenants connects the tenant registry to PostgreSQL (lazily: a
// database that is down now is caught up with when it returns), applies
// the migrations if asked, and registers the registry's metrics.
func (s *server) openTenants(cfg tenantsConfig, reg prometheus.Registerer, log *slog.Logger) error {
	st, err := pg.Open(pg.Options{URL: cfg.PostgresURL})
	if err != nil {
		return fmt.Errorf("serve: --postgres-url: %w", err)
	}
	s.pg = st
	s.closers = append(s.closers, closerFunc(func() error { st.Close(); return nil }))
	if cfg.Migrate {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		applied, err := st.Migrate(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("serve: --migrate: %w", err)
		}
		log.Info("PostgreSQL migrations applied", "applied", applied)
	}
	tlog := log.With("component", "tenants")
	file, err := snapshotPath(cfg.Snapshot, st.Identity())
	if err != nil {
		tlog.Warn("tenant snapshot file off: no cache directory; give --tenant-snapshot PATH", "err", err)
	}
	var lastLog time.Time
	s.tenants = tenant.NewRegistry(st, tenant.Options{
		Resync: cfg.Resync,
		File:   file,
		OnError: func(err error) { // one line per 10s at most while it keeps failing
			if time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				tlog.Warn("tenant overrides: PostgreSQL failed; checks keep the last known snapshot", "err", err)
			}
		},
	})
	g := s.tenants
	if file != "" {
		// Before serving: until PostgreSQL answers, enforce the tenants last
		// known rather than the rule files' defaults. A live load replaces it.
		if err := g.Restore(); err != nil {
			tlog.Info("tenant snapshot file not used", "file", file, "err", err)
		} else {
			st := g.Status()
			tlog.Info("tenant snapshot file restored; PostgreSQL's data replaces it once loaded", "file", file,
				"records", st.Tenants, "read_from_postgres_at", st.DataAt.UTC().Format(time.RFC3339))
		}
	}
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_stale",
			Help: "1 while the tenant overrides snapshot may be out of date (PostgreSQL unreachable or not loaded yet), else 0."},
			func() float64 {
				if g.Status().Live {
					return 0
				}
				return 1
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_records",
			Help: "Tenant records in the snapshot checks use."},
			func() float64 { return float64(g.Status().Tenants) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_last_sync_timestamp_seconds",
			Help: "When the tenant snapshot was last fully loaded (Unix seconds; 0: never)."},
			func() float64 {
				if t := g.Status().LastSync; !t.IsZero() {
					return float64(t.UnixNano()) / 1e9
				}
				return 0
			}),
	)
	return nil
}

// snapshotPath is the tenant snapshot file of --tenant-snapshot v for the
// database id: "" when off.
func snapshotPath(v, id string) (string, error) {
	switch v {
	case "off":
		return "", nil
	case "":
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		return filepath.Join(dir, "sluice", "tenants-"+id+".snapshot"), nil
	}
	return v, nil
}

// tenantsReady is the tenant line of /readyz, as JSON.
type tenantsReady struct {
	// Source: "live" (loaded from PostgreSQL by this process), "snapshot"
	// (the snapshot file, PostgreSQL not reached yet) or "none" (rule-file
	// limits apply).
	Source string `json:"source"`
	// Stale: not listening to PostgreSQL now; changes do not arrive.
	Stale bool `json:"stale"`
	// DataAt is when the data was read from PostgreSQL; AgeSeconds its age.
	DataAt     *time.Time `json:"data_at,omitempty"`
	AgeSeconds *float64   `json:"age_seconds,omitempty"`
	Records    int        `json:"records"`
}

// readyNotes says, on /readyz, where the tenant snapshot comes from and how
// old it is: "tenants: {json}".
func (s *server) readyNotes() []string {
	if s.tenants == nil {
		return nil
	}
	st := s.tenants.Status()
	r := tenantsReady{Source: st.Source, Stale: !st.Live, Records: st.Tenants}
	if !st.DataAt.IsZero() {
		at := st.DataAt.UTC()
		age := max(0, time.Since(st.DataAt).Seconds())
		age = float64(int64(age*1000)) / 1000
		r.DataAt, r.AgeSeconds = &at, &age
	}
	b, _ := json.Marshal(r)
	return []string{"tenants: " + string(b)}
}

// ruleSwitch is /debug/rules's view of the kill switches.
func (s *server) ruleSwitch(domain, id string) string {
	if s.tenants == nil {
		return "on"
	}
	return s.tenants.Snapshot().Switch(domain, id).String()
}

// withAdmin mounts the admin API beside the public handler h, when tokens
// are configured.
func (s *server) withAdmin(h http.Handler, toks *admin.Tokens, log *slog.Logger) (http.Handler, error) {
	if toks.Len() == 0 {
		return h, nil
	}
	opts := admin.Options{Tokens: toks, Rules: s.watcher.Current, Checker: s.engine, Counters: s.engine, Logger: log, Sample: s.sample}
	if s.pg != nil {
		opts.Store = s.pg
	}
	ah, err := admin.New(opts)
	if err != nil {
		return nil, fmt.Errorf("serve: admin: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(admin.Prefix, ah)
	mux.Handle("/", h)
	return mux, nil
}
