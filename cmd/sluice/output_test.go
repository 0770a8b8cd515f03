package main

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/server/admin"
)

// adminAnswers serves fixed admin API answers by method and path (with the
// query), checking the bearer token, and records what was asked.
func adminAnswers(t *testing.T, answers map[string]string) (*httptest.Server, *[]string) {
	t.Helper()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		key := r.Method + " " + r.URL.RequestURI()
		asked = append(asked, key)
		a, ok := answers[key]
		if !ok {
			http.Error(w, "not in the test's answers: "+key, http.StatusNotFound)
			return
		}
		if a == "" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, a)
	}))
	t.Cleanup(srv.Close)
	return srv, &asked
}

const (
	quotaAnswer = `{"tenant":"acme","tier":"enterprise","overrides":[{"domain":"api","descriptor":"endpoint:POST /api/v1/orders","requests_per_unit":500,"unit":"minute"}],` +
		`"effective_at":"2026-11-01T00:00:00Z","expires_at":null,"created_at":"2026-11-01T00:00:00Z","updated_at":"2026-11-02T00:00:00Z",` +
		`"quotas":[{"domain":"api","rule":"orders","descriptor":"endpoint:POST /api/v1/orders","source":"override","requests_per_unit":500,"unit":"minute","window":"1m0s","algorithm":"token_bucket"}]}`
	quotaListAnswer = `{"tenants":[{"tenant":"acme","tier":"enterprise","overrides":[],"effective_at":"2026-11-01T00:00:00Z","expires_at":"2027-01-01T00:00:00Z",` +
		`"created_at":"2026-11-01T00:00:00Z","updated_at":"2026-11-01T00:00:00Z"}],"next":"acme"}`
	topAnswer = `{"window":"5m0s","instances":["a"],"rules":[{"domain":"api","rule":"orders","checks":120,"denials":7,` +
		`"error_bound":{"checks":1,"denials":0},"top_denied":[{"key":"tenant=acme","checks":60,"denials":7}]}]}`
	usageAnswer = `{"tenant":"acme","limits":[{"domain":"api","rule":"orders","descriptor":"tenant=acme","requests_per_unit":500,"unit":"minute",` +
		`"window":"1m0s","limit":500,"used":12,"remaining":488,"reset":"2026-11-01T00:01:00Z"}]}`
)

