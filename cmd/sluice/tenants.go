package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	// Calendar quotas name IANA time zones; embed the database so a rule
	// file does not depend on the host having one (≈ 450 KB).
	_ "time/tzdata"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/server/rlqs"
	"github.com/sluice-rl/sluice/server/rls"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/tenant"
	"github.com/sluice-rl/sluice/tenant/pg"
)

// What an instance does until it has loaded tenant data (--tenants-unloaded).
const (
	// unloadedRefuse: not ready, and checks are refused (HTTP 503, gRPC
	// UNAVAILABLE) with the reason.
	unloadedRefuse = "refuse"
	// unloadedDefaults: ready, and every tenant gets the rule files'
	// limits (its tier unknown: free) until data is loaded.
	unloadedDefaults = "defaults"
)

// maxTenantCopyBytes: Redis refuses a value over 512 MB (proto-max-bulk-len).
const maxTenantCopyBytes = 512 << 20

// tenantCopyTTL is the expiry each write of the Redis copy sets: a copy no
// instance has written for this long (no instance live) goes away.
const tenantCopyTTL = 30 * 24 * time.Hour

// flags binds the tenant flags kept here (the others are in config.go).
func (c *tenantsConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Unloaded, "tenants-unloaded", c.Unloaded, "until tenant data is loaded (from PostgreSQL, the snapshot file or the Redis copy): refuse (not ready; checks answered 503 / UNAVAILABLE) or defaults (ready; every tenant gets the rule files' limits)")
	fs.Int64Var(&c.CopyMaxBytes, "tenant-snapshot-redis-max-bytes", c.CopyMaxBytes, "with --store redis, the largest copy of the tenant snapshot kept in Redis, from which instances started while PostgreSQL is down restore it (0: no copy)")
}

func (c tenantsConfig) validate(bad func(string, ...any)) {
	switch c.Unloaded {
	case unloadedRefuse, unloadedDefaults:
	default:
		bad("--tenants-unloaded: %q, want refuse or defaults", c.Unloaded)
	}
	if c.CopyMaxBytes < 0 || c.CopyMaxBytes > maxTenantCopyBytes {
		bad("--tenant-snapshot-redis-max-bytes: %d, want 0 (no copy) to %d", c.CopyMaxBytes, maxTenantCopyBytes)
	}
}

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
	var (
		logMu             sync.Mutex // OnError is called from several goroutines
		lastLog, lastCopy time.Time
	)
	opts := tenant.Options{
		Resync:    cfg.Resync,
		File:      file,
		FileEvery: cfg.FileEvery,
		CopyEvery: cfg.CopyEvery,
		OnError: func(err error) { // one line per 10s at most while it keeps failing
			logMu.Lock()
			defer logMu.Unlock()
			if errors.Is(err, tenant.ErrCopy) {
				if time.Since(lastCopy) >= 10*time.Second {
					lastCopy = time.Now()
					tlog.Warn("tenant snapshot copy in Redis: failed", "err", err)
				}
				return
			}
			if time.Since(lastLog) >= 10*time.Second {
				lastLog = time.Now()
				tlog.Warn("tenant overrides: PostgreSQL failed; checks keep the last known snapshot", "err", err)
			}
		},
		OnSource: func(st tenant.Status) {
			// Run, which calls this, starts after s.rls is built.
			if s.rls != nil && !s.tenantsRefusing() {
				s.rls.SetServing(true)
			}
			switch st.Source {
			case tenant.SourceCopy:
				tlog.Info("tenant snapshot restored from the fleet's copy in Redis; PostgreSQL's data replaces it once loaded",
					"records", st.Tenants, "read_from_postgres_at", st.DataAt.UTC().Format(time.RFC3339))
			case tenant.SourceLive:
				tlog.Info("tenant data loaded from PostgreSQL", "records", st.Tenants)
			}
		},
	}
	s.tenantFile = "off"
	if s.cfg.Store.Kind == compose.KindRedis && cfg.CopyMaxBytes > 0 {
		// The stack is built after this, and its Redis store may still be
		// connecting: the copy finds it when used.
		opts.Copy = &redisCopy{store: s.redisStore, name: "tenants:" + st.Identity()}
		opts.CopyMaxBytes = cfg.CopyMaxBytes
	}
	s.tenants = tenant.NewRegistry(st, opts)
	g := s.tenants
	if file != "" {
		// Before serving: until PostgreSQL answers, enforce the tenants last
		// known rather than the rule files' defaults. A live load replaces it.
		if err := g.Restore(); err != nil {
			s.tenantFile = "unusable"
			if errors.Is(err, os.ErrNotExist) {
				s.tenantFile = "none"
			}
			tlog.Info("tenant snapshot file not used", "file", file, "err", err)
		} else {
			s.tenantFile = "restored"
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
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_loaded",
			Help: "1 once tenant data was loaded from anywhere (PostgreSQL, the snapshot file, the Redis copy), else 0: every tenant is on the rule files' limits, and with --tenants-unloaded refuse the instance is not ready."},
			func() float64 {
				if g.Loaded() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_tenants_unloaded_refusals_total",
			Help: "Checks refused because tenant data was never loaded (--tenants-unloaded refuse)."},
			func() float64 { return float64(s.unloadedRefusals.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_tenants_copy_written_timestamp_seconds",
			Help: "When this instance last wrote the tenant snapshot's copy to Redis (Unix seconds; 0: never)."},
			func() float64 {
				if t := g.Status().CopyWritten; !t.IsZero() {
					return float64(t.UnixNano()) / 1e9
				}
				return 0
			}),
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

// redisCopy is the tenant snapshot's copy in the Redis store (a
// tenant.Copy), which may not be connected yet.
type redisCopy struct {
	store func() *redis.Store
	name  string
	blob  atomic.Pointer[redis.Blob]
}

func (c *redisCopy) get() (*redis.Blob, error) {
	if b := c.blob.Load(); b != nil {
		return b, nil
	}
	st := c.store()
	if st == nil {
		return nil, errRedisNotConnected
	}
	b, err := st.Blob(c.name, tenantCopyTTL)
	if err != nil {
		return nil, err
	}
	c.blob.Store(b)
	return b, nil
}

func (c *redisCopy) Version(ctx context.Context) (int64, error) {
	b, err := c.get()
	if err != nil {
		return 0, err
	}
	return b.Version(ctx)
}

func (c *redisCopy) Put(ctx context.Context, v int64, data []byte) (bool, error) {
	b, err := c.get()
	if err != nil {
		return false, err
	}
	return b.Put(ctx, v, data)
}

func (c *redisCopy) Get(ctx context.Context, maxBytes int64) (int64, []byte, error) {
	b, err := c.get()
	if err != nil {
		return 0, nil, err
	}
	return b.Get(ctx, maxBytes)
}

// redisStore is the stack's Redis store once connected, else nil.
func (s *server) redisStore() *redis.Store {
	if st, ok := s.store.(*compose.Stack); ok {
		return st.Redis()
	}
	return nil
}

// tenantsRefusing reports whether checks are refused now: tenants on,
// --tenants-unloaded refuse, and no tenant data loaded yet. One atomic
// load once tenants are loaded.
func (s *server) tenantsRefusing() bool {
	return s.tenants != nil && !s.tenants.Loaded() && s.cfg.Tenants.Unloaded == unloadedRefuse
}

// tenantsUnready is the readiness of tenants: an error saying why while
// checks are refused, nil otherwise.
func (s *server) tenantsUnready() error {
	if !s.tenantsRefusing() {
		return nil
	}
	return errors.New(s.unloadedReason())
}

// unloadedReason says why no tenant data is in force, naming each place
// tried (no error text of PostgreSQL's: /readyz is public).
func (s *server) unloadedReason() string {
	st := s.tenants.Status()
	pgState := "not loaded yet"
	if st.Err != nil {
		pgState = "unreachable"
	}
	copyState := "off"
	switch {
	case s.cfg.Store.Kind != compose.KindRedis:
		copyState = "off (--store memory)"
	case s.cfg.Tenants.CopyMaxBytes == 0:
		copyState = "off (--tenant-snapshot-redis-max-bytes 0)"
	case st.CopyErr != nil:
		copyState = "not read: " + strings.TrimPrefix(st.CopyErr.Error(), tenant.ErrCopy.Error()+": ")
	case st.CopyRead == tenant.CopyNone:
		copyState = "none"
	default:
		copyState = "not read yet"
	}
	return fmt.Sprintf("tenant data never loaded (PostgreSQL: %s; snapshot file: %s; Redis copy: %s): checks are refused until one is (--tenants-unloaded refuse)",
		pgState, s.tenantFile, copyState)
}

// checkPaths are the HTTP endpoints whose answer depends on tenant data.
var checkPaths = map[string]bool{"/v1/check": true, "/json": true, "/v1/charge": true}

// refuseUnloaded answers the checks of h with 503 and the reason while
// tenants are refusing; everything else (health, readiness, metrics,
// admin, /v1/release) passes.
func (s *server) refuseUnloaded(h http.Handler) http.Handler {
	if s.tenants == nil || s.cfg.Tenants.Unloaded != unloadedRefuse {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.tenantsRefusing() && r.Method == http.MethodPost && checkPaths[r.URL.Path] {
			s.unloadedRefusals.Add(1)
			w.Header().Set("Retry-After", "5")
			headers.WriteProblem(w, headers.Problem{Type: "about:blank", Title: http.StatusText(http.StatusServiceUnavailable),
				Status: http.StatusServiceUnavailable, Detail: s.unloadedReason()})
			return
		}
		h.ServeHTTP(w, r)
	})
}

