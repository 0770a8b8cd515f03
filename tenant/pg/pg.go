// Package pg keeps tenant records in PostgreSQL: the schema (migrations
// embedded in the binary), writes that record an audit row in the same
// transaction and notify every instance (LISTEN/NOTIFY), and the
// tenant.Source a tenant.Registry loads from.
//
// Writes to one tenant are serialized with a transaction-scoped advisory
// lock, so concurrent writers leave one consistent record and an audit log
// whose before and after chain. Errors that mean the database could not be
// reached wrap ErrUnavailable; the connection URL never appears in them.
package pg

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/tenant"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Channel is the LISTEN/NOTIFY channel of changes. A payload is "t:" and a
// tenant, "s:" for the rule switches, or "d:" for the deny entries.
const Channel = "sluice_tenants"

// ErrUnavailable marks an error caused by a database that could not be
// reached or did not answer in time (as opposed to one that refused a
// statement). It is tenant.ErrUnavailable; servers map it to 503.
var ErrUnavailable = tenant.ErrUnavailable

// Options configure a Store.
type Options struct {
	// URL is a PostgreSQL connection URL or DSN (see pgx.ParseConfig).
	// Required. It may hold a password: it is never logged nor put in an
	// error.
	URL string
	// ConnectTimeout bounds one connection attempt; zero means 3s.
	ConnectTimeout time.Duration
	// MaxConns bounds the pool; zero means 8.
	MaxConns int32
	// PingInterval is how often an idle listener checks its connection;
	// zero means 15s.
	PingInterval time.Duration
}

// Store reads and writes tenant records. It is safe for concurrent use and
// implements tenant.Source. Open does not connect: a Store made while the
// database is down works once it is up.
type Store struct {
	pool *pgxpool.Pool
	opts Options
}

// Open returns a Store for opts.URL. It fails only for a malformed URL.
func Open(opts Options) (*Store, error) {
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 3 * time.Second
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = 8
	}
	if opts.PingInterval <= 0 {
		opts.PingInterval = 15 * time.Second
	}
	cfg, err := pgxpool.ParseConfig(opts.URL)
	if err != nil {
		// pgx's message may quote the URL; say only what kind of problem.
		return nil, errors.New("pg: the PostgreSQL URL does not parse (want postgres://user:password@host:port/db?sslmode=…)")
	}
	cfg.ConnConfig.ConnectTimeout = opts.ConnectTimeout
	cfg.MaxConns = opts.MaxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("pg: %w", redact(err))
	}
	return &Store{pool: pool, opts: opts}, nil
}

// Identity names the database the Store reads, without its secrets: 16 hex
// digits of a SHA-256 of host, port, database and user (never the
// password). Two Stores of one database share it; it suits a file name
// (the snapshot file of tenant.Options.File, one per database).
func (s *Store) Identity() string {
	c := s.pool.Config().ConnConfig
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%s\x00%s", c.Host, c.Port, c.Database, c.User))
	return hex.EncodeToString(sum[:8])
}

// Close closes the pool's connections.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	return wrap("ping", s.pool.Ping(ctx))
}

// wrap adds ErrUnavailable to errors of reaching the database.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	var netErr net.Error
	switch {
	case errors.As(err, &pgErr):
		if strings.HasPrefix(pgErr.Code, "08") || strings.HasPrefix(pgErr.Code, "57P") { // connection exception, shutdown
			return fmt.Errorf("pg: %s: %w: %w", op, ErrUnavailable, redact(err))
		}
		return fmt.Errorf("pg: %s: %w", op, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("pg: %s: %w", op, err)
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr), pgconn.SafeToRetry(err),
		strings.Contains(err.Error(), "failed to connect"), strings.Contains(err.Error(), "conn closed"),
		errors.Is(err, pgx.ErrTxClosed):
		return fmt.Errorf("pg: %s: %w: %w", op, ErrUnavailable, redact(err))
	}
	return fmt.Errorf("pg: %s: %w", op, redact(err))
}

// redact drops a password pgx may have quoted in a connection error.
type redacted struct{ err error }

func (r redacted) Error() string {
	msg := r.err.Error()
	if i := strings.Index(msg, "password="); i >= 0 {
		end := strings.IndexAny(msg[i:], " `")
		if end < 0 {
			end = len(msg) - i
		}
		msg = msg[:i] + "password=xxxxx" + msg[i+end:]
	}
	return msg
}
func (r redacted) Unwrap() error { return r.err }

