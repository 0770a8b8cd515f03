package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/notify"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
	"github.com/sluice-rl/sluice/tenant"
	"github.com/sluice-rl/sluice/tenant/pg"
)

const (
	rwToken     = "rw-token-0123456789abcdef"
	roToken     = "ro-token-0123456789abcdef"
	chargeToken = "charge-token-0123456789abcdef"
)

const testRules = `
domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 100
      tiers:
        pro: {requests_per_unit: 1000}
    descriptors:
      - key: endpoint
        value: POST /api/v1/orders
        rate_limit: {unit: minute, requests_per_unit: 20}
      - key: endpoint
        rate_limit: {unit: minute, requests_per_unit: 5}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
`

// billingRules is a second domain whose rule at the tenant key has the
// same path ("") as api's: an override of one must not touch the other.
const billingRules = `
domain: billing
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {calendar: month, requests_per_unit: 1000}
`

type env struct {
	srv   *httptest.Server
	pg    *pgtest.Server
	url   string // the test database's
	snap  *rules.Snapshot
	store *pg.Store
	reg   *tenant.Registry
	eng   *service.Engine
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{"api.yaml": testRules, "billing.yaml": billingRules} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := rules.LoadDir(dir, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{pg: pgtest.Start(t), snap: snap}
	e.url = e.pg.NewDatabase(t)
	e.store, err = pg.Open(pg.Options{URL: e.url, ConnectTimeout: 10 * time.Second}) // a loaded machine is slow, not down
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.store.Close)
	if _, err := e.store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.reg = tenant.NewRegistry(e.store, tenant.Options{RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = e.reg.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-e.reg.Synced()
	// A clock that stands still: no window (remote_address is per second)
	// rolls over mid-test and refills what a test spent.
	ms := memory.New(memory.Options{Now: storetest.NewClock().Now})
	t.Cleanup(func() { ms.Close() })
	cfg := service.DefaultConfig()
	cfg.Overrides = e.reg
	e.eng, err = service.New(cfg, service.StaticRules{Snapshot: snap}, ms, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	toks := &Tokens{}
	_ = toks.Add("alice", ReadWrite, rwToken)
	_ = toks.Add("reader", ReadOnly, roToken)
	h, err := New(Options{Tokens: toks, Store: e.store, Rules: func() *rules.Snapshot { return snap }, Checker: e.eng, Counters: e.eng})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(h)
	t.Cleanup(e.srv.Close)
	return e
}

// do sends a request and decodes a JSON answer into out (if not nil).
func (e *env) do(t *testing.T, method, path, token, body string, out any) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
	return resp.StatusCode, string(b)
}

func (e *env) check(t *testing.T, entries ...rules.Entry) service.Status {
	t.Helper()
	zero := uint64(0)
	resp, err := e.eng.Check(context.Background(), service.Request{Domain: "api", Descriptors: []service.Descriptor{{Entries: entries, Hits: &zero}}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Statuses[0]
}

func TestAdmin(t *testing.T) {
	e := newEnv(t)
	put := `{"tier": "enterprise", "overrides": [{"domain": "api", "descriptor": "endpoint:POST /api/v1/orders", "requests_per_unit": 500, "unit": "minute"}], "expires_at": null}`

	t.Run("auth", func(t *testing.T) {
		for _, tc := range []struct {
			method, path, token, body string
			want                      int
		}{
			{"GET", "/admin/v1/quotas/acme", "", "", 401},
			{"GET", "/admin/v1/quotas/acme", "wrong-token-0123456789", "", 401},
			{"PUT", "/admin/v1/quotas/acme", roToken, put, 403},
			{"DELETE", "/admin/v1/quotas/acme", roToken, "", 403},
			{"PUT", "/admin/v1/switches", roToken, `{"domain":"api","rule":"remote_address","state":"off"}`, 403},
			{"GET", "/admin/v1/quotas/acme", roToken, "", 404}, // read-only may read
			{"GET", "/admin/v1/openapi.yaml", "", "", 200},
		} {
			got, body := e.do(t, tc.method, tc.path, tc.token, tc.body, nil)
			if got != tc.want {
				t.Errorf("%s %s with token %q: status %d, want %d (%s)", tc.method, tc.path, tc.token, got, tc.want, body)
			}
			if strings.Contains(body, rwToken) || strings.Contains(body, roToken) {
				t.Errorf("%s %s: the answer holds a token", tc.method, tc.path)
			}
		}
	})

	t.Run("put get list delete", func(t *testing.T) {
		if st := e.check(t, rules.Entry{Key: "api_key", Value: "acme"}, rules.Entry{Key: "endpoint", Value: "POST /api/v1/orders"}); st.CurrentLimit.RequestsPerUnit != 20 {
			t.Fatalf("before: limit %d, want the rule's 20", st.CurrentLimit.RequestsPerUnit)
		}
		var q QuotaJSON
		if code, body := e.do(t, "PUT", "/admin/v1/quotas/acme", rwToken, put, &q); code != 200 {
			t.Fatalf("PUT: %d %s", code, body)
		}
		if q.Tier != "enterprise" || len(q.Overrides) != 1 || q.UpdatedAt.IsZero() || q.Overrides[0].Algorithm != "fixed_window" {
			t.Errorf("PUT answered %+v", q)
		}
		sources := map[string]string{}
		for _, r := range q.Quotas {
			sources[r.Domain+"/"+r.Rule] = fmt.Sprintf("%s %d", r.Source, r.RequestsPerUnit)
		}
		want := map[string]string{"api/api_key": "default 100", "api/api_key.endpoint=POST /api/v1/orders": "override 500",
			"api/api_key.endpoint": "default 5", "billing/api_key": "default 1000"}
		for k, v := range want {
			if sources[k] != v {
				t.Errorf("quota of %s: %q, want %q", k, sources[k], v)
			}
		}
		// The registry hears of it and the engine enforces it.
		deadline := time.Now().Add(time.Minute)
		for e.check(t, rules.Entry{Key: "api_key", Value: "acme"}, rules.Entry{Key: "endpoint", Value: "POST /api/v1/orders"}).CurrentLimit.RequestsPerUnit != 500 {
			if time.Now().After(deadline) {
				t.Fatal("the override did not reach the engine within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		var u UsageJSON
		if code, body := e.do(t, "GET", "/admin/v1/usage/acme", roToken, "", &u); code != 200 {
			t.Fatalf("usage: %d %s", code, body)
		}
		if len(u.Limits) != 3 || u.Skipped != 0 {
			t.Errorf("usage lists %d limits, skipped %d; want 3 (no per-value counter yet), 0: %+v", len(u.Limits), u.Skipped, u)
		}
		for _, l := range u.Limits {
			if l.Descriptor == "endpoint:POST /api/v1/orders" && (l.Limit != 500 || l.Used != 0) {
				t.Errorf("usage of orders: %+v, want limit 500 used 0", l)
			}
		}

		var got QuotaJSON
		if code, body := e.do(t, "GET", "/admin/v1/quotas/acme", roToken, "", &got); code != 200 || got.Tier != "enterprise" {
			t.Errorf("GET: %d %s", code, body)
		}
		if code, _ := e.do(t, "PUT", "/admin/v1/quotas/beta", rwToken, `{"tier":"pro"}`, nil); code != 200 {
			t.Errorf("PUT beta: %d", code)
		}
		var page ListJSON
		if code, body := e.do(t, "GET", "/admin/v1/quotas?tier=pro&limit=1", roToken, "", &page); code != 200 || len(page.Tenants) != 1 || page.Tenants[0].Tenant != "beta" {
			t.Errorf("list pro: %d %s", code, body)
		}
		if code, _ := e.do(t, "DELETE", "/admin/v1/quotas/beta", rwToken, "", nil); code != 204 {
			t.Errorf("DELETE: %d, want 204", code)
		}
		if code, _ := e.do(t, "GET", "/admin/v1/quotas/beta", roToken, "", nil); code != 404 {
			t.Errorf("GET after DELETE: %d, want 404", code)
		}
	})

	t.Run("an override of one domain leaves the other alone", func(t *testing.T) {
		body := `{"tier": "custom", "overrides": [{"domain": "api", "descriptor": "", "requests_per_unit": 7, "unit": "minute"}]}`
		var q QuotaJSON
		if code, out := e.do(t, "PUT", "/admin/v1/quotas/shared", rwToken, body, &q); code != 200 {
			t.Fatalf("PUT: %d %s", code, out)
		}
		if len(q.Overrides) != 1 || q.Overrides[0].Domain != "api" {
			t.Errorf("overrides answered %+v, want one of domain api", q.Overrides)
		}
		key := rules.Entry{Key: "api_key", Value: "shared"}
		deadline := time.Now().Add(10 * time.Second)
		for e.check(t, key).CurrentLimit.RequestsPerUnit != 7 {
			if time.Now().After(deadline) {
				t.Fatal("the override did not reach the engine within 10s")
			}
			time.Sleep(10 * time.Millisecond)
		}
		admitted := map[string]int{}
		for _, domain := range []string{"api", "billing"} {
			for range 20 {
				resp, err := e.eng.Check(context.Background(), service.Request{Domain: domain, Descriptors: []service.Descriptor{{Entries: []rules.Entry{key}}}})
				if err != nil {
					t.Fatal(err)
				}
				if resp.OverallCode == service.CodeOK {
					admitted[domain]++
				}
			}
		}
		if admitted["api"] != 7 || admitted["billing"] != 20 {
			t.Errorf("admitted of 20 each: api %d, billing %d; want 7 (the override), 20 (billing's own 1000/month)", admitted["api"], admitted["billing"])
		}
	})

	t.Run("bad input names the field and writes nothing", func(t *testing.T) {
		for _, tc := range []struct{ body, field string }{
			{`{"tier": "gold"}`, "tier"},
			{`{}`, "tier"},
			{`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "", "requests_per_unit": 5, "unit": "fortnight"}]}`, "overrides[0].unit"},
			{`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "nope:x", "requests_per_unit": 5, "unit": "minute"}]}`, "overrides[0].descriptor"},
			{`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "", "requests_per_unit": -1, "unit": "minute"}]}`, "overrides[0].requests_per_unit"},
			{`{"tier": "pro", "effective_at": "2030-01-02T00:00:00Z", "expires_at": "2030-01-01T00:00:00Z"}`, "expires_at"},
			{`{"tier": "pro", "colour": "red"}`, "colour"},
			{`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "", "requests_per_unit": 5}]}`, "overrides[0].unit"},
			{`{"tier": 7}`, "tier"},
			{`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "", "requests_per_unit": 5, "unit": "minute"}, {"domain": "api", "descriptor": "", "requests_per_unit": 6, "unit": "minute"}]}`, "overrides[1].descriptor"},
			{`{"tier": "pro", "overrides": [{"domain": "api", "descriptor": "", "requests_per_unit": 5, "unit": "minute", "algorithm": "fixed_window", "burst": 3}]}`, "overrides[0].burst"},
			{`{"tier": "pro"} {}`, "body"},
			{`{"tier": "pro", "overrides": [{"descriptor": "", "requests_per_unit": 5, "unit": "minute"}]}`, "overrides[0].domain"},
			{`{"tier": "pro", "overrides": [{"domain": "*", "descriptor": "", "requests_per_unit": 5, "unit": "minute"}]}`, "overrides[0].domain"},
			{`{"tier": "pro", "overrides": [{"domain": "nope", "descriptor": "", "requests_per_unit": 5, "unit": "minute"}]}`, "overrides[0].domain"},
			{`{"tier": "pro", "overrides": [{"domain": "billing", "descriptor": "endpoint:POST /api/v1/orders", "requests_per_unit": 5, "unit": "minute"}]}`, "overrides[0].descriptor"},
		} {
			code, body := e.do(t, "PUT", "/admin/v1/quotas/bad", rwToken, tc.body, nil)
			var p struct {
				Errors []struct{ Field string }
			}
			_ = json.Unmarshal([]byte(body), &p)
			named := false
			for _, f := range p.Errors {
				named = named || f.Field == tc.field
			}
			if code != 400 || !named {
				t.Errorf("PUT %s: %d %s; want 400 naming %s", tc.body, code, body, tc.field)
			}
		}
		if code, _ := e.do(t, "GET", "/admin/v1/quotas/bad", roToken, "", nil); code != 404 {
			t.Errorf("after bad PUTs: GET %d, want 404 (nothing written)", code)
		}
		log, err := e.store.AuditLog(context.Background(), "tenant:bad", 10)
		if err != nil || len(log) != 0 {
			t.Errorf("audit rows after bad PUTs: %d, %v; want none", len(log), err)
		}
	})

	t.Run("switches", func(t *testing.T) {
		if code, body := e.do(t, "PUT", "/admin/v1/switches", rwToken, `{"domain":"api","rule":"nope","state":"off"}`, nil); code != 400 || !strings.Contains(body, `"rule"`) {
			t.Errorf("switch of an unknown rule: %d %s", code, body)
		}
		if code, body := e.do(t, "PUT", "/admin/v1/switches", rwToken, `{"domain":"api","rule":"remote_address","state":"off"}`, nil); code != 200 {
			t.Fatalf("switch off: %d %s", code, body)
		}
		deadline := time.Now().Add(time.Minute)
		for e.check(t, rules.Entry{Key: "remote_address", Value: "1.2.3.4"}).Rule != nil {
			if time.Now().After(deadline) {
				t.Fatal("the switch did not reach the engine within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		var out struct{ Switches []SwitchJSON }
		if code, _ := e.do(t, "GET", "/admin/v1/switches", roToken, "", &out); code != 200 || len(out.Switches) != 1 || out.Switches[0].State != "off" {
			t.Errorf("GET switches: %d %+v", code, out)
		}
		if code, _ := e.do(t, "PUT", "/admin/v1/switches", rwToken, `{"domain":"api","rule":"remote_address","state":"on"}`, nil); code != 200 {
			t.Errorf("switch on: %d", code)
		}
	})

	t.Run("postgres down: 503, nothing lost", func(t *testing.T) {
		e.pg.Kill()
		code, body := e.do(t, "PUT", "/admin/v1/quotas/down", rwToken, `{"tier":"pro"}`, nil)
		if code != 503 {
			t.Errorf("PUT while PostgreSQL is down: %d %s; want 503", code, body)
		}
		if strings.Contains(body, "127.0.0.1") || strings.Contains(body, "postgres://") {
			t.Errorf("503 answer reveals the database address: %s", body)
		}
		// Checks go on with the last known overrides.
		if st := e.check(t, rules.Entry{Key: "api_key", Value: "acme"}, rules.Entry{Key: "endpoint", Value: "POST /api/v1/orders"}); st.CurrentLimit.RequestsPerUnit != 500 {
			t.Errorf("while down: limit %d, want the last known 500", st.CurrentLimit.RequestsPerUnit)
		}
		e.pg.Start()
	})
}

func TestTokens(t *testing.T) {
	toks, err := ParseTokens([]byte("# admins\nalice rw " + rwToken + "\n\nreader ro " + roToken + "\nbilling charge " + chargeToken + "\n"))
	if err != nil || toks.Len() != 3 {
		t.Fatalf("ParseTokens = %d tokens, %v", toks.Len(), err)
	}
	for _, tc := range []struct {
		header string
		name   string
		access Access
		want   bool
	}{
		{"Bearer " + rwToken, "alice", ReadWrite, true},
		{"Bearer " + roToken, "reader", ReadOnly, true},
		{"Bearer " + chargeToken, "billing", ChargeOnly, true},
		{"Bearer " + rwToken + "x", "", 0, false},
		{"bearer " + rwToken, "alice", ReadWrite, true}, // RFC 9110 §11.1: the scheme is case-insensitive
		{"BEARER " + roToken, "reader", ReadOnly, true},
		{"bEaReR  " + rwToken, "alice", ReadWrite, true},
		{"Bearer" + rwToken, "", 0, false},
		{"Bearerx " + rwToken, "", 0, false},
		{"Bearer ", "", 0, false},
		{rwToken, "", 0, false},
		{"", "", 0, false},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:"+roToken)), "reader", ReadOnly, true},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("alice:"+roToken+"x")), "", 0, false},
		{"Basic !!!", "", 0, false},
	} {
		name, access, ok := toks.check(tc.header)
		if name != tc.name || access != tc.access || ok != tc.want {
			t.Errorf("check(%q) = %q, %v, %v; want %q, %v, %v", tc.header, name, access, ok, tc.name, tc.access, tc.want)
		}
	}
	_, err = ParseTokens([]byte("bob admin supersecretvalue0123456789\ncarol rw short\n"))
	if err == nil || strings.Contains(err.Error(), "supersecret") || !strings.Contains(err.Error(), "line 1") || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("ParseTokens errors = %v; want lines 1 and 2 named, no token", err)
	}
}

// TestBearerSchemeCase: the Bearer scheme's name is case-insensitive (RFC
// 9110 §11.1) on every guard, the state-changing ones included.
func TestBearerSchemeCase(t *testing.T) {
	toks, err := ParseTokens([]byte("alice rw " + rwToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := &handler{opts: Options{Tokens: toks}}
	reach := func(w http.ResponseWriter, _ *http.Request, _ string) { w.WriteHeader(http.StatusTeapot) }
	guards := []struct {
		name string
		h    http.Handler
	}{
		{"admin read", h.auth(false, reach)},
		{"admin write", h.auth(true, reach)},
		{"charge", toks.Charge()(ok)},
		{"dashboard", toks.Read()(ok)},
	}
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"Bearer " + rwToken, http.StatusTeapot},
		{"bearer " + rwToken, http.StatusTeapot},
		{"BEARER " + rwToken, http.StatusTeapot},
		{"BeArEr " + rwToken, http.StatusTeapot},
		{"bearer wrong-token-wrong-token-wrong", http.StatusUnauthorized},
		{"bearer", http.StatusUnauthorized},
		{"bearer" + rwToken, http.StatusUnauthorized},
	} {
		for _, g := range guards {
			req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", tc.header)
			rec := httptest.NewRecorder()
			g.h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("%s with Authorization %.12q…: status %d, want %d", g.name, tc.header, rec.Code, tc.want)
			}
		}
	}
}

// TestAccessMatrix: what each kind of token may do, through the three
// guards that use tokens (the admin API's reads and writes, POST
// /v1/charge's Charge, the dashboard's Read).
func TestAccessMatrix(t *testing.T) {
	toks, err := ParseTokens([]byte("alice rw " + rwToken + "\nreader ro " + roToken + "\nbilling charge " + chargeToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h := &handler{opts: Options{Tokens: toks}}
	reach := func(w http.ResponseWriter, _ *http.Request, _ string) { w.WriteHeader(http.StatusTeapot) }
	guards := []struct {
		name string
		h    http.Handler
	}{
		{"admin read", h.auth(false, reach)},
		{"admin write", h.auth(true, reach)},
		{"charge", toks.Charge()(ok)},
		{"dashboard", toks.Read()(ok)},
	}
	want := map[string][4]int{ // per guard, in the order above
		rwToken:     {http.StatusTeapot, http.StatusTeapot, http.StatusTeapot, http.StatusTeapot},
		roToken:     {http.StatusTeapot, http.StatusForbidden, http.StatusForbidden, http.StatusTeapot},
		chargeToken: {http.StatusForbidden, http.StatusForbidden, http.StatusTeapot, http.StatusForbidden},
		"":          {http.StatusUnauthorized, http.StatusUnauthorized, http.StatusUnauthorized, http.StatusUnauthorized},
	}
	for tok, codes := range want {
		for i, g := range guards {
			req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			rec := httptest.NewRecorder()
			g.h.ServeHTTP(rec, req)
			if rec.Code != codes[i] {
				t.Errorf("%s with token %.6s…: status %d, want %d", g.name, tok, rec.Code, codes[i])
			}
			if strings.Contains(rec.Body.String(), tok) && tok != "" {
				t.Errorf("%s: the answer contains the token", g.name)
			}
		}
	}
}

func TestReadMiddleware(t *testing.T) {
	toks, err := ParseTokens([]byte("reader ro " + roToken + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	h := toks.Read()(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer " + roToken, http.StatusTeapot},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+roToken)), http.StatusTeapot},
		{"Bearer nope-nope-nope-nope", http.StatusUnauthorized},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/dashboard/", nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("Authorization %.20q: status %d, want %d", tc.header, rec.Code, tc.want)
		}
		if rec.Code == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("401 without a Basic challenge: %q", rec.Header().Get("WWW-Authenticate"))
		}
	}
}

func TestDecodeQuotaBounds(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"tier":"pro","overrides":[`)
	for i := range tenant.MaxOverrides + 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"descriptor":"d%d","requests_per_unit":1,"unit":"second"}`, i)
	}
	b.WriteString(`]}`)
	if _, err := DecodeQuota(b.Bytes(), "x"); err == nil || !strings.Contains(err.Error(), "overrides") {
		t.Errorf("DecodeQuota of %d overrides = %v, want an error naming overrides", tenant.MaxOverrides+1, err)
	}
}

// TestDecodeReportsEveryProblem: a body's unknown fields, repeated members
// and invalid values are reported together, each naming its field.
func TestDecodeReportsEveryProblem(t *testing.T) {
	_, err := DecodeQuota([]byte(`{"tier":"gold","tier":"pro","teir":"x","overrides":[{"descriptor":"d","requests_per_unit":-1,"unit":"second","colour":1}]}`), "acme")
	fe := asFieldErrors(err)
	got := map[string]string{}
	for _, f := range fe {
		got[f.Field] = f.Msg
	}
	for field, msg := range map[string]string{
		"tier":                           "duplicate member",
		"teir":                           "unknown field",
		"overrides[0].colour":            "unknown field",
		"overrides[0].requests_per_unit": "want a whole number from 0 to 4294967295, got \"-1\"",
	} {
		if !strings.Contains(got[field], msg) {
			t.Errorf("DecodeQuota: field %s = %q, want %q (all problems: %v)", field, got[field], msg, err)
		}
	}
	if _, _, _, err := DecodeSwitch([]byte(`{"domain":"api","domain":"x","rule":"r","state":"off"}`)); err == nil || !strings.Contains(err.Error(), "domain: duplicate member") {
		t.Errorf("DecodeSwitch with a repeated domain: %v, want domain: duplicate member", err)
	}
	if _, _, err := DecodeReset([]byte(`{"tenant":"acme","tenant":"globex"}`)); err == nil || !strings.Contains(err.Error(), "tenant: duplicate member") {
		t.Errorf("DecodeReset with a repeated tenant: %v, want tenant: duplicate member", err)
	}
}

func TestDecodeSwitchScopes(t *testing.T) {
	long := strings.Repeat("x", maxSwitchName+1)
	tests := []struct {
		body               string
		domain, rule, errs string // errs: the fields named, comma-separated
	}{
		{body: `{"domain":"d","rule":"r","state":"off"}`, domain: "d", rule: "r"},
		{body: `{"scope":"rule","domain":"d","rule":"r","state":"shadow"}`, domain: "d", rule: "r"},
		{body: `{"scope":"domain","domain":"d","state":"off"}`, domain: "d"},
		{body: `{"scope":"global","state":"off"}`},
		{body: `{"domain":"d","state":"off"}`, errs: "rule"},
		{body: `{"scope":"domain","state":"off"}`, errs: "domain"},
		{body: `{"scope":"domain","domain":"d","rule":"r","state":"off"}`, errs: "rule"},
		{body: `{"scope":"global","domain":"d","rule":"r","state":"off"}`, errs: "domain,rule"},
		{body: `{"scope":"planet","state":"off"}`, errs: "scope"},
		{body: `{"scope":"global","state":"dim"}`, errs: "state"},
		{body: `{"scope":"domain","domain":"` + long + `","state":"off"}`, errs: "domain"},
	}
	for _, tt := range tests {
		domain, rule, _, err := DecodeSwitch([]byte(tt.body))
		if tt.errs == "" {
			if err != nil || domain != tt.domain || rule != tt.rule {
				t.Errorf("DecodeSwitch(%s) = %q, %q, %v; want %q, %q, nil", tt.body, domain, rule, err, tt.domain, tt.rule)
			}
			continue
		}
		var fe fieldErrors
		if !errors.As(err, &fe) {
			t.Errorf("DecodeSwitch(%s) = %v, want field errors on %s", tt.body, err, tt.errs)
			continue
		}
		var names []string
		for _, f := range fe {
			names = append(names, f.Field)
		}
		if got := strings.Join(names, ","); got != tt.errs {
			t.Errorf("DecodeSwitch(%s): fields %s, want %s", tt.body, got, tt.errs)
		}
	}
}

// GET /admin/v1/notifications lists what fired, newest first, in pages,
// to a read-only token; without a Notifications it answers 503; a bad
// limit or cursor is 400.
func TestNotificationsEndpoint(t *testing.T) {
	log := notify.NewMemory(10)
	for i := range 3 {
		_ = log.Add(context.Background(), notify.Fired{ID: fmt.Sprint("f", i), Domain: "api", Rule: "api_key", Key: "api_key=k", Level: 50 + 10*i,
			Limit: 100, Used: int64(50 + 10*i), PeriodEnd: time.Unix(3600, 0).UTC(), FiredAt: time.Unix(int64(i), 0).UTC()})
	}
	toks := &Tokens{}
	_ = toks.Add("reader", ReadOnly, roToken)
	snap, _ := rules.Parse("x.yaml", []byte(testRules), rules.Options{})
	get := func(opts Options, path, token string) (int, []byte) {
		t.Helper()
		h, err := New(opts)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.Bytes()
	}
	opts := Options{Tokens: toks, Rules: func() *rules.Snapshot { return snap }, Notifications: log}
	code, body := get(opts, "/admin/v1/notifications?limit=2", roToken)
	var page NotificationsJSON
	if err := json.Unmarshal(body, &page); code != 200 || err != nil {
		t.Fatalf("GET: %d %s", code, body)
	}
	if len(page.Notifications) != 2 || page.Notifications[0].ID != "f2" || page.Notifications[1].ID != "f1" || page.Next == "" {
		t.Fatalf("first page %s, want f2, f1 and a cursor", body)
	}
	if f := page.Notifications[0]; !f.PeriodEnd.Equal(time.Unix(3600, 0)) || f.Level != 70 || f.Key != "api_key=k" || f.Used != 70 || f.Limit != 100 {
		t.Errorf("first notification %+v", f)
	}
	code, body = get(opts, "/admin/v1/notifications?limit=2&cursor="+page.Next, roToken)
	var older NotificationsJSON
	if err := json.Unmarshal(body, &older); code != 200 || err != nil || len(older.Notifications) != 1 || older.Notifications[0].ID != "f0" || older.Next != "" {
		t.Errorf("next page: %d %s, want f0 alone", code, body)
	}
	for _, bad := range []string{"limit=0", "limit=1001", "limit=x", "cursor=-1", "cursor=abc"} {
		if code, body := get(opts, "/admin/v1/notifications?"+bad, roToken); code != 400 {
			t.Errorf("?%s: %d %s, want 400", bad, code, body)
		}
	}
	if code, _ := get(opts, "/admin/v1/notifications", ""); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}
	opts.Notifications = nil
	if code, _ := get(opts, "/admin/v1/notifications", roToken); code != 503 {
		t.Errorf("without notifications: %d, want 503", code)
	}
}
