// Package admin is Sluice's admin HTTP API under /admin/v1/: tenants'
// quotas (tier and overrides; read, replace, delete, list by tier), a
// tenant's usage read from the store without charging, resets of a
// tenant's counters or of one key, the rules' kill switches, and the audit
// log of every change. Every
// endpoint but the OpenAPI document needs a bearer token; read-only tokens
// may only read. Changes go to PostgreSQL (package tenant/pg, behind the
// Store interface) with an audit row naming the token, and reach every
// instance through the tenant registry; a reset's audit row is written
// before the counters are reset.
package admin

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/tenant"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3 document of the admin API (YAML).
func OpenAPI() []byte { return slices.Clone(openAPI) }

// Store is where tenant records are written and read. *pg.Store implements
// it. Errors caused by an unreachable database wrap tenant.ErrUnavailable.
type Store interface {
	Put(ctx context.Context, actor string, rec tenant.Record) (tenant.Record, error)
	Load(ctx context.Context, name string) (tenant.Record, bool, error)
	Delete(ctx context.Context, actor, name string) (bool, error)
	List(ctx context.Context, tier *rules.Tier, after string, limit int) ([]tenant.Record, error)
	SetSwitch(ctx context.Context, actor, domain, rule string, state rules.Switch) error
	Switches(ctx context.Context) ([]tenant.RuleSwitch, error)
	// AddDeny, RemoveDeny and ListDeny keep the deny entries (see
	// tenant.DenyEntry); AddDeny returns tenant.ErrDenyFull at the bound.
	AddDeny(ctx context.Context, actor string, e tenant.DenyEntry) error
	RemoveDeny(ctx context.Context, actor string, e tenant.DenyEntry) (bool, error)
	ListDeny(ctx context.Context, domain string, after tenant.DenyEntry, limit int) ([]tenant.DenyEntry, error)
	// Audit writes one audit row on its own, for changes made outside the
	// database (resetting counters); detail is marshalled to JSON.
	Audit(ctx context.Context, actor, action, subject string, detail any) error
	// AuditPage reads the audit log, newest first; more reports rows beyond
	// the page.
	AuditPage(ctx context.Context, q tenant.AuditQuery) (rows []tenant.AuditEntry, more bool, err error)
}

// Checker decides checks; usage asks it with zero hits. *service.Engine
// implements it.
type Checker interface {
	Check(ctx context.Context, req service.Request) (service.Response, error)
}

// Counters finds, reads and resets counters in the rate-limit store: POST
// /admin/v1/reset, and the per-value counters of GET /admin/v1/usage.
// *service.Engine implements it.
type Counters interface {
	Reset(ctx context.Context, req service.Request, opts service.ResetOptions) (service.ResetResult, error)
	ResetTenant(ctx context.Context, tenant string, opts service.ResetOptions) (service.ResetResult, error)
	TenantEntries(ctx context.Context, r *rules.Rule, tenant string, max int) ([][]rules.Entry, bool, error)
}

// Options configure the admin API. Tokens and Rules are required.
type Options struct {
	// Tokens are the accepted bearer tokens; with none, every request is
	// refused (401).
	Tokens *Tokens
	// Store holds tenant records; nil answers 503 on the endpoints that
	// need it (tenants are off without PostgreSQL).
	Store Store
	// Rules returns the rules in force, to validate descriptors and rule
	// IDs and to resolve quotas.
	Rules func() *rules.Snapshot
	// Checker reads usage; nil answers 503 on /usage.
	Checker Checker
	// Counters resets counters and lists the per-value ones; nil answers
	// 503 on /reset, and /usage leaves per-value rules out (skipped).
	Counters Counters
	// Logger receives failures of the store. Nil discards.
	Logger *slog.Logger
	// Timeout bounds each database call; zero means 5s.
	Timeout time.Duration
	// MaxBodyBytes bounds request bodies; zero means 256 KiB.
	MaxBodyBytes int64
	// Now is the clock for resolving quotas; nil means time.Now.
	Now func() time.Time
	// Sample is the engine's sample of recent checks (GET
	// /admin/v1/sample); nil answers 503.
	Sample *service.Sample
	// Notifications lists the notify_at levels that fired (GET
	// /admin/v1/notifications); nil answers 503.
	Notifications Notifications
}

// Prefix is the path every admin endpoint starts with.
const Prefix = "/admin/v1/"

type handler struct {
	opts Options
	log  *slog.Logger
}