func redact(err error) error { return redacted{err} }

// Migrate applies the embedded migrations the database lacks, in order,
// each in its own transaction, under an advisory lock so that instances
// starting together do not race. It returns the names it applied.
func (s *Store) Migrate(ctx context.Context) ([]string, error) { return s.migrate(ctx, "") }

// migrate applies the migrations the database lacks up to and including
// the one named last ("": all of them).
func (s *Store) migrate(ctx context.Context, last string) ([]string, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, wrap("migrate", err)
	}
	defer conn.Release()
	const lockID = 0x51_ce_7e_4a // arbitrary, constant
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(lockID)); err != nil {
		return nil, wrap("migrate: lock", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(lockID)) }()
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS sluice_schema_migrations (
		name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, wrap("migrate", err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var applied []string
	for _, path := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(path, "migrations/"), ".sql")
		if last != "" && name > last {
			break
		}
		var done bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM sluice_schema_migrations WHERE name = $1)", name).Scan(&done); err != nil {
			return applied, wrap("migrate", err)
		}
		if done {
			continue
		}
		sql, err := migrations.ReadFile(path)
		if err != nil {
			return applied, err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO sluice_schema_migrations (name) VALUES ($1)", name)
			return err
		})
		if err != nil {
			return applied, wrap("migrate "+name, err)
		}
		applied = append(applied, name)
	}
	return applied, nil
}

// auditOverride and auditRecord are a record as the audit log keeps it.
type auditOverride struct {
	Domain          string     `json:"domain"`
	Descriptor      string     `json:"descriptor"`
	RequestsPerUnit uint32     `json:"requests_per_unit"`
	Unit            string     `json:"unit,omitempty"`
	Window          string     `json:"window"`
	Algorithm       string     `json:"algorithm"`
	Burst           int64      `json:"burst,omitempty"`
	Calendar        bool       `json:"calendar,omitempty"`
	EffectiveAt     time.Time  `json:"effective_at"`
	ExpiresAt       *time.Time `json:"expires_at"`
}

type auditRecord struct {
	Tenant      string          `json:"tenant"`
	Tier        string          `json:"tier"`
	Overrides   []auditOverride `json:"overrides"`
	EffectiveAt time.Time       `json:"effective_at"`
	ExpiresAt   *time.Time      `json:"expires_at"`
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func auditJSON(rec *tenant.Record) []byte {
	if rec == nil {
		return nil
	}
	a := auditRecord{Tenant: rec.Tenant, Tier: rec.Tier.String(), EffectiveAt: rec.EffectiveAt.UTC(), ExpiresAt: optTime(rec.ExpiresAt),
		Overrides: []auditOverride{}}
	for _, o := range rec.Overrides {
		a.Overrides = append(a.Overrides, auditOverride{Domain: domainOf(o), Descriptor: o.Descriptor, RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit,
			Window: o.Limit.Window.String(), Algorithm: o.Limit.Algorithm.String(), Burst: o.Limit.Burst, Calendar: o.Calendar,
			EffectiveAt: o.EffectiveAt.UTC(), ExpiresAt: optTime(o.ExpiresAt)})
	}
	b, _ := json.Marshal(a)
	return b
}

// domainOf is the domain an override is stored under: "" is
// tenant.AnyDomain.
func domainOf(o tenant.Override) string {
	if o.Domain == "" {
		return tenant.AnyDomain
	}
	return o.Domain
}

// lockTenant serializes writers of one tenant until tx ends.
func lockTenant(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 7))", name)
	return err
}

