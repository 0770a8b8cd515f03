package notify

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/tenant/pg"
)

// A fired level is an audit row in PostgreSQL (actor sluice, action
// notify, subject rule:<domain>/<rule>, the firing as its after), and the
// fleet's firings are read back from there, newest first, in pages.
func TestAuditLogPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	st, err := pg.Open(pg.Options{URL: srv.NewDatabase(t), ConnectTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ctx := context.Background()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	m := memory.New(memory.Options{})
	t.Cleanup(func() { m.Close() })
	n, err := New(Options{Claimer: m, Log: AuditLog{st}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	at := time.Date(2026, 11, 28, 15, 0, 0, 0, time.UTC)
	for i, level := range []int{50, 80, 100} {
		n.Crossed(service.Crossing{Domain: "llm", Rule: "team", Key: "team=ml", Level: level, Limit: 1000, Used: int64(level * 10),
			At: at.Add(time.Duration(i) * time.Minute), PeriodEnd: at.Add(time.Hour), Claim: fmt.Sprint("{llm|team=ml}|n", level)})
	}
	waitFor(t, "three firings", func() bool { return n.Stats().Fired[Level{"llm", "team", 100}] == 1 })
	if s := n.Stats(); s.LogErrors != 0 {
		t.Fatalf("log errors: %+v", s)
	}
	rows, more, err := st.AuditAction(ctx, AuditAction, 0, 10)
	if err != nil || more || len(rows) != 3 {
		t.Fatalf("AuditAction = %d rows, more %v, %v; want 3", len(rows), more, err)
	}
	if r := rows[0]; r.Actor != "sluice" || r.Action != "notify" || r.Subject != "rule:llm/team" || r.Before != nil {
		t.Errorf("row %+v", r)
	}
	// Other audit rows are not notifications.
	if err := st.Audit(ctx, "alice", "reset", "tenant:acme", map[string]any{"keys": []string{}}); err != nil {
		t.Fatal(err)
	}
	page, next, err := n.Page(ctx, "", 2)
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("Page(2) = %v, %q, %v", page, next, err)
	}
	if page[0].Level != 100 || page[1].Level != 80 || page[0].Used != 1000 || !page[0].PeriodEnd.Equal(at.Add(time.Hour)) || page[0].Key != "team=ml" {
		t.Errorf("first page %+v", page)
	}
	rest, next2, err := n.Page(ctx, next, 2)
	if err != nil || len(rest) != 1 || rest[0].Level != 50 || next2 != "" {
		t.Errorf("second page = %+v, %q, %v; want level 50 alone", rest, next2, err)
	}
	if _, _, err := n.Page(ctx, "x", 2); err == nil {
		t.Error("a bad cursor: no error")
	}
}