// TestOperatorOutput: quota get/set/list, top and usage print the admin
// API's answer byte for byte with --output json, and a table holding its
// values (and no JSON) with --output table, the default; a bad --output is
// a usage error naming the flag, before anything is sent.
func TestOperatorOutput(t *testing.T) {
	srv, asked := adminAnswers(t, map[string]string{
		"GET /admin/v1/quotas/acme":                      quotaAnswer,
		"PUT /admin/v1/quotas/acme":                      quotaAnswer,
		"GET /admin/v1/quotas?limit=100&tier=enterprise": quotaListAnswer,
		"GET /admin/v1/top?n=10&window=5m0s":             topAnswer,
		"GET /admin/v1/usage/acme":                       usageAnswer,
		"DELETE /admin/v1/quotas/acme":                   "",
	})
	tests := []struct {
		name   string
		args   []string
		answer string
		table  []string // cells the table shows
	}{
		{"quota get", []string{"quota", "get", "acme"}, quotaAnswer,
			[]string{"tenant acme: tier enterprise", "expires never", "endpoint:POST /api/v1/orders", "500/minute", "override"}},
		{"quota set", []string{"quota", "set", "acme", "--tier", "enterprise", "--domain", "api", "--override", "endpoint:POST /api/v1/orders=500/minute"}, quotaAnswer,
			[]string{"tenant acme: tier enterprise", "500/minute"}},
		{"quota list", []string{"quota", "list", "--tier", "enterprise"}, quotaListAnswer,
			[]string{"TENANT", "acme", "enterprise", "2027-01-01T00:00:00Z", "more: run again with --after acme"}},
		{"top", []string{"top"}, topAnswer,
			[]string{"api/orders: 120 checks, 7 denied", "tenant=acme"}},
		{"usage", []string{"usage", "acme"}, usageAnswer,
			[]string{"tenant acme", "500/minute", "488"}},
	}
	getenv := func(k string) string {
		return map[string]string{envAdminToken: "tok", "SLUICE_ADMIN_URL": srv.URL}[k]
	}
	// quota rm takes no --output and prints one line.
	var rm bytes.Buffer
	if err := run(context.Background(), []string{"quota", "rm", "acme"}, getenv, &rm, io.Discard); err != nil || rm.String() != "removed acme\n" {
		t.Errorf("sluice quota rm acme: %v, printed %q; want nil and %q", err, rm.String(), "removed acme\n")
	}
	for _, tc := range tests {
		for _, output := range []string{"json", "table", ""} {
			t.Run(tc.name+" "+output, func(t *testing.T) {
				args := append([]string{}, tc.args...)
				if output != "" {
					args = append(args, "--output", output)
				}
				var stdout, stderr bytes.Buffer
				if err := run(context.Background(), args, getenv, &stdout, &stderr); err != nil {
					t.Fatalf("sluice %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
				}
				got := stdout.String()
				if output == "json" {
					if got != tc.answer {
						t.Errorf("got %q, want the server's answer %q", got, tc.answer)
					}
					return
				}
				t.Logf("sluice %s:\n%s", strings.Join(args, " "), got)
				if strings.Contains(got, "{") {
					t.Errorf("table output holds JSON:\n%s", got)
				}
				for _, cell := range tc.table {
					if !strings.Contains(got, cell) {
						t.Errorf("table lacks %q:\n%s", cell, got)
					}
				}
			})
		}
		t.Run(tc.name+" bad output", func(t *testing.T) {
			before := len(*asked)
			args := append(append([]string{}, tc.args...), "--output", "yaml")
			err := run(context.Background(), args, getenv, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), "--output") {
				t.Errorf("--output yaml: got %v, want a usage error naming --output", err)
			}
			if len(*asked) != before {
				t.Errorf("--output yaml sent %v, want nothing sent", (*asked)[before:])
			}
		})
	}
}

// TestTableHeadersUpperCase: every table the commands print has an
// upper-case header, as kubectl's and gh's do. It reads the package's
// sources: each constant line written with tabs (a tabwriter's header row)
// must be upper case; then prints top's and usage's tables, the two that
// were lower case, and looks at their header rows.
func TestTableHeadersUpperCase(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	headers := 0
	for _, path := range pkgs {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Fprintln" && sel.Sel.Name != "Fprint") {
				return true
			}
			lit, ok := call.Args[1].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if err != nil || !strings.Contains(s, "\t") {
				return true
			}
			headers++
			if s != strings.ToUpper(s) {
				t.Errorf("%s: table header %q is not upper case, want %q", fset.Position(lit.Pos()), s, strings.ToUpper(s))
			}
			return true
		})
	}
	if headers < 9 {
		t.Errorf("found %d table headers in the sources, want at least 9 (audit, deny, diff, quota ×3, switch, top, usage): has the way tables are printed changed?", headers)
	}

	var top, usage bytes.Buffer
	if err := printAnswer(&top, "top", "table", []byte(topAnswer), printTop); err != nil {
		t.Fatal(err)
	}
	if err := printAnswer(&usage, "usage", "table", []byte(usageAnswer), func(w io.Writer, u admin.UsageJSON) error { return printUsage(w, u, time.Now()) }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, out, header string }{
		{"top", top.String(), `(?m)^\s+DENIED\s+CHECKED\s+KEY$`},
		{"usage", usage.String(), `(?m)^DOMAIN\s+RULE\s+DESCRIPTOR\s+LIMIT\s+USED\s+REMAINING\s+RESET IN\s*$`},
	} {
		if !regexp.MustCompile(tc.header).MatchString(tc.out) {
			t.Errorf("sluice %s printed:\n%s\nwant the header row %q", tc.name, tc.out, tc.header)
		}
	}
}
