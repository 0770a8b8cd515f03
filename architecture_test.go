package sluice_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/sluice-rl/sluice"

// thirdParty maps the names the import table uses to import path prefixes.
var thirdParty = map[string]string{
	"rueidis":            "github.com/redis/rueidis",
	"yaml":               "go.yaml.in/yaml/v3",
	"fsnotify":           "github.com/fsnotify/fsnotify",
	"prometheus":         "github.com/prometheus/",
	"httpsfv":            "github.com/dunglas/httpsfv",
	"go-control-plane":   "github.com/envoyproxy/go-control-plane/",
	"protobuf":           "google.golang.org/protobuf/",
	"grpc":               "google.golang.org/grpc",
	"pgx":                "github.com/jackc/pgx/",
	"plot":               "gonum.org/v1/plot",
	"gobreaker":          "github.com/sony/gobreaker/",
	"go-json-experiment": "github.com/go-json-experiment/json",
}

// rule is one row of the import table: what a package may import.
type rule struct {
	everything bool
	module     map[string]bool // import paths of the module's packages
	prefixes   []string        // third-party import path prefixes
}

func (r rule) allows(imp string) bool {
	if r.everything || !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") {
		return true // the standard library
	}
	if r.module[imp] {
		return true
	}
	for _, p := range r.prefixes {
		if imp == strings.TrimSuffix(p, "/") || strings.HasPrefix(imp, p) || strings.HasPrefix(imp, p+"/") {
			return true
		}
	}
	return false
}

var backticked = regexp.MustCompile("`([^`]+)`")

// importTable reads the package table of docs/architecture.md.
func importTable(t *testing.T) map[string]rule {
	t.Helper()
	f, err := os.Open(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	table := map[string]rule{}
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "| package | its job | may import |") {
			in = true
			continue
		}
		if !in {
			continue
		}
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		m := backticked.FindStringSubmatch(cells[0])
		if m == nil {
			t.Fatalf("architecture.md: row %q names no package", line)
		}
		pkg := packagePath(m[1])
		allowed := strings.TrimSpace(cells[2])
		r := rule{module: map[string]bool{}}
		switch {
		case allowed == "everything":
			r.everything = true
		case allowed == "stdlib only":
		default:
			for _, item := range strings.Split(allowed, ",") {
				item = strings.TrimSpace(item)
				if m := backticked.FindStringSubmatch(item); m != nil {
					r.module[packagePath(m[1])] = true
					continue
				}
				p, ok := thirdParty[item]
				if !ok {
					t.Fatalf("architecture.md: %s may import %q, a name this test does not know (add it to thirdParty)", pkg, item)
				}
				r.prefixes = append(r.prefixes, p)
			}
		}
		table[pkg] = r
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(table) == 0 {
		t.Fatal("architecture.md: no import table found")
	}
	return table
}

// packagePath turns a table name ("sluice", "store/memory", "examples/…")
// into an import path (a trailing "…" matches every package below).
func packagePath(name string) string {
	if name == "sluice" {
		return module
	}
	return module + "/" + strings.TrimSuffix(name, "…")
}

// goList runs go list with args in the module and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// TestImportTable: every package of the module imports only what the table
// in docs/architecture.md allows it (tests aside), and every package has a
// row there.
func TestImportTable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	table := importTable(t)
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		r, ok := table[pkg]
		if !ok {
			for name, pr := range table { // "examples/…" rows cover a subtree
				if strings.HasSuffix(name, "/") && strings.HasPrefix(pkg, name) {
					r, ok = pr, true
				}
			}
		}
		if !ok {
			t.Errorf("%s has no row in docs/architecture.md's import table; add one", pkg)
			continue
		}
		for _, imp := range imports {
			if !r.allows(imp) {
				t.Errorf("%s imports %s, which docs/architecture.md does not allow", pkg, imp)
			}
		}
	}
}

// TestLeanLibrary: a program using the middleware with an in-process engine
// links no Prometheus, protobuf, gRPC or file watcher.
func TestLeanLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	heavy := []string{"github.com/prometheus/", "google.golang.org/protobuf", "google.golang.org/grpc", "github.com/fsnotify/", "github.com/envoyproxy/"}
	for _, dep := range goList(t, "-deps", "./httplimit", "./service", "./store/memory") {
		for _, h := range heavy {
			if strings.HasPrefix(dep, h) {
				t.Errorf("the library path (httplimit, service, store/memory) depends on %s", dep)
			}
		}
	}
}

// TestExamplesLeaveServePortsAlone: the examples listen where `sluice serve`
// (HTTP 8080, gRPC 8081, debug 6070 by default) does not, so a newcomer can
// run them beside it.
func TestExamplesLeaveServePortsAlone(t *testing.T) {
	taken := regexp.MustCompile(`(?:127\.0\.0\.1|localhost|0\.0\.0\.0)?:(8080|8081|6070)\b`)
	err := filepath.WalkDir("examples", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if ext := filepath.Ext(path); ext != ".go" && ext != ".yaml" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := taken.FindString(line); m != "" && !strings.Contains(line, "sluice serve") {
				t.Errorf("%s:%d: %s is a port of sluice serve; pick another so both can run", path, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
