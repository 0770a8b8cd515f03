package sluice_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// goBlocks returns the ```go blocks of the Markdown file f, each with the
// line it starts on.
func goBlocks(t *testing.T, f string) (blocks []string, lines []int) {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var cur []string
	in := false
	for i, l := range strings.Split(string(b), "\n") {
		switch {
		case !in && strings.TrimSpace(l) == "```go":
			in, cur = true, nil
			lines = append(lines, i+2)
		case in && strings.TrimSpace(l) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n")+"\n")
		case in:
			cur = append(cur, l)
		}
	}
	return blocks, lines
}

// TestLibraryGuideCompiles: every Go block of docs/library.md is a whole
// program that builds against this module, so the guide cannot
// drift from the API. The blocks are laid into the module through
// `go build -overlay`, so nothing is written to the tree.
func TestLibraryGuideCompiles(t *testing.T) {
	buildGoBlocks(t, "docs/library.md", "library", 5, "memory, Redis, compose, Wait, middleware")
}

// TestHTTPGuideCompiles: every Go block of docs/http.md (the middleware,
// costs known after the response, the client) is a whole program that
// builds.
func TestHTTPGuideCompiles(t *testing.T) {
	buildGoBlocks(t, "docs/http.md", "http", 3, "the middleware, reported costs, the client")
}

// buildGoBlocks builds every Go block of doc, each a whole program, through
// `go build -overlay` under internal/docblocks/name (nothing is written to
// the tree); doc must have at least min blocks (want says which).
func buildGoBlocks(t *testing.T, doc, name string, min int, want string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds programs with the go command")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command on PATH")
	}
	blocks, lines := goBlocks(t, doc)
	if len(blocks) < min {
		t.Fatalf("%s has %d Go blocks, want at least %d (%s)", doc, len(blocks), min, want)
	}
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	replace := map[string]string{}
	var pkgs []string
	for i, src := range blocks {
		if !strings.HasPrefix(src, "package main\n") {
			t.Errorf("%s:%d: a Go block must be a whole program (package main), so that it can be copied and built", doc, lines[i])
			continue
		}
		real := filepath.Join(tmp, "block"+itoa(i)+".go")
		if err := os.WriteFile(real, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join("internal", "docblocks", name, "b"+itoa(i))
		replace[filepath.Join(root, dir, "main.go")] = real
		pkgs = append(pkgs, "./"+filepath.ToSlash(dir))
	}
	overlay, err := json.Marshal(map[string]any{"Replace": replace})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	// go vet does not read overlays; build type-checks every block. With
	// the test binary's -race, so that the module's packages come from the
	// build cache that building the tests filled (without it, a fresh
	// cache compiles every dependency once more), and one build at a time
	// on the machine (proctest.GoBuild).
	args := []string{"-overlay", ov}
	if raceBuild {
		args = append(args, "-race")
	}
	if out, err := proctest.GoBuild(root, append(args, pkgs...)...); err != nil {
		t.Errorf("go build of the Go blocks of %s (block N starts on line %v[N]): %v\n%s", doc, lines, err, out)
	}
}

func itoa(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }
