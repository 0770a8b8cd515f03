package sluice_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// mdLink matches an inline Markdown link or image target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocsLinks: every relative link in README.md and docs/*.md names a
// file that exists, and every #anchor a heading of that file; and every
// guide in docs/ is one hop from the README, so a newcomer can reach it.
func TestDocsLinks(t *testing.T) {
	guides, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files := append([]string{"README.md", "BENCHMARKS.md"}, guides...)
	anchors := map[string]map[string]bool{}
	for _, f := range files {
		anchors[f] = headingAnchors(t, f)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripCode(string(b)), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Clean(filepath.Join(filepath.Dir(f), path))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", f, target, dest)
					continue
				}
			}
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			a, ok := anchors[dest]
			if !ok {
				a = headingAnchors(t, dest)
				anchors[dest] = a
			}
			if !a[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", f, target, dest, frag)
			}
		}
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guides {
		if !strings.Contains(string(readme), "]("+filepath.ToSlash(g)) {
			t.Errorf("README.md does not link %s: every guide must be one hop from the front door", g)
		}
	}
}

// headingAnchors returns the GitHub anchors of f's headings.
func headingAnchors(t *testing.T, f string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(stripCode(string(b)), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var s strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ' || r == '-':
				s.WriteRune('-')
			case r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && isLetter(r):
				s.WriteRune(r)
			}
		}
		a := s.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func isLetter(r rune) bool {
	return strings.ContainsRune("éèàüöäßç", r) || (r >= 0x00C0 && r <= 0x024F)
}

// stripCode drops fenced code blocks and indented code lines, where a "#"
// is a comment and brackets are not links.
func stripCode(s string) string {
	var out []string
	fenced := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n")
}