// Put replaces the record of rec.Tenant (tier, times and the whole set of
// overrides; CreatedAt is kept), writes an audit row naming actor with the
// record before and after, and notifies listeners, all in one transaction.
// rec should have been through tenant.Prepare. It returns the record as
// stored.
func (s *Store) Put(ctx context.Context, actor string, rec tenant.Record) (tenant.Record, error) {
	var out tenant.Record
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockTenant(ctx, tx, rec.Tenant); err != nil {
			return err
		}
		before, found, err := load(ctx, tx, rec.Tenant)
		if err != nil {
			return err
		}
		eff := rec.EffectiveAt
		if eff.IsZero() {
			eff = time.Now()
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sluice_tenants (tenant, tier, effective_at, expires_at)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (tenant) DO UPDATE SET tier = $2, effective_at = $3, expires_at = $4, updated_at = now()`,
			rec.Tenant, rec.Tier.String(), eff, optTime(rec.ExpiresAt)); err != nil {
			return err
		}
		domains := make([]string, 0, len(rec.Overrides))
		descs := make([]string, 0, len(rec.Overrides))
		for _, o := range rec.Overrides {
			domains, descs = append(domains, domainOf(o)), append(descs, o.Descriptor)
			oeff := o.EffectiveAt
			if oeff.IsZero() {
				oeff = eff
			}
			var unit *string
			if o.Unit != "" {
				unit = &o.Unit
			}
			if _, err := tx.Exec(ctx, `INSERT INTO sluice_overrides
				(tenant, descriptor, requests_per_unit, unit, window_us, algorithm, burst, effective_at, expires_at, calendar, domain)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
				ON CONFLICT (tenant, domain, descriptor) DO UPDATE SET requests_per_unit = $3, unit = $4, window_us = $5,
					algorithm = $6, burst = $7, effective_at = $8, expires_at = $9, calendar = $10, updated_at = now()`,
				rec.Tenant, o.Descriptor, int64(o.RequestsPerUnit), unit, o.Limit.Window.Microseconds(),
				o.Limit.Algorithm.String(), o.Limit.Burst, oeff, optTime(o.ExpiresAt), o.Calendar, domainOf(o)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `DELETE FROM sluice_overrides WHERE tenant = $1
			AND (domain, descriptor) NOT IN (SELECT * FROM unnest($2::text[], $3::text[]))`, rec.Tenant, domains, descs); err != nil {
			return err
		}
		after, _, err := load(ctx, tx, rec.Tenant)
		if err != nil {
			return err
		}
		var b *tenant.Record
		if found {
			b = &before
		}
		if err := audit(ctx, tx, actor, "put", "tenant:"+rec.Tenant, auditJSON(b), auditJSON(&after)); err != nil {
			return err
		}
		out = after
		return notify(ctx, tx, "t:"+rec.Tenant)
	})
	return out, wrap("put", err)
}

// Delete removes a tenant's record (it returns to the free tier), with an
// audit row and a notification, in one transaction. found is false when
// there was none (nothing is written then).
func (s *Store) Delete(ctx context.Context, actor, name string) (found bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockTenant(ctx, tx, name); err != nil {
			return err
		}
		before, ok, err := load(ctx, tx, name)
		if err != nil || !ok {
			return err
		}
		found = true
		if _, err := tx.Exec(ctx, "DELETE FROM sluice_tenants WHERE tenant = $1", name); err != nil {
			return err
		}
		if err := audit(ctx, tx, actor, "delete", "tenant:"+name, auditJSON(&before), nil); err != nil {
			return err
		}
		return notify(ctx, tx, "t:"+name)
	})
	return found, wrap("delete", err)
}

// SetSwitch sets a kill switch (SwitchOn removes it), with an audit row
// and a notification, in one transaction: a rule's, a whole domain's (rule
// ""), or the global one (domain and rule ""). The audit subject is
// "rule:<domain>/<rule>", "domain:<domain>" or "global".
func (s *Store) SetSwitch(ctx context.Context, actor, domain, rule string, state rules.Switch) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		subject := SwitchSubject(domain, rule)
		if err := lockTenant(ctx, tx, subject); err != nil {
			return err
		}
		before := rules.SwitchOn.String()
		err := tx.QueryRow(ctx, "SELECT state FROM sluice_rule_switches WHERE domain = $1 AND rule = $2", domain, rule).Scan(&before)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if state == rules.SwitchOn {
			_, err = tx.Exec(ctx, "DELETE FROM sluice_rule_switches WHERE domain = $1 AND rule = $2", domain, rule)
		} else {
			_, err = tx.Exec(ctx, `INSERT INTO sluice_rule_switches (domain, rule, state) VALUES ($1, $2, $3)
				ON CONFLICT (domain, rule) DO UPDATE SET state = $3, updated_at = now()`, domain, rule, state.String())
		}
		if err != nil {
			return err
		}
		b, _ := json.Marshal(map[string]string{"state": before})
		a, _ := json.Marshal(map[string]string{"state": state.String()})
		if err := audit(ctx, tx, actor, "switch", subject, b, a); err != nil {
			return err
		}
		return notify(ctx, tx, "s:")
	})
	return wrap("switch", err)
}

// SwitchSubject is the audit subject of a kill switch (see SetSwitch).
func SwitchSubject(domain, rule string) string {
	switch {
	case domain == "" && rule == "":
		return "global"
	case rule == "":
		return "domain:" + domain
	}
	return "rule:" + domain + "/" + rule
}

// Audit writes one audit row on its own (for actions whose effect is not
// in the database, such as resetting counters).
func (s *Store) Audit(ctx context.Context, actor, action, subject string, detail any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("pg: audit: %w", err)
	}
	_, err = s.pool.Exec(ctx, "INSERT INTO sluice_audit (actor, action, subject, after) VALUES ($1, $2, $3, $4)", actor, action, subject, b)
	return wrap("audit", err)
}

// AuditEntry is one row of the audit log (tenant.AuditEntry).
type AuditEntry = tenant.AuditEntry

// AuditLog returns the audit rows of subject ("tenant:acme",
// "rule:domain/id"), oldest first, at most limit.
func (s *Store) AuditLog(ctx context.Context, subject string, limit int) ([]AuditEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, action, subject, before, after FROM sluice_audit
		WHERE subject = $1 ORDER BY id LIMIT $2`, subject, limit)
	if err != nil {
		return nil, wrap("audit log", err)
	}
	out, err := pgx.CollectRows(rows, scanAudit)
	return out, wrap("audit log", err)
}

