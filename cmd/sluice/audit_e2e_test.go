package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/pgtest"
	"github.com/sluice-rl/sluice/server/admin"
)

// TestAuditCommand: sluice audit reads, through a server on real
// PostgreSQL, the rows the quota commands left, filtered and paged, as a
// table or JSON.
func TestAuditCommand(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	pgs := pgtest.Start(t)
	url := pgs.NewDatabase(t)
	if out, err := sluiceCmd(t, map[string]string{"SLUICE_POSTGRES_URL": url}, "migrate"); err != nil {
		t.Fatalf("sluice migrate: %v\n%s", err, out)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "api.yaml"), []byte(tenantRuleFile), 0o644); err != nil {
		t.Fatal(err)
	}
	tokFile := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokFile, []byte("ops rw "+e2eRW+"\nsupport rw rw-support-token-0123456789\nviewer ro "+e2eRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, dir, func(c *serveConfig) {
		c.Tenants.PostgresURL, c.Tenants.AdminTokenFile = url, tokFile
	})
	ops := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRW, "SLUICE_ADMIN_URL": s.base}
	support := map[string]string{"SLUICE_ADMIN_TOKEN": "rw-support-token-0123456789", "SLUICE_ADMIN_URL": s.base}
	viewer := map[string]string{"SLUICE_ADMIN_TOKEN": e2eRO, "SLUICE_ADMIN_URL": s.base}
	for _, c := range []struct {
		envs map[string]string
		args []string
	}{
		{ops, []string{"quota", "set", "acme", "--tier", "pro"}},
		{ops, []string{"quota", "set", "beta", "--tier", "pro"}},
		{support, []string{"quota", "set", "acme", "--tier", "enterprise", "--domain", "api", "--override", "endpoint:POST /api/v1/orders=500/minute"}},
		{support, []string{"quota", "rm", "beta"}},
	} {
		if out, err := sluiceCmd(t, c.envs, c.args...); err != nil {
			t.Fatalf("sluice %v: %v\n%s", c.args, err, out)
		}
	}

	out, err := sluiceCmd(t, viewer, "audit", "--tenant", "acme", "--output", "json")
	if err != nil {
		t.Fatalf("sluice audit --tenant acme: %v\n%s", err, out)
	}
	var page admin.AuditPageJSON
	if err := json.Unmarshal([]byte(out), &page); err != nil {
		t.Fatalf("--output json: %v\n%s", err, out)
	}
	if len(page.Entries) != 2 || page.Entries[0].Actor != "support" || page.Entries[1].Actor != "ops" {
		t.Errorf("acme's rows: %+v; want support's then ops's (newest first)", page.Entries)
	}

	out, err = sluiceCmd(t, viewer, "audit", "--actor", "support", "--since", "1h")
	if err != nil {
		t.Fatalf("sluice audit --actor support: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "ID") ||
		!strings.Contains(lines[1], "delete") || !strings.Contains(lines[1], "tenant:beta") || !strings.Contains(lines[1], "removed: pro, 0 override(s)") ||
		!strings.Contains(lines[2], "tenant:acme") || !strings.Contains(lines[2], "pro, 0 override(s) -> enterprise, 1 override(s)") {
		t.Errorf("table of support's rows:\n%s", out)
	}
	if out, err := sluiceCmd(t, viewer, "audit", "--until", "1h"); err != nil || strings.TrimSpace(out) != "no audit rows" {
		t.Errorf("--until 1h (before every row): %v\n%s", err, out)
	}

	out, err = sluiceCmd(t, viewer, "audit", "--limit", "3")
	if err != nil || !strings.Contains(out, "more: run again with --cursor ") {
		t.Fatalf("--limit 3 of 4 rows: %v\n%s", err, out)
	}
	cursor := strings.TrimSpace(out[strings.LastIndex(out, "--cursor ")+len("--cursor "):])
	out, err = sluiceCmd(t, viewer, "audit", "--limit", "3", "--cursor", cursor)
	if err != nil || strings.Count(strings.TrimSpace(out), "\n") != 1 || strings.Contains(out, "more:") {
		t.Errorf("the second page: %v\n%s; want one row, no more", err, out)
	}

	var help bytes.Buffer
	if err := runAudit(context.Background(), []string{"--help"}, func(string) string { return "" }, &help, &help); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"-admin-url", "-token-file", "-timeout", "-tenant", "-actor", "-since", "-until", "-limit", "-output"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help does not show %s:\n%s", f, help.String())
		}
	}
	for _, args := range [][]string{{"--output", "yaml"}, {"--limit", "0"}, {"--since", "yesterday"}} {
		err := runAudit(context.Background(), args, func(string) string { return "" }, &help, &help)
		if !errors.Is(err, errUsage) {
			t.Errorf("sluice audit %v: %v, want a usage error", args, err)
		}
	}
}