// refuseUnloadedGRPC is the gRPC server option that answers Envoy's rate
// limit calls (RLS, and RLQS streams as they open) with UNAVAILABLE and the
// reason while tenants are refusing; Envoy then applies its own failure
// mode (failure_mode_deny). It is a tap handle, not an interceptor: an
// interceptor would turn off the RLS server's allocation-free decoding of
// every call (server/rls, wire.go); a tap handle costs grpc one small
// allocation per call (its tap.Info) and is run before the call is.
func (s *server) refuseUnloadedGRPC() []grpc.ServerOption {
	if s.tenants == nil || s.cfg.Tenants.Unloaded != unloadedRefuse {
		return nil
	}
	rlsPrefix, rlqsPrefix := "/"+rls.ServiceName+"/", "/"+rlqs.ServiceName+"/"
	return []grpc.ServerOption{grpc.InTapHandle(func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if s.tenantsRefusing() && (strings.HasPrefix(info.FullMethodName, rlsPrefix) || strings.HasPrefix(info.FullMethodName, rlqsPrefix)) {
			s.unloadedRefusals.Add(1)
			return ctx, status.Error(codes.Unavailable, s.unloadedReason())
		}
		return ctx, nil
	})}
}

// tenantsReady is the tenant line of /readyz, as JSON.
type tenantsReady struct {
	// Source: "live" (loaded from PostgreSQL by this process), "snapshot"
	// (the snapshot file, PostgreSQL not reached yet), "redis" (the
	// fleet's copy in Redis, PostgreSQL not reached yet) or "none"
	// (rule-file limits apply, or checks are refused: --tenants-unloaded).
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
	opts := admin.Options{Tokens: toks, Rules: s.watcher.Current, Checker: s.engine, Counters: s.engine, Logger: log, Sample: s.sample,
		Notifications: s.notifier}
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
