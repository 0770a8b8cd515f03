package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/tenant"
)

// TestAuditAPI reads back, from real PostgreSQL, the rows that writes
// through the API and the store left: filters, time range, pages.
func TestAuditAPI(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	put := func(name, body string) {
		t.Helper()
		if code, out := e.do(t, "PUT", "/admin/v1/quotas/"+name, rwToken, body, nil); code != 200 {
			t.Fatalf("PUT %s: %d %s", name, code, out)
		}
	}
	put("acme", `{"tier": "pro"}`)
	put("beta", `{"tier": "pro"}`)
	put("acme", `{"tier": "custom", "overrides": [{"domain": "api", "descriptor": "", "requests_per_unit": 7, "unit": "minute"}]}`)
	if _, err := e.store.Put(ctx, "bob", tenant.Record{Tenant: "acme", Tier: rules.TierEnterprise}); err != nil {
		t.Fatal(err)
	}
	if code, out := e.do(t, "PUT", "/admin/v1/switches", rwToken, `{"domain":"api","rule":"remote_address","state":"off"}`, nil); code != 200 {
		t.Fatalf("switch: %d %s", code, out)
	}
	if code, out := e.do(t, "DELETE", "/admin/v1/quotas/beta", rwToken, "", nil); code != 204 {
		t.Fatalf("DELETE: %d %s", code, out)
	}

	get := func(query string) AuditPageJSON {
		t.Helper()
		var p AuditPageJSON
		if code, out := e.do(t, "GET", "/admin/v1/audit?"+query, roToken, "", &p); code != 200 {
			t.Fatalf("GET audit?%s: %d %s", query, code, out)
		}
		return p
	}
	all := get("")
	type row struct{ actor, action, subject string }
	var got []row
	for _, r := range all.Entries {
		got = append(got, row{r.Actor, r.Action, r.Subject})
	}
	want := []row{ // newest first
		{"alice", "delete", "tenant:beta"},
		{"alice", "switch", "rule:api/remote_address"},
		{"bob", "put", "tenant:acme"},
		{"alice", "put", "tenant:acme"},
		{"alice", "put", "tenant:beta"},
		{"alice", "put", "tenant:acme"},
	}
	if !slices.Equal(got, want) || all.Next != "" {
		t.Fatalf("all rows = %v (next %q), want %v and no next page", got, all.Next, want)
	}
	if e := all.Entries[3]; !strings.Contains(string(e.After), `"requests_per_unit": 7`) || !strings.Contains(string(e.Before), `"tier": "pro"`) {
		t.Errorf("the override's row: before %s after %s; want pro before, the override after", e.Before, e.After)
	}
	if e := all.Entries[0]; string(e.After) != "null" {
		t.Errorf("a delete's after = %s, want null", e.After)
	}

	count := func(p AuditPageJSON, f func(AuditJSON) bool) (n int, all bool) {
		for _, r := range p.Entries {
			if f(r) {
				n++
			}
		}
		return n, n == len(p.Entries)
	}
	if p := get("tenant=acme"); len(p.Entries) != 3 {
		t.Errorf("tenant=acme: %d rows, want 3", len(p.Entries))
	} else if _, ok := count(p, func(r AuditJSON) bool { return r.Subject == "tenant:acme" }); !ok {
		t.Errorf("tenant=acme answered rows of other subjects: %+v", p.Entries)
	}
	if p := get("actor=bob"); len(p.Entries) != 1 || p.Entries[0].Actor != "bob" {
		t.Errorf("actor=bob: %+v, want bob's one row", p.Entries)
	}
	if p := get("actor=bob&tenant=beta"); len(p.Entries) != 0 {
		t.Errorf("actor=bob&tenant=beta: %+v, want none", p.Entries)
	}
	// A time range: the rows from the second oldest up to, not including,
	// the second newest, computed from the times the database gave them.
	since, until := all.Entries[4].At, all.Entries[1].At
	var inRange []int64
	for _, r := range all.Entries {
		if !r.At.Before(since) && r.At.Before(until) {
			inRange = append(inRange, r.ID)
		}
	}
	p := get("since=" + url.QueryEscape(since.Format(time.RFC3339Nano)) + "&until=" + url.QueryEscape(until.Format(time.RFC3339Nano)))
	var ids []int64
	for _, r := range p.Entries {
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, inRange) || len(ids) < 3 {
		t.Errorf("since %v until %v: IDs %v, want %v (at least 3)", since, until, ids, inRange)
	}

	// Pages of 4, 4... walk the whole log once, newest first.
	var walked []int64
	pages := 0
	for cursor := ""; ; pages++ {
		if pages > len(all.Entries) {
			t.Fatal("paging does not end")
		}
		p := get("limit=4&cursor=" + cursor)
		if len(p.Entries) > 4 {
			t.Fatalf("page of %d rows with limit=4", len(p.Entries))
		}
		for _, r := range p.Entries {
			walked = append(walked, r.ID)
		}
		if p.Next == "" {
			break
		}
		cursor = p.Next
	}
	var allIDs []int64
	for _, r := range all.Entries {
		allIDs = append(allIDs, r.ID)
	}
	if !slices.Equal(walked, allIDs) || pages != 1 {
		t.Errorf("paged walk: IDs %v in %d pages after the first, want %v in 1", walked, pages, allIDs)
	}

	t.Run("bad parameters name the field", func(t *testing.T) {
		for _, tc := range []struct{ query, field string }{
			{"limit=0", "limit"},
			{fmt.Sprintf("limit=%d", tenant.MaxAuditPage+1), "limit"},
			{"limit=x", "limit"},
			{"since=yesterday", "since"},
			{"until=2026-13-01T00:00:00Z", "until"},
			{"since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "until"},
			{"cursor=abc", "cursor"},
			{"cursor=-5", "cursor"},
			{"tenant=a%01b", "tenant"},
			{"actor=" + strings.Repeat("a", 300), "actor"},
		} {
			code, body := e.do(t, "GET", "/admin/v1/audit?"+tc.query, roToken, "", nil)
			var p struct{ Errors []struct{ Field string } }
			_ = json.Unmarshal([]byte(body), &p)
			named := slices.ContainsFunc(p.Errors, func(f struct{ Field string }) bool { return f.Field == tc.field })
			if code != 400 || !named {
				t.Errorf("audit?%s: %d %s; want 400 naming %s", tc.query, code, body, tc.field)
			}
		}
	})
	t.Run("tokens", func(t *testing.T) {
		if code, _ := e.do(t, "GET", "/admin/v1/audit", "", "", nil); code != 401 {
			t.Errorf("no token: %d, want 401", code)
		}
	})
}