// AuditQuery selects audit rows for AuditPage (tenant.AuditQuery).
type AuditQuery = tenant.AuditQuery

// AuditPage returns the audit rows q selects, newest first (by ID, the
// order they were written in), and more: whether rows beyond the page
// exist (the next page starts Before the last row's ID).
func (s *Store) AuditPage(ctx context.Context, q AuditQuery) (rows []AuditEntry, more bool, err error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	q.Limit = min(q.Limit, tenant.MaxAuditPage)
	where := []string{"true"}
	var args []any
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if q.Tenant != "" {
		arg("subject = $%d", "tenant:"+q.Tenant)
	}
	if q.Actor != "" {
		arg("actor = $%d", q.Actor)
	}
	if !q.Since.IsZero() {
		arg("at >= $%d", q.Since)
	}
	if !q.Until.IsZero() {
		arg("at < $%d", q.Until)
	}
	if q.Before > 0 {
		arg("id < $%d", q.Before)
	}
	args = append(args, q.Limit+1)
	r, err := s.pool.Query(ctx, `SELECT id, at, actor, action, subject, before, after FROM sluice_audit
		WHERE `+strings.Join(where, " AND ")+fmt.Sprintf(" ORDER BY id DESC LIMIT $%d", len(args)), args...)
	if err != nil {
		return nil, false, wrap("audit page", err)
	}
	out, err := pgx.CollectRows(r, scanAudit)
	if err != nil {
		return nil, false, wrap("audit page", err)
	}
	if len(out) > q.Limit {
		return out[:q.Limit], true, nil
	}
	return out, false, nil
}