// New returns the admin API handler, to be mounted at Prefix on the HTTP
// listener. It is safe for concurrent use.
func New(opts Options) (http.Handler, error) {
	if opts.Rules == nil {
		return nil, errors.New("admin: Options.Rules is required")
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 256 << 10
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	h := &handler{opts: opts, log: opts.Logger}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	for _, rt := range h.routes() {
		mux.Handle(rt.pattern, rt.h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		problem(w, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s %s", r.Method, r.URL.Path), nil)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := len(r.URL.RawQuery); n > MaxQueryBytes {
			problem(w, http.StatusRequestURITooLong, fmt.Sprintf("query: %d bytes, at most %d", n, MaxQueryBytes), nil)
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}

// MaxQueryBytes bounds a request's query string: one longer is answered
// 414 before it is parsed or its token checked. The longest parameter an
// endpoint takes is GET /admin/v1/deny's cursor, at most 8 KiB; the
// others are a few hundred bytes. net/http bounds the request line only by
// the server's MaxHeaderBytes (1 MiB by default).
const MaxQueryBytes = 16 << 10

// route is one endpoint: "METHOD /path" and its handler.
type route struct {
	pattern string
	h       http.Handler
}

// routes are the endpoints, each of which openapi.yaml describes (a test
// checks it).
func (h *handler) routes() []route {
	return []route{
		{"GET /admin/v1/openapi.yaml", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/yaml")
			_, _ = w.Write(openAPI)
		})},
		{"GET /admin/v1/quotas", h.auth(false, h.withStore(h.list))},
		{"GET /admin/v1/quotas/{tenant}", h.auth(false, h.withTenant(h.get))},
		{"PUT /admin/v1/quotas/{tenant}", h.auth(true, h.withTenant(h.put))},
		{"DELETE /admin/v1/quotas/{tenant}", h.auth(true, h.withTenant(h.delete))},
		{"GET /admin/v1/usage/{tenant}", h.auth(false, h.usage)},
		{"POST /admin/v1/reset", h.auth(true, h.reset)},
		{"GET /admin/v1/switches", h.auth(false, h.withStore(h.switches))},
		{"PUT /admin/v1/switches", h.auth(true, h.withStore(h.setSwitch))},
		{"GET /admin/v1/deny", h.auth(false, h.withStore(h.listDeny))},
		{"PUT /admin/v1/deny", h.auth(true, h.withStore(h.addDeny))},
		{"DELETE /admin/v1/deny", h.auth(true, h.withStore(h.removeDeny))},
		{"GET /admin/v1/audit", h.auth(false, h.withStore(h.audit))},
		{"GET /admin/v1/sample", h.auth(false, h.sample)},
		{"GET /admin/v1/notifications", h.auth(false, h.notifications)},
	}
}

// auth admits a request with a valid token: 401 without one, 403 for a
// read-only token on an endpoint that writes and for a charge-only token
// on any admin endpoint.
func (h *handler) auth(write bool, f func(w http.ResponseWriter, r *http.Request, actor string)) http.Handler {
	n := needRead
	if write {
		n = needWrite
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name, ok := h.opts.Tokens.authorize(w, r, n); ok {
			f(w, r, name)
		}
	})
}

// problem writes an RFC 9457 problem+json body, with the invalid fields of
// a 400 as an "errors" extension member.
func problem(w http.ResponseWriter, status int, detail string, fields fieldErrors) {
	type fieldJSON struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	}
	body := struct {
		Type   string      `json:"type"`
		Title  string      `json:"title"`
		Status int         `json:"status"`
		Detail string      `json:"detail"`
		Errors []fieldJSON `json:"errors,omitempty"`
	}{"about:blank", http.StatusText(status), status, detail, nil}
	for _, f := range fields {
		body.Errors = append(body.Errors, fieldJSON{f.Field, f.Msg})
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// storeError answers a failure of the store: 503 when the database is out
// of reach (nothing was written), 500 otherwise.
func (h *handler) storeError(w http.ResponseWriter, r *http.Request, op string, err error) {
	if errors.Is(err, tenant.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		w.Header().Set("Retry-After", "5")
		problem(w, http.StatusServiceUnavailable, op+": PostgreSQL is unavailable; nothing was changed, try again", nil)
		return
	}
	h.log.ErrorContext(r.Context(), "admin: store failed", "op", op, "err", err)
	problem(w, http.StatusInternalServerError, op+": the store failed; see the server log", nil)
}

// withStore runs f with the tenant store, or answers 503 when there is none.
func (h *handler) withStore(f func(w http.ResponseWriter, r *http.Request, actor string, st Store)) func(w http.ResponseWriter, r *http.Request, actor string) {
	return func(w http.ResponseWriter, r *http.Request, actor string) {
		if h.opts.Store == nil {
			problem(w, http.StatusServiceUnavailable, "tenants are off: the server runs without --postgres-url", nil)
			return
		}
		f(w, r, actor, h.opts.Store)
	}
}

// withTenant is withStore for the endpoints under /quotas/{tenant}: it
// also answers 400 when the tenant in the path is invalid.
func (h *handler) withTenant(f func(w http.ResponseWriter, r *http.Request, actor string, st Store, name string)) func(w http.ResponseWriter, r *http.Request, actor string) {
	return h.withStore(func(w http.ResponseWriter, r *http.Request, actor string, st Store) {
		name, ok := tenantParam(w, r)
		if !ok {
			return
		}
		f(w, r, actor, st, name)
	})
}

func (h *handler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), h.opts.Timeout)
}

