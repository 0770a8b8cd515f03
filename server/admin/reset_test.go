package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

// spend checks one descriptor n times with one hit each.
func spend(t *testing.T, eng *service.Engine, n int, entries ...rules.Entry) {
	t.Helper()
	for range n {
		if _, err := eng.Check(context.Background(), service.Request{Domain: "api", Descriptors: []service.Descriptor{{Entries: entries}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// usedOf is how much of the descriptor's limit is spent, read without
// charging.
func usedOf(t *testing.T, eng *service.Engine, entries ...rules.Entry) int64 {
	t.Helper()
	resp, err := eng.Check(context.Background(), service.Request{Domain: "api", Descriptors: []service.Descriptor{{Entries: entries, Hits: new(uint64)}}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Statuses[0].Result
	return r.Limit - r.Remaining
}

func key(k, v string) rules.Entry { return rules.Entry{Key: k, Value: v} }

func TestReset(t *testing.T) {
	e := newEnv(t)
	acme := [][]rules.Entry{
		{key("api_key", "acme")},
		{key("api_key", "acme"), key("endpoint", "POST /api/v1/orders")},
		{key("api_key", "acme"), key("endpoint", "GET /a")}, // per value
		{key("api_key", "acme"), key("endpoint", "GET /b")},
	}
	others := [][]rules.Entry{
		{key("api_key", "acme2")},
		{key("api_key", "beta"), key("endpoint", "GET /a")},
		{key("remote_address", "1.2.3.4")},
	}
	for _, d := range append(slices.Clone(acme), others...) {
		spend(t, e.eng, 3, d...)
	}

	t.Run("auth", func(t *testing.T) {
		for _, tc := range []struct {
			token string
			want  int
		}{{"", 401}, {"wrong-token-0123456789", 401}, {roToken, 403}} {
			if code, body := e.do(t, "POST", "/admin/v1/reset", tc.token, `{"tenant":"acme"}`, nil); code != tc.want {
				t.Errorf("reset with token %q: %d %s, want %d", tc.token, code, body, tc.want)
			}
		}
		if u := usedOf(t, e.eng, acme[0]...); u != 3 {
			t.Errorf("after refused resets: %d used, want 3 (nothing reset)", u)
		}
	})

	t.Run("bad input names the field", func(t *testing.T) {
		for _, tc := range []struct{ body, field string }{
			{`{}`, "tenant"},
			{`{"tenant":"acme","domain":"api","descriptor":[{"key":"api_key","value":"acme"}]}`, "tenant"},
			{`{"domain":"api"}`, "descriptor"},
			{`{"descriptor":[{"key":"api_key","value":"acme"}]}`, "domain"},
			{`{"domain":"nope","descriptor":[{"key":"api_key","value":"acme"}]}`, "domain"},
			{`{"domain":"api","descriptor":[{"key":"","value":"acme"}]}`, "descriptor[0].key"},
			{`{"domain":"` + strings.Repeat("d", 300) + `","descriptor":[{"key":"api_key","value":"acme"}]}`, "domain"},
			{`{"domain":"api","descriptor":[` + strings.Repeat(`{"key":"k","value":"v"},`, 16) + `{"key":"k","value":"v"}]}`, "descriptor"},
			{`{"domain":"api","descriptor":[{"key":"api_key","value":"` + strings.Repeat("v", 5000) + `"}]}`, "descriptor[0].value"},
			{`{"tenant":"a\u0001b"}`, "tenant"},
			{`{"tenant":"acme","colour":"red"}`, "colour"},
			{`{"tenant":5}`, "tenant"},
		} {
			code, body := e.do(t, "POST", "/admin/v1/reset", rwToken, tc.body, nil)
			var p struct{ Errors []struct{ Field string } }
			_ = json.Unmarshal([]byte(body), &p)
			named := slices.ContainsFunc(p.Errors, func(f struct{ Field string }) bool { return f.Field == tc.field })
			if code != 400 || !named {
				t.Errorf("reset %s: %d %s; want 400 naming %s", tc.body, code, body, tc.field)
			}
		}
	})

	t.Run("a descriptor no limit applies to", func(t *testing.T) {
		if code, body := e.do(t, "POST", "/admin/v1/reset", rwToken, `{"domain":"api","descriptor":[{"key":"nothing","value":"x"}]}`, nil); code != 404 {
			t.Errorf("reset of an unlimited descriptor: %d %s, want 404", code, body)
		}
	})

	t.Run("one tenant, per-value counters included, audited", func(t *testing.T) {
		var got ResetJSON
		if code, body := e.do(t, "POST", "/admin/v1/reset", rwToken, `{"tenant":"acme"}`, &got); code != 200 {
			t.Fatalf("reset acme: %d %s", code, body)
		}
		if got.KeysReset != len(acme) || got.More || !got.Audited {
			t.Errorf("reset acme = %+v, want %d keys, no more, audited", got, len(acme))
		}
		for _, d := range acme {
			if u := usedOf(t, e.eng, d...); u != 0 {
				t.Errorf("acme's %v: %d used after the reset, want 0", d, u)
			}
		}
		for _, d := range others {
			if u := usedOf(t, e.eng, d...); u != 3 {
				t.Errorf("%v: %d used after acme's reset, want 3", d, u)
			}
		}
		log, err := e.store.AuditLog(context.Background(), "tenant:acme", 10)
		if err != nil || len(log) != 1 {
			t.Fatalf("audit rows of tenant:acme: %d, %v; want 1", len(log), err)
		}
		var detail struct {
			Tenant string
			Keys   []string
		}
		if err := json.Unmarshal(log[0].After, &detail); err != nil {
			t.Fatal(err)
		}
		if row := log[0]; row.Actor != "alice" || row.Action != "reset" || detail.Tenant != "acme" || len(detail.Keys) != len(acme) {
			t.Errorf("audit row = %s by %s: %s; want a reset by alice naming acme's %d keys", row.Action, row.Actor, row.After, len(acme))
		}
	})

	t.Run("one key", func(t *testing.T) {
		var got ResetJSON
		if code, body := e.do(t, "POST", "/admin/v1/reset", rwToken, `{"domain":"api","descriptor":[{"key":"api_key","value":"acme2"}]}`, &got); code != 200 {
			t.Fatalf("reset one key: %d %s", code, body)
		}
		if got.KeysReset != 1 || !got.Audited {
			t.Errorf("reset one key = %+v, want 1 key, audited", got)
		}
		if u := usedOf(t, e.eng, others[0]...); u != 0 {
			t.Errorf("acme2 after its reset: %d used, want 0", u)
		}
		if u := usedOf(t, e.eng, others[1]...); u != 3 {
			t.Errorf("beta after acme2's reset: %d used, want 3", u)
		}
		if log, err := e.store.AuditLog(context.Background(), "tenant:acme2", 10); err != nil || len(log) != 1 || log[0].Actor != "alice" {
			t.Errorf("audit rows of tenant:acme2: %+v, %v; want one by alice", log, err)
		}
	})

	t.Run("PostgreSQL down: 503, nothing reset", func(t *testing.T) {
		e.pg.Kill()
		defer e.pg.Start()
		code, body := e.do(t, "POST", "/admin/v1/reset", rwToken, `{"tenant":"beta"}`, nil)
		if code != 503 || !strings.Contains(body, "nothing was reset") {
			t.Errorf("reset while PostgreSQL is down: %d %s; want 503, nothing reset", code, body)
		}
		if u := usedOf(t, e.eng, others[1]...); u != 3 {
			t.Errorf("beta after a refused reset: %d used, want 3", u)
		}
	})
}

// noStoreHandler is the admin API of a server without PostgreSQL.
func noStoreHandler(t *testing.T, eng *service.Engine, snap *rules.Snapshot) http.Handler {
	t.Helper()
	toks := &Tokens{}
	_ = toks.Add("alice", ReadWrite, rwToken)
	_ = toks.Add("reader", ReadOnly, roToken)
	h, err := New(Options{Tokens: toks, Rules: func() *rules.Snapshot { return snap }, Checker: eng, Counters: eng})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func memEngine(t *testing.T) (*service.Engine, *rules.Snapshot) {
	t.Helper()
	snap, err := rules.Parse("api.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := memory.New(memory.Options{Now: storetest.NewClock().Now}) // a window never rolls over mid-test
	t.Cleanup(func() { ms.Close() })
	eng, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, ms, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return eng, snap
}

func serve(t *testing.T, h http.Handler, method, path, token, body string, out any) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if out != nil && rec.Code < 300 {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: decoding %s: %v", method, path, rec.Body, err)
		}
	}
	return rec.Code, rec.Body.String()
}

// Without PostgreSQL a reset is made and logged, not audited.
func TestResetWithoutPostgres(t *testing.T) {
	eng, snap := memEngine(t)
	h := noStoreHandler(t, eng, snap)
	spend(t, eng, 4, key("api_key", "acme"))
	var got ResetJSON
	if code, body := serve(t, h, "POST", "/admin/v1/reset", rwToken, `{"tenant":"acme"}`, &got); code != 200 {
		t.Fatalf("reset: %d %s", code, body)
	}
	if got.KeysReset != 1 || got.Audited {
		t.Errorf("reset without PostgreSQL = %+v, want 1 key, not audited", got)
	}
	if u := usedOf(t, eng, key("api_key", "acme")); u != 0 {
		t.Errorf("after the reset: %d used, want 0", u)
	}
}

// unlisted hides the store's KeyLister.
type unlisted struct{ sluice.Store }

// With a store that cannot list keys, a tenant reset answers 501 and usage
// counts the per-value rules as skipped; one key still resets.
func TestWithoutKeyLister(t *testing.T) {
	snap, err := rules.Parse("api.yaml", []byte(testRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ms := memory.New(memory.Options{Now: storetest.NewClock().Now}) // a window never rolls over mid-test
	t.Cleanup(func() { ms.Close() })
	eng, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, unlisted{ms}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := noStoreHandler(t, eng, snap)
	if code, body := serve(t, h, "POST", "/admin/v1/reset", rwToken, `{"tenant":"acme"}`, nil); code != 501 {
		t.Errorf("tenant reset: %d %s, want 501", code, body)
	}
	spend(t, eng, 2, key("api_key", "acme"))
	if code, body := serve(t, h, "POST", "/admin/v1/reset", rwToken, `{"domain":"api","descriptor":[{"key":"api_key","value":"acme"}]}`, nil); code != 200 {
		t.Errorf("one-key reset: %d %s, want 200", code, body)
	}
	if u := usedOf(t, eng, key("api_key", "acme")); u != 0 {
		t.Errorf("after the one-key reset: %d used, want 0", u)
	}
	var u UsageJSON
	if code, body := serve(t, h, "GET", "/admin/v1/usage/acme", roToken, "", &u); code != 200 || u.Skipped != 1 || len(u.Limits) != 2 {
		t.Errorf("usage: %d %s; want 2 limits, 1 skipped", code, body)
	}
}

func TestUsagePerValue(t *testing.T) {
	eng, snap := memEngine(t)
	h := noStoreHandler(t, eng, snap)
	spend(t, eng, 2, key("api_key", "acme"), key("endpoint", "GET /a"))
	spend(t, eng, 1, key("api_key", "acme"), key("endpoint", "GET /b"))
	spend(t, eng, 1, key("api_key", "beta"), key("endpoint", "GET /c"))
	var u UsageJSON
	if code, body := serve(t, h, "GET", "/admin/v1/usage/acme", roToken, "", &u); code != 200 {
		t.Fatalf("usage: %d %s", code, body)
	}
	got := map[string]string{}
	for _, l := range u.Limits {
		got[l.Rule+" "+l.Counter] = fmt.Sprintf("%d/%d", l.Used, l.Limit)
	}
	want := map[string]string{
		"api_key ": "0/100", "api_key.endpoint=POST /api/v1/orders ": "0/20",
		"api_key.endpoint endpoint:GET /a": "2/5", "api_key.endpoint endpoint:GET /b": "1/5",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || u.Skipped != 0 || len(u.Truncated) != 0 {
		t.Errorf("usage = %v, skipped %d, truncated %v; want %v", got, u.Skipped, u.Truncated, want)
	}

	for i := range MaxUsageCounters + 1 {
		spend(t, eng, 1, key("api_key", "many"), key("endpoint", fmt.Sprint("GET /", i)))
	}
	u = UsageJSON{}
	if code, body := serve(t, h, "GET", "/admin/v1/usage/many", roToken, "", &u); code != 200 {
		t.Fatalf("usage: %d %s", code, body)
	}
	perValue := 0
	for _, l := range u.Limits {
		if l.Counter != "" {
			perValue++
		}
	}
	if perValue != MaxUsageCounters || !slices.Equal(u.Truncated, []string{"api/api_key.endpoint"}) {
		t.Errorf("usage of %d values: %d listed, truncated %v; want %d, [api/api_key.endpoint]", MaxUsageCounters+1, perValue, u.Truncated, MaxUsageCounters)
	}
}

// TestOpenAPIDescribesEveryRoute: every endpoint is in openapi.yaml with
// its method, and the document describes no endpoint that is not served.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	if err := yaml.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("openapi.yaml: %v", err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m, node := range ops {
			if m == "parameters" {
				continue
			}
			var op struct {
				Security  []map[string][]string `yaml:"security"`
				Responses map[string]any        `yaml:"responses"`
			}
			if err := node.Decode(&op); err != nil {
				t.Fatalf("openapi.yaml %s %s: %v", m, path, err)
			}
			method := strings.ToUpper(m)
			pattern := method + " " + Prefix[:len(Prefix)-1] + path
			documented[pattern] = true
			if op.Security != nil && len(op.Security) == 0 {
				continue // the document itself: no token
			}
			// What admit answers: every guarded route 401 and 429; a
			// write 403 (cross-origin) and, with a body, 415, and takes
			// bearer tokens only.
			want := []string{"401", "429"}
			if !safeMethod(method) {
				want = append(want, "403")
				if len(op.Security) != 1 || op.Security[0]["bearer"] == nil || len(op.Security[0]) != 1 {
					t.Errorf("%s: security %v, want bearer only", pattern, op.Security)
				}
			}
			if method == "POST" || method == "PUT" {
				want = append(want, "415")
			}
			for _, code := range want {
				if op.Responses[code] == nil {
					t.Errorf("%s: openapi.yaml lacks the %s answer", pattern, code)
				}
			}
		}
	}
	served := map[string]bool{}
	for _, rt := range (&handler{}).routes() {
		served[rt.pattern] = true
		if !documented[rt.pattern] {
			t.Errorf("%s is served but not in openapi.yaml", rt.pattern)
		}
	}
	for op := range documented {
		if !served[op] {
			t.Errorf("openapi.yaml describes %s, which is not served", op)
		}
	}
	if len(served) == 0 {
		t.Fatal("no routes")
	}
}