// AuditAction returns the audit rows of action ("notify"), newest first,
// with an ID below before (0: from the newest), at most limit (1 to
// tenant.MaxAuditPage), and more: whether older rows exist.
func (s *Store) AuditAction(ctx context.Context, action string, before int64, limit int) (rows []AuditEntry, more bool, err error) {
	limit = min(max(limit, 1), tenant.MaxAuditPage)
	if before <= 0 {
		before = math.MaxInt64
	}
	r, err := s.pool.Query(ctx, `SELECT id, at, actor, action, subject, before, after FROM sluice_audit
		WHERE action = $1 AND id < $2 ORDER BY id DESC LIMIT $3`, action, before, limit+1)
	if err != nil {
		return nil, false, wrap("audit action", err)
	}
	out, err := pgx.CollectRows(r, scanAudit)
	if err != nil {
		return nil, false, wrap("audit action", err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

func scanAudit(r pgx.CollectableRow) (AuditEntry, error) {
	var e AuditEntry
	var b, a []byte
	err := r.Scan(&e.ID, &e.At, &e.Actor, &e.Action, &e.Subject, &b, &a)
	e.Before, e.After = b, a
	return e, err
}

func audit(ctx context.Context, tx pgx.Tx, actor, action, subject string, before, after []byte) error {
	_, err := tx.Exec(ctx, "INSERT INTO sluice_audit (actor, action, subject, before, after) VALUES ($1, $2, $3, $4, $5)",
		actor, action, subject, before, after)
	return err
}

func notify(ctx context.Context, tx pgx.Tx, payload string) error {
	_, err := tx.Exec(ctx, "SELECT pg_notify($1, $2)", Channel, payload)
	return err
}

// querier is what reads need: a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const tenantColumns = "tenant, tier, effective_at, expires_at, created_at, updated_at"
const overrideColumns = "tenant, domain, descriptor, requests_per_unit, unit, window_us, algorithm, burst, effective_at, expires_at, calendar"

func scanTenant(row pgx.Row, rec *tenant.Record) error {
	var tier string
	var exp *time.Time
	if err := row.Scan(&rec.Tenant, &tier, &rec.EffectiveAt, &exp, &rec.CreatedAt, &rec.UpdatedAt); err != nil {
		return err
	}
	t, err := rules.ParseTier(tier)
	if err != nil {
		return err
	}
	rec.Tier = t
	if exp != nil {
		rec.ExpiresAt = *exp
	}
	return nil
}

func scanOverride(row pgx.Row) (string, tenant.Override, error) {
	var name, alg string
	var unit *string
	var rpu, windowUS int64
	var exp *time.Time
	var o tenant.Override
	if err := row.Scan(&name, &o.Domain, &o.Descriptor, &rpu, &unit, &windowUS, &alg, &o.Limit.Burst, &o.EffectiveAt, &exp, &o.Calendar); err != nil {
		return "", o, err
	}
	a, err := sluice.ParseAlgorithm(alg)
	if err != nil {
		return "", o, err
	}
	o.Limit.Algorithm, o.Limit.Quota, o.Limit.Window = a, rpu, time.Duration(windowUS)*time.Microsecond
	o.RequestsPerUnit = uint32(rpu)
	if unit != nil {
		o.Unit = *unit
	}
	if exp != nil {
		o.ExpiresAt = *exp
	}
	return name, o, nil
}

func load(ctx context.Context, q querier, name string) (tenant.Record, bool, error) {
	var rec tenant.Record
	err := scanTenant(q.QueryRow(ctx, "SELECT "+tenantColumns+" FROM sluice_tenants WHERE tenant = $1", name), &rec)
	if errors.Is(err, pgx.ErrNoRows) {
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	rows, err := q.Query(ctx, "SELECT "+overrideColumns+" FROM sluice_overrides WHERE tenant = $1 ORDER BY domain, descriptor", name)
	if err != nil {
		return rec, false, err
	}
	defer rows.Close()
	for rows.Next() {
		_, o, err := scanOverride(rows)
		if err != nil {
			return rec, false, err
		}
		rec.Overrides = append(rec.Overrides, o)
	}
	return rec, true, rows.Err()
}

// Load returns one tenant's record (tenant.Source).
func (s *Store) Load(ctx context.Context, name string) (tenant.Record, bool, error) {
	rec, found, err := load(ctx, s.pool, name)
	return rec, found, wrap("load", err)
}

// List returns up to limit records ordered by tenant, starting after the
// tenant named after ("" for the first page), only those on tier when tier
// is not nil.
func (s *Store) List(ctx context.Context, tier *rules.Tier, after string, limit int) ([]tenant.Record, error) {
	var rows pgx.Rows
	var err error
	if tier != nil {
		rows, err = s.pool.Query(ctx, "SELECT "+tenantColumns+" FROM sluice_tenants WHERE tier = $1 AND tenant > $2 ORDER BY tenant LIMIT $3",
			tier.String(), after, limit)
	} else {
		rows, err = s.pool.Query(ctx, "SELECT "+tenantColumns+" FROM sluice_tenants WHERE tenant > $1 ORDER BY tenant LIMIT $2", after, limit)
	}
	if err != nil {
		return nil, wrap("list", err)
	}
	recs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenant.Record, error) {
		var rec tenant.Record
		return rec, scanTenant(r, &rec)
	})
	if err != nil || len(recs) == 0 {
		return recs, wrap("list", err)
	}
	names := make([]string, len(recs))
	idx := make(map[string]int, len(recs))
	for i := range recs {
		names[i], idx[recs[i].Tenant] = recs[i].Tenant, i
	}
	orows, err := s.pool.Query(ctx, "SELECT "+overrideColumns+" FROM sluice_overrides WHERE tenant = ANY($1) ORDER BY tenant, domain, descriptor", names)
	if err != nil {
		return nil, wrap("list", err)
	}
	defer orows.Close()
	for orows.Next() {
		name, o, err := scanOverride(orows)
		if err != nil {
			return nil, wrap("list", err)
		}
		recs[idx[name]].Overrides = append(recs[idx[name]].Overrides, o)
	}
	return recs, wrap("list", orows.Err())
}

// LoadAll streams every record (tenant.Source): tenants and overrides, each
// in one query, read in one repeatable-read transaction so they agree.
func (s *Store) LoadAll(ctx context.Context, each func(*tenant.Record) error) error {
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		// Overrides first, grouped by tenant; they are few beside tenants.
		ovs := map[string][]tenant.Override{}
		rows, err := tx.Query(ctx, "SELECT "+overrideColumns+" FROM sluice_overrides")
		if err != nil {
			return err
		}
		for rows.Next() {
			name, o, err := scanOverride(rows)
			if err != nil {
				rows.Close()
				return err
			}
			ovs[name] = append(ovs[name], o)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.Query(ctx, "SELECT "+tenantColumns+" FROM sluice_tenants")
		if err != nil {
			return err
		}
		defer rows.Close()
		var rec tenant.Record
		for rows.Next() {
			rec = tenant.Record{}
			if err := scanTenant(rows, &rec); err != nil {
				return err
			}
			rec.Overrides = ovs[rec.Tenant]
			if err := each(&rec); err != nil {
				return err
			}
		}
		return rows.Err()
	})
	return wrap("load all", err)
}

// Switches returns the rule switches that are not on (tenant.Source).
func (s *Store) Switches(ctx context.Context) ([]tenant.RuleSwitch, error) {
	rows, err := s.pool.Query(ctx, "SELECT domain, rule, state, updated_at FROM sluice_rule_switches ORDER BY domain, rule")
	if err != nil {
		return nil, wrap("switches", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenant.RuleSwitch, error) {
		var sw tenant.RuleSwitch
		var state string
		if err := r.Scan(&sw.Domain, &sw.Rule, &state, &sw.UpdatedAt); err != nil {
			return sw, err
		}
		st, err := rules.ParseSwitch(state)
		sw.State = st
		return sw, err
	})
	return out, wrap("switches", err)
}

// Listen reports changes (tenant.Source) on a connection of its own,
// checking it every Options.PingInterval while idle.
func (s *Store) Listen(ctx context.Context, ready func(), changed func(tenant.Change)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return wrap("listen", err)
	}
	// The connection carries LISTEN state: never give it back to the pool.
	c := conn.Hijack()
	defer c.Close(context.WithoutCancel(ctx))
	if _, err := c.Exec(ctx, "LISTEN "+Channel); err != nil {
		return wrap("listen", err)
	}
	ready()
	for {
		wctx, cancel := context.WithTimeout(ctx, s.opts.PingInterval)
		n, err := c.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil:
			switch {
			case strings.HasPrefix(n.Payload, "t:"):
				changed(tenant.Change{Tenant: n.Payload[2:]})
			case n.Payload == "s:":
				changed(tenant.Change{Switches: true})
			case n.Payload == "d:":
				changed(tenant.Change{Deny: true})
			}
		case errors.Is(err, context.DeadlineExceeded):
			pctx, cancel := context.WithTimeout(ctx, s.opts.ConnectTimeout)
			err := c.Ping(pctx)
			cancel()
			if err != nil {
				return wrap("listen: ping", err)
			}
		default:
			return wrap("listen", err)
		}
	}
}

