package main

// The documented commands, run as written: every `curl` and `sluice` line in
// a code block of README.md, docs/*.md and examples/*/README.md is run by a
// scenario below against a server the scenario starts (from the documented
// `sluice serve` line where there is one), or is marked not runnable in the
// Markdown with `<!-- not run: reason -->` before its block.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/pgtest"
)

// docCommand is one command found in a code block.
type docCommand struct {
	file   string
	line   int
	text   string // continuation lines joined, "$ " and "go run ./cmd/sluice" → "sluice"
	marked string // the reason, when the block is marked not run
	ran    bool
}

func (c *docCommand) String() string { return fmt.Sprintf("%s:%d: %s", c.file, c.line, c.text) }

var notRunMarker = regexp.MustCompile(`<!--\s*not run:\s*(.+?)\s*-->`)

// docCommands extracts the commands of the Markdown file f (relative to the
// repository root): lines of fenced shell blocks and of indented code blocks
// whose command is curl or sluice (also in a shell loop).
func docCommands(t *testing.T, f string) []*docCommand {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, f))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var (
		out     []*docCommand
		fenced  bool
		shell   bool   // the fenced block is a shell block
		pending string // a marker waiting for its block
		marked  string // the current block's marker
		inCode  bool   // inside an indented block
		prev    = ""
	)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if m := notRunMarker.FindStringSubmatch(l); m != nil {
			pending, inCode = m[1], false
			prev = l
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if !fenced {
				lang := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "```"))
				shell = lang == "" || lang == "sh" || lang == "bash" || lang == "console" || lang == "shell"
				marked, pending = pending, ""
			}
			fenced = !fenced
			prev = l
			continue
		}
		code := false
		switch {
		case fenced:
			code = shell
		case strings.HasPrefix(l, "    ") && (inCode || strings.TrimSpace(prev) == "" || notRunMarker.MatchString(prev)):
			if !inCode {
				marked, pending = pending, ""
			}
			code, inCode = true, true
		case strings.TrimSpace(l) == "" && inCode:
			code = true // a blank line inside an indented block
		default:
			inCode = false
		}
		prev = l
		if !code {
			continue
		}
		s := strings.TrimSpace(l)
		s = strings.TrimPrefix(s, "$ ")
		if strings.HasPrefix(s, "go run ./cmd/sluice ") {
			s = "sluice " + strings.TrimPrefix(s, "go run ./cmd/sluice ")
		}
		isCmd := strings.HasPrefix(s, "curl ") || strings.HasPrefix(s, "sluice ") ||
			(strings.HasPrefix(s, "for ") && strings.Contains(s, "curl "))
		if !isCmd {
			continue
		}
		start := i
		for (strings.HasSuffix(s, `\`) || strings.Count(s, "'")%2 == 1) && i+1 < len(lines) {
			i++
			s = strings.TrimSuffix(s, `\`) + " " + strings.TrimSpace(lines[i])
		}
		prev = lines[i]
		out = append(out, &docCommand{file: f, line: start + 1, text: s, marked: marked})
	}
	return out
}

// shellWords splits a command line as sh would for the commands documented:
// quotes, $VAR and ${VAR} from env, and a # comment ending the line.
func shellWords(s string, env map[string]string) ([]string, string, error) {
	var (
		words   []string
		cur     strings.Builder
		inWord  bool
		comment string
	)
	expand := func(s string, i int) (string, int) { // s[i] == '$'
		j := i + 1
		if j < len(s) && s[j] == '{' {
			k := strings.IndexByte(s[j:], '}')
			if k < 0 {
				return "$", i + 1
			}
			return env[s[j+1:j+k]], j + k + 1
		}
		for j < len(s) && (s[j] == '_' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= '0' && s[j] <= '9') {
			j++
		}
		if j == i+1 {
			return "$", j
		}
		return env[s[i+1:j]], j
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'':
			k := strings.IndexByte(s[i+1:], '\'')
			if k < 0 {
				return nil, "", fmt.Errorf("unbalanced ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+k])
			inWord, i = true, i+k+2
		case c == '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '$' {
					v, j := expand(s, i)
					cur.WriteString(v)
					i = j
					continue
				}
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
				i++
			}
			if i >= len(s) {
				return nil, "", fmt.Errorf(`unbalanced " in %q`, s)
			}
			inWord, i = true, i+1
		case c == '$':
			v, j := expand(s, i)
			cur.WriteString(v)
			inWord, i = true, j
		case c == ' ' || c == '\t':
			if inWord {
				words, inWord = append(words, cur.String()), false
				cur.Reset()
			}
			i++
		case c == '#' && !inWord:
			comment = strings.TrimSpace(s[i+1:])
			i = len(s)
		default:
			cur.WriteByte(c)
			inWord, i = true, i+1
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, comment, nil
}

