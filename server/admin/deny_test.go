package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
	"github.com/sluice-rl/sluice/tenant"
	"github.com/sluice-rl/sluice/tenant/pg"
)

// secondInstance is another engine over the same PostgreSQL database as
// e: its own Store, Registry (listening) and in-process counters.
func secondInstance(t *testing.T, e *env) *service.Engine {
	t.Helper()
	st, err := pg.Open(pg.Options{URL: e.url, ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	reg := tenant.NewRegistry(st, tenant.Options{RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = reg.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	<-reg.Synced()
	ms := memory.New(memory.Options{Now: storetest.NewClock().Now})
	t.Cleanup(func() { ms.Close() })
	cfg := service.DefaultConfig()
	cfg.Overrides = reg
	eng, err := service.New(cfg, service.StaticRules{Snapshot: e.snap}, ms, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// countDenied checks each address of remote_address against eng (zero
// hits) and counts the answers: denied with reason deny_list, and OK.
func countDenied(t *testing.T, eng *service.Engine, addrs []string) (denied, ok int) {
	t.Helper()
	zero := uint64(0)
	for _, a := range addrs {
		resp, err := eng.Check(context.Background(), service.Request{Domain: "api",
			Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: a}}, Hits: &zero}}})
		if err != nil {
			t.Fatal(err)
		}
		switch st := resp.Statuses[0]; {
		case st.Code == service.CodeOverLimit && st.Result.Reason == service.ReasonDenyList:
			denied++
		case st.Code == service.CodeOK:
			ok++
		}
	}
	return denied, ok
}

// waitCounts polls until eng answers addrs with want denied (the rest
// OK), with a generous deadline.
func waitCounts(t *testing.T, eng *service.Engine, addrs []string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, ok := countDenied(t, eng, addrs)
		if d == want && ok == len(addrs)-want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("got %d denied and %d OK of %d, want %d denied and the rest OK", d, ok, len(addrs), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDenyAcrossInstances(t *testing.T) {
	a := newEnv(t)
	b := secondInstance(t, a)
	var addrs []string
	for i := range 20 {
		addrs = append(addrs, fmt.Sprintf("10.1.%d.%d", i, i+1), fmt.Sprintf("10.2.%d.%d", i, i+1))
	}
	addrs = append(addrs, "::ffff:10.1.9.9") // IPv4-mapped: in 10.1.0.0/16
	waitCounts(t, b, addrs, 0)

	entry := `{"domain":"api","key":"remote_address","cidr":"10.1.7.7/16","reason":"abuse"}`
	if code, body := a.do(t, "PUT", "/admin/v1/deny", roToken, entry, nil); code != 403 {
		t.Fatalf("PUT with a read-only token: got %d %s, want 403", code, body)
	}
	var got DenyJSON
	if code, body := a.do(t, "PUT", "/admin/v1/deny", rwToken, entry, &got); code != 200 {
		t.Fatalf("PUT: got %d %s, want 200", code, body)
	}
	if got.CIDR != "10.1.0.0/16" || got.Actor != "alice" || got.Reason != "abuse" {
		t.Fatalf("PUT answered %+v, want cidr 10.1.0.0/16 (masked), actor alice, reason abuse", got)
	}
	// Instance b, which only shares the database, enforces it: 21 denied.
	waitCounts(t, b, addrs, 21)
	waitCounts(t, a.eng, addrs, 21)

	// An exact value, and a key with any value.
	for _, body := range []string{`{"domain":"api","key":"remote_address","value":"192.0.2.1"}`, `{"domain":"api","key":"api_key"}`} {
		if code, out := a.do(t, "PUT", "/admin/v1/deny", rwToken, body, nil); code != 200 {
			t.Fatalf("PUT %s: got %d %s, want 200", body, code, out)
		}
	}
	waitCounts(t, b, append(addrs, "192.0.2.1", "192.0.2.2"), 22)
	zero := uint64(0)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := b.Check(context.Background(), service.Request{Domain: "api", Descriptors: []service.Descriptor{
			{Entries: []rules.Entry{{Key: "api_key", Value: "anyone"}}, Hits: &zero},
			{Entries: []rules.Entry{{Key: "remote_address", Value: "10.9.9.9"}}, Hits: &zero}}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Statuses[0].Result.Reason == service.ReasonDenyList && resp.Statuses[1].Code == service.CodeOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("api_key=anyone: got %+v, want deny_list for the first descriptor only", resp.Statuses)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The list, read-only, in pages of 2.
	var page DenyListJSON
	if code, body := a.do(t, "GET", "/admin/v1/deny?limit=2", roToken, "", &page); code != 200 || len(page.Deny) != 2 || page.Next == "" {
		t.Fatalf("GET limit=2: got %d %s, want 200 with 2 entries and a next", code, body)
	}
	var rest DenyListJSON
	if code, body := a.do(t, "GET", "/admin/v1/deny?limit=2&cursor="+url.QueryEscape(page.Next), roToken, "", &rest); code != 200 || len(rest.Deny) != 1 {
		t.Fatalf("GET the second page: got %d %s, want 200 with 1 entry", code, body)
	}
	if code, _ := a.do(t, "GET", "/admin/v1/deny?cursor=nonsense!", roToken, "", nil); code != 400 {
		t.Fatalf("GET with a bad cursor: got %d, want 400", code)
	}

	// Removal restores admission everywhere.
	rm := `{"domain":"api","key":"remote_address","cidr":"10.1.0.0/16"}`
	if code, body := a.do(t, "DELETE", "/admin/v1/deny", rwToken, rm, nil); code != 204 {
		t.Fatalf("DELETE: got %d %s, want 204", code, body)
	}
	waitCounts(t, b, addrs, 0)
	if code, _ := a.do(t, "DELETE", "/admin/v1/deny", rwToken, rm, nil); code != 404 {
		t.Fatalf("DELETE again: got %d, want 404", code)
	}

	// Audited: the add and the removal, by alice.
	log, err := a.store.AuditLog(context.Background(), "deny:api/remote_address=10.1.0.0/16", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].Action != "deny" || log[1].Action != "undeny" || log[0].Actor != "alice" || log[1].Actor != "alice" {
		t.Fatalf("audit rows: got %+v, want deny then undeny by alice", log)
	}
	var after map[string]string
	if err := json.Unmarshal(log[0].After, &after); err != nil || after["reason"] != "abuse" || log[1].After != nil {
		t.Fatalf("audit rows' states: got after %s / %s, want the entry with its reason, then none", log[0].After, log[1].After)
	}
}

func TestDenyBadBodies(t *testing.T) {
	e := newEnv(t)
	long := strings.Repeat("x", 5000)
	for _, c := range []struct{ body, field string }{
		{`{"domain":"api"}`, "key"},
		{`{"key":"k"}`, "domain"},
		{`{"domain":"nope","key":"k"}`, "domain"},
		{`{"domain":"api","key":"k","cidr":"10.0.0.0/33"}`, "cidr"},
		{`{"domain":"api","key":"k","cidr":"10.0.0.0/8","value":"v"}`, "cidr"},
		{`{"domain":"api","key":"k","value":"` + long + `"}`, "value"},
		{`{"domain":"api","key":"` + long[:300] + `"}`, "key"},
		{`{"domain":"api","key":"k","reason":"` + long[:600] + `"}`, "reason"},
		{`{"domain":"api","key":"k","colour":"red"}`, "colour"},
		{`{"domain":"api","key":7}`, "key"},
		{`{"domain":"api","key":"k","actor":"mallory"}`, "actor"},
	} {
		for _, method := range []string{"PUT", "DELETE"} {
			code, body := e.do(t, method, "/admin/v1/deny", rwToken, c.body, nil)
			if code != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) {
				t.Errorf("%s %.80s: got %d %s, want 400 naming field %s", method, c.body, code, body, c.field)
			}
		}
	}
	var page DenyListJSON
	if code, body := e.do(t, "GET", "/admin/v1/deny", roToken, "", &page); code != 200 || len(page.Deny) != 0 {
		t.Fatalf("GET after bad bodies: got %d %s, want 200 and no entry", code, body)
	}
}

func TestDenyBound(t *testing.T) {
	e := newEnv(t)
	conn, err := pgx.Connect(context.Background(), e.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO sluice_deny (domain, key, value, actor)
		SELECT 'api', 'user', 'u' || i, 'test' FROM generate_series(1, $1) AS i`, tenant.MaxDenyEntries); err != nil {
		t.Fatal(err)
	}
	if code, body := e.do(t, "PUT", "/admin/v1/deny", rwToken, `{"domain":"api","key":"user","value":"one-more"}`, nil); code != 409 {
		t.Fatalf("PUT at the bound: got %d %s, want 409", code, body)
	}
	// Replacing the reason of a kept entry adds none: allowed at the bound.
	if code, body := e.do(t, "PUT", "/admin/v1/deny", rwToken, `{"domain":"api","key":"user","value":"u7","reason":"r"}`, nil); code != 200 {
		t.Fatalf("PUT of a kept entry at the bound: got %d %s, want 200", code, body)
	}
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM sluice_deny").Scan(&n); err != nil || n != tenant.MaxDenyEntries {
		t.Fatalf("entries kept: got %d (%v), want %d", n, err, tenant.MaxDenyEntries)
	}
}