func (h *handler) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body: larger than %d bytes", tooBig.Limit), nil)
		} else {
			problem(w, http.StatusBadRequest, "body: "+err.Error(), nil)
		}
		return nil, false
	}
	return b, true
}

func tenantParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("tenant")
	if err := tenant.ValidTenant(name); err != nil {
		problem(w, http.StatusBadRequest, "tenant: "+err.Error(), fieldErrors{{Field: "tenant", Msg: err.Error()}})
		return "", false
	}
	return name, true
}

func (h *handler) get(w http.ResponseWriter, r *http.Request, _ string, st Store, name string) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	rec, found, err := st.Load(ctx, name)
	if err != nil {
		h.storeError(w, r, "read", err)
		return
	}
	if !found {
		problem(w, http.StatusNotFound, fmt.Sprintf("tenant %q has no record (it is on the free tier)", name), nil)
		return
	}
	h.replyQuota(w, rec)
}

func (h *handler) put(w http.ResponseWriter, r *http.Request, actor string, st Store, name string) {
	b, ok := h.body(w, r)
	if !ok {
		return
	}
	rec, err := DecodeQuota(b, name)
	if err == nil {
		if rec.EffectiveAt.IsZero() {
			rec.EffectiveAt = h.opts.Now().Truncate(time.Microsecond)
		}
		err = tenant.Prepare(&rec, h.opts.Rules())
	}
	if err != nil {
		badFields(w, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	out, err := st.Put(ctx, actor, rec)
	if err != nil {
		h.storeError(w, r, "write", err)
		return
	}
	h.replyQuota(w, out)
}

func (h *handler) delete(w http.ResponseWriter, r *http.Request, actor string, st Store, name string) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	found, err := st.Delete(ctx, actor, name)
	if err != nil {
		h.storeError(w, r, "delete", err)
		return
	}
	if !found {
		problem(w, http.StatusNotFound, fmt.Sprintf("tenant %q has no record", name), nil)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNoContent)
}

// MaxPage is the largest page of GET /admin/v1/quotas.
const MaxPage = 1000

func (h *handler) list(w http.ResponseWriter, r *http.Request, _ string, st Store) {
	q := r.URL.Query()
	var tier *rules.Tier
	if s := q.Get("tier"); s != "" {
		t, err := rules.ParseTier(s)
		if err != nil {
			problem(w, http.StatusBadRequest, "tier: "+err.Error(), fieldErrors{{Field: "tier", Msg: err.Error()}})
			return
		}
		tier = &t
	}
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPage {
			msg := fmt.Sprintf("want a whole number from 1 to %d, got %q", MaxPage, s)
			problem(w, http.StatusBadRequest, "limit: "+msg, fieldErrors{{Field: "limit", Msg: msg}})
			return
		}
		limit = n
	}
	after := q.Get("after")
	if len(after) > tenant.MaxTenantLen {
		problem(w, http.StatusBadRequest, "after: too long", fieldErrors{{Field: "after", Msg: "too long"}})
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	recs, err := st.List(ctx, tier, after, limit)
	if err != nil {
		h.storeError(w, r, "list", err)
		return
	}
	out := ListJSON{Tenants: []QuotaJSON{}}
	for _, rec := range recs {
		out.Tenants = append(out.Tenants, quotaJSON(rec))
	}
	if len(recs) == limit {
		out.Next = recs[len(recs)-1].Tenant
	}
	reply(w, http.StatusOK, out)
}

// replyQuota answers 200 with rec and the quotas it resolves to.
func (h *handler) replyQuota(w http.ResponseWriter, rec tenant.Record) {
	q := quotaJSON(rec)
	q.Quotas = h.resolve(&rec)
	reply(w, http.StatusOK, q)
}

// badFields answers 400 listing the invalid fields of err.
func badFields(w http.ResponseWriter, err error) {
	fe := asFieldErrors(err)
	problem(w, http.StatusBadRequest, fe.Error(), fe)
}

// resolve lists the limit each tenant rule gives the tenant of rec now.
func (h *handler) resolve(rec *tenant.Record) []ResolvedJSON {
	snap := tenant.NewSnapshot([]tenant.Record{*rec}, nil, h.opts.Now())
	out := []ResolvedJSON{}
	for _, r := range h.opts.Rules().Rules() {
		if r.TenantDepth == 0 || r.Unlimited {
			continue
		}
		entries := make([]rules.Entry, len(r.Path))
		entries[r.TenantDepth-1].Value = rec.Tenant
		tl, _ := snap.Resolve(r, entries, h.opts.Now)
		res := ResolvedJSON{Domain: r.Domain, Rule: r.ID, Descriptor: r.TenantPath, Source: "default",
			RequestsPerUnit: r.RequestsPerUnit, Unit: r.Unit, Window: r.Limit.Window.String(), Algorithm: r.Limit.Algorithm.String(), Burst: r.Limit.Burst}
		if tl != nil && r.Limit.Algorithm != sluice.Concurrency {
			res.Source = "override"
			for _, t := range r.Tiers {
				if t == tl {
					res.Source = "tier"
				}
			}
			res.RequestsPerUnit, res.Unit = tl.RequestsPerUnit, tl.Unit
			res.Window, res.Algorithm, res.Burst = tl.Limit.Window.String(), tl.Limit.Algorithm.String(), tl.Limit.Burst
		}
		out = append(out, res)
	}
	return out
}

// UsageJSON is the answer of GET /admin/v1/usage/{tenant}.
type UsageJSON struct {
	Tenant string      `json:"tenant"`
	Limits []LimitJSON `json:"limits"`
	// Skipped counts the tenant rules not listed: rules that count per
	// value below the tenant key (a wildcard or a bare key) when the
	// store cannot list its keys.
	Skipped int `json:"skipped,omitempty"`
	// Truncated names the rules ("<domain>/<rule ID>") that have more
	// per-value counters than MaxUsageCounters listed.
	Truncated []string `json:"truncated,omitempty"`
}

// LimitJSON is one limit's state in a usage answer.
type LimitJSON struct {
	Domain     string `json:"domain"`
	Rule       string `json:"rule"`
	Descriptor string `json:"descriptor"`
	// Counter, for a rule that counts per value, names this counter: the
	// entries other than the tenant, "key:value" joined by "|".
	Counter         string `json:"counter,omitempty"`
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit,omitempty"`
	Window          string `json:"window"`
	// Limit is the capacity Used and Remaining count against.
	Limit     int64 `json:"limit"`
	Used      int64 `json:"used"`
	Remaining int64 `json:"remaining"`
	// Reset is when the full quota is back, with no more traffic.
	Reset time.Time `json:"reset"`
	// Degraded is set when the store could not answer ("failed_open", …).
	Degraded string `json:"degraded,omitempty"`
}

// MaxUsageCounters bounds the per-value counters usage lists per rule.
const MaxUsageCounters = 100

// usageBatch bounds the descriptors of one usage check (below the
// engine's default max-descriptors).
const usageBatch = 16

// usageItem is one counter usage reads: its descriptor, its rule, and
// what names it (Counter) when the rule counts per value.
type usageItem struct {
	rule    *rules.Rule
	entries []rules.Entry
	counter string
}

func (h *handler) usage(w http.ResponseWriter, r *http.Request, _ string) {
	if h.opts.Checker == nil {
		problem(w, http.StatusServiceUnavailable, "usage is not available on this server", nil)
		return
	}
	name, ok := tenantParam(w, r)
	if !ok {
		return
	}
	out := UsageJSON{Tenant: name, Limits: []LimitJSON{}}
	byDomain := map[string][]usageItem{}
	for _, rule := range h.opts.Rules().Rules() {
		if rule.TenantDepth == 0 || rule.Unlimited {
			continue
		}
		entries := make([]rules.Entry, len(rule.Path))
		exact := true
		for i, st := range rule.Path {
			entries[i] = rules.Entry{Key: st.Key, Value: st.Value}
			if i != rule.TenantDepth-1 && st.Kind != rules.MatchExact {
				exact = false
			}
		}
		if exact {
			entries[rule.TenantDepth-1].Value = name
			byDomain[rule.Domain] = append(byDomain[rule.Domain], usageItem{rule: rule, entries: entries})
			continue
		}
		if h.opts.Counters == nil {
			out.Skipped++
			continue
		}
		list, more, err := h.opts.Counters.TenantEntries(r.Context(), rule, name, MaxUsageCounters)
		switch {
		case errors.Is(err, service.ErrNoKeyLister):
			out.Skipped++
			continue
		case err != nil:
			h.log.WarnContext(r.Context(), "admin: usage: listing counters failed", "err", err)
			problem(w, http.StatusServiceUnavailable, "usage: listing the tenant's counters: "+err.Error(), nil)
			return
		}
		if more {
			out.Truncated = append(out.Truncated, rule.Domain+"/"+rule.ID)
		}
		for _, es := range list {
			byDomain[rule.Domain] = append(byDomain[rule.Domain], usageItem{rule: rule, entries: es, counter: counterName(es, rule.TenantDepth-1)})
		}
	}
	now := h.opts.Now()
	domains := make([]string, 0, len(byDomain))
	for d := range byDomain {
		domains = append(domains, d)
	}
	slices.Sort(domains)
	zero := uint64(0)
	for _, d := range domains {
		items := byDomain[d]
		for start := 0; start < len(items); start += usageBatch {
			batch := items[start:min(start+usageBatch, len(items))]
			req := service.Request{Domain: d, Descriptors: make([]service.Descriptor, len(batch))}
			for i, it := range batch {
				req.Descriptors[i] = service.Descriptor{Entries: it.entries, Hits: &zero}
			}
			resp, err := h.opts.Checker.Check(r.Context(), req)
			if err != nil {
				problem(w, http.StatusInternalServerError, "usage: "+err.Error(), nil)
				return
			}
			for i, st := range resp.Statuses {
				if st.Rule == nil || st.CurrentLimit == nil || st.Rule.ID != batch[i].rule.ID { // switched off, or no longer matching
					continue
				}
				l := LimitJSON{Domain: d, Rule: st.Rule.ID, Descriptor: st.Rule.TenantPath, Counter: batch[i].counter,
					RequestsPerUnit: st.CurrentLimit.RequestsPerUnit, Unit: st.CurrentLimit.Unit, Window: st.CurrentLimit.Window.String(),
					Limit: st.Result.Limit, Remaining: st.Result.Remaining, Used: max(0, st.Result.Limit-st.Result.Remaining),
					Reset: now.Add(st.Result.ResetAfter).UTC().Truncate(time.Millisecond), Degraded: string(st.Degraded)}
				out.Limits = append(out.Limits, l)
			}
		}
	}
	reply(w, http.StatusOK, out)
}

// counterName names a per-value counter by its entries other than the
// tenant's (at index tenant): "key:value" joined by "|".
func counterName(entries []rules.Entry, tenant int) string {
	var b strings.Builder
	for i, e := range entries {
		if i == tenant {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(e.Key + ":" + e.Value)
	}
	return b.String()
}

func (h *handler) switches(w http.ResponseWriter, r *http.Request, _ string, st Store) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	sws, err := st.Switches(ctx)
	if err != nil {
		h.storeError(w, r, "read switches", err)
		return
	}
	out := []SwitchJSON{}
	for _, s := range sws {
		out = append(out, SwitchJSON{Scope: SwitchScope(s.Domain, s.Rule), Domain: s.Domain, Rule: s.Rule, State: s.State.String(), UpdatedAt: optTime(s.UpdatedAt)})
	}
	reply(w, http.StatusOK, map[string]any{"switches": out})
}

func (h *handler) setSwitch(w http.ResponseWriter, r *http.Request, actor string, st Store) {
	b, ok := h.body(w, r)
	if !ok {
		return
	}
	domain, rule, state, err := DecodeSwitch(b)
	switch {
	case err != nil, domain == "":
	case rule == "" && !h.opts.Rules().HasDomain(domain):
		err = fieldErrors{{Field: "domain", Msg: fmt.Sprintf("no rule file has domain %q (see /debug/rules)", domain)}}
	case rule != "" && !hasRule(h.opts.Rules(), domain, rule):
		err = fieldErrors{{Field: "rule", Msg: fmt.Sprintf("domain %q has no rule %q (see /debug/rules)", domain, rule)}}
	}
	if err != nil {
		badFields(w, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	if err := st.SetSwitch(ctx, actor, domain, rule, state); err != nil {
		h.storeError(w, r, "switch", err)
		return
	}
	reply(w, http.StatusOK, SwitchJSON{Scope: SwitchScope(domain, rule), Domain: domain, Rule: rule, State: state.String()})
}

func hasRule(s *rules.Snapshot, domain, id string) bool {
	for _, r := range s.Rules() {
		if r.Domain == domain && r.ID == id {
			return true
		}
	}
	return false
}