// wantStatus is the status a documented curl line expects: "→ NNN" in its
// comment, else any 2xx.
var wantStatusRe = regexp.MustCompile(`→\s*(\d{3})`)

// runCurl runs a documented curl command with Go's HTTP client as curl would
// send it (-d without a Content-Type is form-encoded: curl's default), with
// the documented host:port replaced by base.
func runCurl(t *testing.T, c *docCommand, env map[string]string, base string) {
	t.Helper()
	words, comment, err := shellWords(c.text, env)
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	method, url, body := "", "", ""
	hasBody := false
	hdr := http.Header{}
	for i := 1; i < len(words); i++ {
		w := words[i]
		arg := func() string {
			i++
			if i >= len(words) {
				t.Fatalf("%v: %s wants an argument", c, w)
			}
			return words[i]
		}
		switch w {
		case "-s", "-i", "-S", "-f", "-sS", "-v":
		case "-X":
			method = arg()
		case "-H":
			k, v, _ := strings.Cut(arg(), ":")
			hdr.Add(k, strings.TrimSpace(v))
		case "-d", "--data":
			body, hasBody = arg(), true
		case "-o", "-w":
			arg()
		default:
			if strings.HasPrefix(w, "-") {
				t.Fatalf("%v: curl flag %s is not understood by this test", c, w)
			}
			url = w
		}
	}
	if method == "" {
		method = http.MethodGet
		if hasBody {
			method = http.MethodPost
		}
	}
	if hasBody && hdr.Get("Content-Type") == "" {
		hdr.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	url = strings.TrimPrefix(strings.TrimPrefix(url, "http://"), "https://")
	_, path, _ := strings.Cut(url, "/")
	req, err := http.NewRequest(method, base+"/"+path, strings.NewReader(body))
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	req.Header = hdr
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%v: %v", c, err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if m := wantStatusRe.FindStringSubmatch(comment); m != nil {
		if fmt.Sprint(resp.StatusCode) != m[1] {
			t.Errorf("%v: status %d, want %s: %s", c, resp.StatusCode, m[1], got)
		}
	} else if resp.StatusCode/100 != 2 {
		t.Errorf("%v: status %d, want 2xx: %s", c, resp.StatusCode, got)
	}
	c.ran = true
}