// ErrDenyFull is tenant.ErrDenyFull: AddDeny returns it when
// tenant.MaxDenyEntries entries are kept already.
var ErrDenyFull = tenant.ErrDenyFull

// DenySubject is the audit subject of a deny entry:
// "deny:<domain>/<key>=<value or cidr>".
func DenySubject(e tenant.DenyEntry) string {
	v := e.Value
	if e.CIDR != "" {
		v = e.CIDR
	}
	return "deny:" + e.Domain + "/" + e.Key + "=" + v
}

type auditDeny struct {
	Domain string `json:"domain"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	CIDR   string `json:"cidr,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func auditDenyJSON(e tenant.DenyEntry) []byte {
	b, _ := json.Marshal(auditDeny{Domain: e.Domain, Key: e.Key, Value: e.Value, CIDR: e.CIDR, Reason: e.Reason})
	return b
}

// lockDeny serializes writers of the deny entries until tx ends (the
// bound on their number is checked under it).
func lockDeny(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended('sluice deny', 7))")
	return err
}

// AddDeny adds a deny entry (e.Domain, e.Key, e.Value or e.CIDR, both ""
// for every value; CIDR masked), or replaces the reason of the same entry,
// with an audit row naming actor and a notification, in one transaction.
// It returns ErrDenyFull when tenant.MaxDenyEntries are kept already. The
// caller validates e.
func (s *Store) AddDeny(ctx context.Context, actor string, e tenant.DenyEntry) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockDeny(ctx, tx); err != nil {
			return err
		}
		var before []byte
		var reason string
		err := tx.QueryRow(ctx, "SELECT reason FROM sluice_deny WHERE domain = $1 AND key = $2 AND value = $3 AND cidr = $4",
			e.Domain, e.Key, e.Value, e.CIDR).Scan(&reason)
		switch {
		case err == nil:
			old := e
			old.Reason = reason
			before = auditDenyJSON(old)
		case errors.Is(err, pgx.ErrNoRows):
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM sluice_deny").Scan(&n); err != nil {
				return err
			}
			if n >= tenant.MaxDenyEntries {
				return ErrDenyFull
			}
		default:
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO sluice_deny (domain, key, value, cidr, reason, actor) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (domain, key, value, cidr) DO UPDATE SET reason = $5, actor = $6`,
			e.Domain, e.Key, e.Value, e.CIDR, e.Reason, actor); err != nil {
			return err
		}
		if err := audit(ctx, tx, actor, "deny", DenySubject(e), before, auditDenyJSON(e)); err != nil {
			return err
		}
		return notify(ctx, tx, "d:")
	})
	if errors.Is(err, ErrDenyFull) {
		return err
	}
	return wrap("deny add", err)
}

// RemoveDeny removes a deny entry, with an audit row and a notification,
// in one transaction. found is false when there was none (nothing is
// written then).
func (s *Store) RemoveDeny(ctx context.Context, actor string, e tenant.DenyEntry) (found bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := lockDeny(ctx, tx); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, "DELETE FROM sluice_deny WHERE domain = $1 AND key = $2 AND value = $3 AND cidr = $4 RETURNING reason",
			e.Domain, e.Key, e.Value, e.CIDR).Scan(&e.Reason)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		if err := audit(ctx, tx, actor, "undeny", DenySubject(e), auditDenyJSON(e), nil); err != nil {
			return err
		}
		return notify(ctx, tx, "d:")
	})
	return found, wrap("deny remove", err)
}

const denyColumns = "domain, key, value, cidr, reason, actor, created_at"

func scanDeny(r pgx.CollectableRow) (tenant.DenyEntry, error) {
	var e tenant.DenyEntry
	err := r.Scan(&e.Domain, &e.Key, &e.Value, &e.CIDR, &e.Reason, &e.Actor, &e.CreatedAt)
	return e, err
}

// ListDeny returns up to limit deny entries of domain ("" every domain),
// ordered by domain, key, value and cidr, starting after the entry after
// (the zero entry: the first page).
func (s *Store) ListDeny(ctx context.Context, domain string, after tenant.DenyEntry, limit int) ([]tenant.DenyEntry, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+denyColumns+` FROM sluice_deny
		WHERE ($1 = '' OR domain = $1) AND (domain, key, value, cidr) > ($2, $3, $4, $5)
		ORDER BY domain, key, value, cidr LIMIT $6`, domain, after.Domain, after.Key, after.Value, after.CIDR, limit)
	if err != nil {
		return nil, wrap("deny list", err)
	}
	out, err := pgx.CollectRows(rows, scanDeny)
	return out, wrap("deny list", err)
}

// DenyEntries returns every deny entry (tenant.Source), at most
// tenant.MaxDenyEntries.
func (s *Store) DenyEntries(ctx context.Context) ([]tenant.DenyEntry, error) {
	rows, err := s.pool.Query(ctx, "SELECT "+denyColumns+" FROM sluice_deny LIMIT $1", tenant.MaxDenyEntries)
	if err != nil {
		return nil, wrap("deny entries", err)
	}
	out, err := pgx.CollectRows(rows, scanDeny)
	return out, wrap("deny entries", err)
}

var _ tenant.Source = (*Store)(nil)