// docServer is a `sluice serve` started from a documented command line.
type docServer struct {
	base, grpc string
	stop       func()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startDocServe runs the documented `sluice serve …` line in process, its
// listeners moved to free ports through the environment (the documented
// flags win over it), and waits until it is ready.
func startDocServe(t *testing.T, c *docCommand, env map[string]string) *docServer {
	t.Helper()
	words, _, err := shellWords(c.text, env)
	if err != nil {
		t.Fatal(err)
	}
	httpAddr, grpcAddr := freeAddr(t), freeAddr(t)
	senv := map[string]string{"SLUICE_HTTP_ADDR": httpAddr, "SLUICE_GRPC_ADDR": grpcAddr, "SLUICE_DEBUG_ADDR": "off",
		"SLUICE_TENANT_SNAPSHOT": filepath.Join(t.TempDir(), "tenants.snapshot")}
	for k, v := range env {
		senv[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var logs syncBuffer
	go func() { done <- run(ctx, words[1:], func(k string) string { return senv[k] }, &logs, &logs) }()
	ds := &docServer{base: "http://" + httpAddr, grpc: grpcAddr}
	ds.stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%v: returned %v", c, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%v: did not stop within 30s", c)
		}
	}
	t.Cleanup(func() {
		ds.stop()
		if t.Failed() {
			t.Logf("%v: log:\n%s", c, logs.String())
		}
	})
	waitUntil(t, c.String()+" ready", time.Minute, func() bool {
		select {
		case err := <-done:
			t.Fatalf("%v: returned %v before it was ready:\n%s", c, err, logs.String())
		default:
		}
		resp, err := http.Get(ds.base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	c.ran = true
	return ds
}

// runSluice runs a documented sluice command (not serve) in process.
func runSluice(t *testing.T, c *docCommand, env map[string]string) string {
	t.Helper()
	words, comment, err := shellWords(c.text, env)
	if err != nil {
		t.Fatal(err)
	}
	if len(words) > 1 && words[1] == "serve" {
		t.Errorf("%v: a second sluice serve in one guide must be marked <!-- not run: reason -->", c)
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	err = run(ctx, words[1:], func(k string) string { return env[k] }, &out, &out)
	if err != nil && !strings.Contains(comment, "→ error") {
		t.Errorf("%v: %v\n%s", c, err, out.String())
	}
	c.ran = true
	return out.String()
}

// docScenarios run the commands of one file; a file without one must mark
// every command it has.
var docScenarios = map[string]func(t *testing.T, cmds []*docCommand){
	"README.md":       quickStartScenario,
	"docs/service.md": quickStartScenario,
	"docs/rules.md":   quickStartScenario,
	"docs/tenants.md": tenantsScenario,
}

// quickStartScenario: the documented `sluice serve` (memory store,
// examples/rules), then every other command of the file against it.
func quickStartScenario(t *testing.T, cmds []*docCommand) {
	t.Chdir(repoRoot)
	env := map[string]string{}
	var srv *docServer
	for _, c := range cmds {
		if c.marked == "" && strings.HasPrefix(c.text, "sluice serve") && srv == nil {
			srv = startDocServe(t, c, env)
			env["SLUICE_CHECK_ADDR"] = srv.grpc
		}
	}
	if srv == nil {
		srv = startDocServe(t, &docCommand{file: "(test)", text: "sluice serve"}, env)
		env["SLUICE_CHECK_ADDR"] = srv.grpc
	}
	for _, c := range cmds {
		switch {
		case c.marked != "" || c.ran:
		case strings.HasPrefix(c.text, "curl "):
			runCurl(t, c, env, srv.base)
		case strings.HasPrefix(c.text, "sluice "):
			runSluice(t, c, env)
		}
	}
}

const docTenantRules = `domain: api
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit:
      unit: minute
      requests_per_unit: 100
      tiers:
        pro: {requests_per_unit: 1000}
        enterprise: {requests_per_unit: 10000}
    descriptors:
      - key: endpoint
        value: POST /api/v1/orders
        rate_limit: {unit: minute, requests_per_unit: 20}
`

const docBillingRules = `domain: billing
tenant_key: api_key
descriptors:
  - key: api_key
    rate_limit: {calendar: month, requests_per_unit: 1000000}
`

// tenantsScenario: docs/tenants.md's walk-through on a real PostgreSQL, in a
// directory holding the guide's rules/ and tokens.
func tenantsScenario(t *testing.T, cmds []*docCommand) {
	pg := pgtest.Start(t)
	dbURL := pg.NewDatabase(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "rules"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"rules/api.yaml": docTenantRules, "rules/billing.yaml": docBillingRules,
		"tokens": "ops rw ops-token-0123456789abcdef0123\nviewer ro viewer-token-0123456789abcdef0\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	env := map[string]string{"SLUICE_POSTGRES_URL": dbURL, "OPS_TOKEN": "ops-token-0123456789abcdef0123"}
	var srv *docServer
	for _, c := range cmds {
		switch {
		case c.marked != "":
		case strings.HasPrefix(c.text, "sluice serve"):
			srv = startDocServe(t, c, env)
			env["SLUICE_ADMIN_URL"], env["SLUICE_ADMIN_TOKEN"] = srv.base, env["OPS_TOKEN"]
		case srv == nil && strings.HasPrefix(c.text, "sluice "):
			runSluice(t, c, env) // sluice migrate, before the server
		case srv == nil:
			t.Fatalf("%v: before the guide's sluice serve", c)
		case strings.HasPrefix(c.text, "curl "):
			runCurl(t, c, env, srv.base)
		case strings.HasPrefix(c.text, "sluice "):
			runSluice(t, c, env)
		}
	}
}

// TestDocsCommands runs the documented commands (see the file comment) and
// fails for a command neither run nor marked.
func TestDocsCommands(t *testing.T) {
	files := []string{"README.md"}
	for _, pat := range []string{"docs/*.md", "examples/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, pat))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range m {
			rel, _ := filepath.Rel(repoRoot, f)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	var all []*docCommand
	failed := map[string]bool{} // files whose scenario failed or skipped
	for _, f := range files {
		cmds := docCommands(t, f)
		all = append(all, cmds...)
		if sc, ok := docScenarios[f]; ok && len(cmds) > 0 {
			failed[f] = !t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
				sc(t, cmds)
				if t.Skipped() {
					failed[f] = true
				}
			}) || failed[f]
		}
	}
	ran, marked := 0, 0
	for _, c := range all {
		switch {
		case c.ran:
			ran++
		case c.marked != "":
			marked++
		case failed[c.file]:
			// its scenario failed or was skipped: its commands did not run
		default:
			t.Errorf("%v: neither run by TestDocsCommands nor marked <!-- not run: reason --> before its block", c)
		}
	}
	t.Logf("documented commands: %d run, %d marked not run, %d in all", ran, marked, len(all))
}
