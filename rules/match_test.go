package rules

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// globMatch reports whether s matches pattern, where each '*' in pattern
// matches any run of bytes, including none. It is the reference the
// compiled wildSet is checked against: the matcher Match used before, one
// pattern at a time.
func globMatch(pattern, s string) bool {
	px, sx := 0, 0
	starPx, starSx := -1, 0
	for sx < len(s) {
		switch {
		case px < len(pattern) && pattern[px] == '*':
			starPx, starSx = px, sx
			px++
		case px < len(pattern) && pattern[px] == s[sx]:
			px++
			sx++
		case starPx >= 0:
			px = starPx + 1
			starSx++
			sx = starSx
		default:
			return false
		}
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// linearWild is the reference for wildSet.match: the first pattern in file
// order that v matches, by a scan.
func linearWild(pats []*mnode, v string) *mnode {
	for _, w := range pats {
		if globMatch(w.pattern, v) {
			return w
		}
	}
	return nil
}

// matchLinear is Snapshot.Match as it was before the wildcards were
// compiled: the same walk, with a linear scan of each key's wildcard
// values in file order.
func matchLinear(s *Snapshot, domain string, entries []Entry) *Rule {
	if s == nil || len(entries) == 0 {
		return nil
	}
	lv := s.domains[domain]
	for i := range entries {
		if lv == nil {
			return nil
		}
		g := lv.keys[entries[i].Key]
		if g == nil {
			return nil
		}
		n := g.exact[entries[i].Value]
		if n == nil && g.wild != nil {
			n = linearWild(g.wild.pats, entries[i].Value)
		}
		if n == nil {
			n = g.any
		}
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.rule
		}
		lv = n.next
	}
	return nil
}

func wildNodes(patterns []string) []*mnode {
	ns := make([]*mnode, len(patterns))
	for i, p := range patterns {
		ns[i] = &mnode{pattern: p}
	}
	return ns
}

func patternOf(n *mnode) string {
	if n == nil {
		return "<none>"
	}
	return n.pattern
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"a*", "a", true},
		{"a*", "abc", true},
		{"a*", "ba", false},
		{"*c", "abc", true},
		{"*c", "abd", false},
		{"a*c", "ac", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"/api/*/action", "/api/v1/action", true},
		{"/api/*/action", "/api/v1/v2/action", true},
		{"/api/*/action", "/api/action", false},
		{"*a*b*", "xxaxxbxx", true},
		{"*a*b*", "xxbxxaxx", false},
		{"a**b", "ab", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"*aaa*aaa*", "aaaaa", false},
		{"*aaa*aaa*", "aaaaaa", true},
	}
	for _, tt := range tests {
		if got := globMatch(tt.pattern, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
		if got := newWildSet(wildNodes([]string{tt.pattern})).match(tt.s) != nil; strings.Contains(tt.pattern, "*") && got != tt.want {
			t.Errorf("wildSet{%q}.match(%q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

// TestWildcardPrecedence pins which of several overlapping wildcard values
// wins: the first declared in the file that matches (as
// envoyproxy/ratelimit scans its wildcard keys in order), not the longest
// or the most specific.
func TestWildcardPrecedence(t *testing.T) {
	tests := []struct {
		patterns []string
		value    string
		want     string // "<none>" for no match
	}{
		{[]string{"a*", "ab*"}, "abc", "a*"},
		{[]string{"ab*", "a*"}, "abc", "ab*"},
		{[]string{"ab*", "a*"}, "ax", "a*"},
		{[]string{"ab*", "a*"}, "a", "a*"},
		{[]string{"ab*", "a*"}, "b", "<none>"},
		{[]string{"*c", "a*"}, "abc", "*c"},
		{[]string{"a*", "*c"}, "abc", "a*"},
		{[]string{"a*", "*c"}, "xbc", "*c"},
		{[]string{"abc*", "a*c"}, "abc", "abc*"},
		{[]string{"a*c", "abc*"}, "abc", "a*c"},
		{[]string{"a*c", "abc*"}, "abcd", "abc*"},
		{[]string{"*a*b*", "*"}, "xaxbx", "*a*b*"},
		{[]string{"*a*b*", "*"}, "xbxax", "*"},
		{[]string{"*", "*a*b*"}, "xaxbx", "*"},
		{[]string{"x*a*b*y", "x*y", "x*"}, "xaby", "x*a*b*y"},
		{[]string{"x*a*b*y", "x*y", "x*"}, "xbay", "x*y"},
		{[]string{"x*a*b*y", "x*y", "x*"}, "xbaz", "x*"},
		{[]string{"x*y", "x*a*b*y"}, "xaby", "x*y"},
		{[]string{"ab*ba"}, "aba", "<none>"}, // prefix and suffix may not overlap
		{[]string{"ab*ba"}, "abba", "ab*ba"},
		{[]string{"*aaa*aaa*"}, "aaaaa", "<none>"},
		{[]string{"*aaa*aaa*"}, "aaaaaa", "*aaa*aaa*"},
		{[]string{"a**b"}, "ab", "a**b"},
		{[]string{"*"}, "", "*"},
		{[]string{"a*"}, "", "<none>"},
		{[]string{"t1*", "t10*", "t100*"}, "t1000", "t1*"},
		{[]string{"t100*", "t10*", "t1*"}, "t1000", "t100*"},
		{[]string{"t100*", "t10*", "t1*"}, "t1099", "t10*"},
		{[]string{"/api/*/action", "/api/*", "*"}, "/api/v1/action", "/api/*/action"},
		{[]string{"/api/*/action", "/api/*", "*"}, "/api/v1/list", "/api/*"},
		{[]string{"/api/*/action", "/api/*", "*"}, "/web", "*"},
	}
	for _, tt := range tests {
		ns := wildNodes(tt.patterns)
		if got := patternOf(newWildSet(ns).match(tt.value)); got != tt.want {
			t.Errorf("wildSet%q.match(%q) = %s, want %s", tt.patterns, tt.value, got, tt.want)
		}
		if got := patternOf(linearWild(ns, tt.value)); got != tt.want {
			t.Errorf("linearWild(%q, %q) = %s, want %s", tt.patterns, tt.value, got, tt.want)
		}
	}
}

// TestMatchPrecedence: in a rule file, an exact value beats every
// wildcard, a wildcard (the first declared that matches) beats the bare
// key, and the bare key takes the rest.
func TestMatchPrecedence(t *testing.T) {
	const file = `domain: d
descriptors:
  - {key: k, value: "ab*", rate_limit: {unit: second, requests_per_unit: 1}}
  - {key: k, value: "abc", rate_limit: {unit: second, requests_per_unit: 2}}
  - {key: k, value: "a*", rate_limit: {unit: second, requests_per_unit: 3}}
  - {key: k, value: "*z", rate_limit: {unit: second, requests_per_unit: 4}}
  - {key: k, rate_limit: {unit: second, requests_per_unit: 5}}
`
	snap, err := Parse("d.yaml", []byte(file), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		value string
		want  string // the rule's ID
	}{
		{"abc", "k=abc"},
		{"abcd", "k=ab*"},
		{"abz", "k=ab*"},
		{"az", "k=a*"},
		{"a", "k=a*"},
		{"bz", "k=*z"},
		{"z", "k=*z"},
		{"b", "k"},
		{"", "k"},
	}
	for _, tt := range tests {
		entries := []Entry{{Key: "k", Value: tt.value}}
		r := snap.Match("d", entries)
		if r == nil || r.ID != tt.want {
			t.Errorf("Match(k=%q) = %v, want rule %s", tt.value, r, tt.want)
		}
		if l := matchLinear(snap, "d", entries); l != r {
			t.Errorf("Match(k=%q) = %v, the linear reference %v", tt.value, r, l)
		}
	}
}

// randPattern is a value over a two-letter alphabet with up to three '*'s:
// few letters make patterns overlap often.
func randPattern(r *rand.Rand, wild bool) string {
	var b []byte
	for range r.IntN(6) {
		if wild && r.IntN(3) == 0 {
			b = append(b, '*')
		} else {
			b = append(b, "ab"[r.IntN(2)])
		}
	}
	if wild && !strings.Contains(string(b), "*") {
		i := r.IntN(len(b) + 1)
		b = append(b[:i], append([]byte{'*'}, b[i:]...)...)
	}
	return string(b)
}

// TestWildSetDifferential: on random pattern lists and values, the compiled
// set picks the same pattern as a scan in file order.
func TestWildSetDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 1))
	for trial := range 20000 {
		pats := make([]string, r.IntN(12))
		for i := range pats {
			pats[i] = randPattern(r, true)
		}
		ns := wildNodes(pats)
		w := newWildSet(ns)
		for range 20 {
			v := randPattern(r, false)
			if got, want := w.match(v), linearWild(ns, v); got != want {
				t.Fatalf("trial %d: patterns %q, value %q: compiled %s, linear %s", trial, pats, v, patternOf(got), patternOf(want))
			}
		}
	}
}

// randRuleFile writes a rule file of random nested descriptors (keys k0
// and k1, exact, wildcard and bare values, some without a rate_limit).
func randRuleFile(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	var level func(indent string, depth int)
	level = func(indent string, depth int) {
		seen := map[string]bool{}
		for range 1 + r.IntN(8) {
			key := fmt.Sprintf("k%d", r.IntN(2))
			value := ""
			switch r.IntN(4) {
			case 0, 1:
				value = randPattern(r, true)
			case 2:
				value = randPattern(r, false)
			}
			if seen[key+"="+value] || (value == "" && seen[key]) {
				continue
			}
			seen[key+"="+value] = true
			if value == "" {
				seen[key] = true
			}
			fmt.Fprintf(&b, "%s- key: %s\n", indent, key)
			if value != "" {
				fmt.Fprintf(&b, "%s  value: %q\n", indent, value)
			}
			if r.IntN(4) != 0 {
				fmt.Fprintf(&b, "%s  rate_limit: {unit: second, requests_per_unit: 1}\n", indent)
			}
			if depth < 3 && r.IntN(2) == 0 {
				fmt.Fprintf(&b, "%s  descriptors:\n", indent)
				level(indent+"    ", depth+1)
			}
		}
	}
	level("  ", 1)
	return b.String()
}

// TestMatchDifferential: on random rule files and random requests,
// Snapshot.Match returns the same rule as the linear reference.
func TestMatchDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(29, 2))
	files := 0
	for trial := 0; files < 500 && trial < 5000; trial++ {
		file := randRuleFile(r)
		snap, err := Parse("d.yaml", []byte(file), Options{})
		if err != nil {
			continue // a descriptor without rule nor children, say
		}
		files++
		for range 200 {
			entries := make([]Entry, 1+r.IntN(3))
			for i := range entries {
				entries[i] = Entry{Key: fmt.Sprintf("k%d", r.IntN(3)), Value: randPattern(r, false)}
			}
			if got, want := snap.Match("d", entries), matchLinear(snap, "d", entries); got != want {
				t.Fatalf("rule file:\n%s\nMatch(%v) = %v, linear reference %v", file, entries, got, want)
			}
		}
	}
	if files < 500 {
		t.Fatalf("only %d of the random rule files parsed, want 500", files)
	}
}

// FuzzWildSet: the patterns (the input's lines before the last, each with
// a '*') and the value (the last line) make the compiled set and the scan
// in file order pick the same pattern.
func FuzzWildSet(f *testing.F) {
	f.Add([]byte("a*\nab*\nabc"))
	f.Add([]byte("*a*b*\n*\nxaxbx"))
	f.Add([]byte("ab*ba\naba"))
	f.Add([]byte("*aaa*aaa*\naaaaaa"))
	f.Add([]byte("/api/*/action\n/api/*\n/api/v1/action"))
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := strings.Split(string(data), "\n")
		v := lines[len(lines)-1]
		var pats []string
		for _, p := range lines[:len(lines)-1] {
			if strings.Contains(p, "*") {
				pats = append(pats, p)
			}
		}
		ns := wildNodes(pats)
		if got, want := newWildSet(ns).match(v), linearWild(ns, v); got != want {
			t.Fatalf("patterns %q, value %q: compiled %s, linear %s", pats, v, patternOf(got), patternOf(want))
		}
	})
}

// suffixFile is wildcardFile with suffix wildcards ("*-t00042").
func suffixFile(n int) (file []byte, value string) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: tenant, value: \"*-t%05d\", rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	return []byte(b.String()), fmt.Sprintf("user-42-t%05d", n-1)
}

// wildcardFile is a rule file of n prefix wildcard values of one key,
// envoyproxy/ratelimit's form ("t00042-*"), and a value that only the
// last declared matches: the one a scan in file order reaches last.
func wildcardFile(n int) (file []byte, value string) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {key: tenant, value: \"t%05d-*\", rate_limit: {unit: second, requests_per_unit: 1}}\n", i)
	}
	return []byte(b.String()), fmt.Sprintf("t%05d-user-42", n-1)
}

// TestMatchWildcardManyRules: with 10,000 wildcard values the right rule
// is found, the linear reference agrees, and Match does not allocate.
func TestMatchWildcardManyRules(t *testing.T) {
	file, value := wildcardFile(10000)
	snap, err := Parse("d.yaml", file, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sfile, svalue := suffixFile(10000)
	ssnap, err := Parse("d.yaml", sfile, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		snap        *Snapshot
		value, want string
	}{
		{ssnap, svalue, "tenant=*-t09999"},
		{ssnap, "-t00000", "tenant=*-t00000"},
		{ssnap, "t00000", ""},
		{snap, value, "tenant=t09999-*"},
		{snap, "t00000-", "tenant=t00000-*"},
		{snap, "t05000-x", "tenant=t05000-*"},
		{snap, "t05000", ""},
		{snap, "t10000-x", ""},
	} {
		snap := tt.snap
		entries := []Entry{{Key: "tenant", Value: tt.value}}
		r := snap.Match("d", entries)
		if got := ""; r != nil {
			got = r.ID
			if got != tt.want {
				t.Errorf("Match(tenant=%q) = %s, want %q", tt.value, got, tt.want)
			}
		} else if tt.want != "" {
			t.Errorf("Match(tenant=%q) = nil, want %s", tt.value, tt.want)
		}
		if l := matchLinear(snap, "d", entries); l != r {
			t.Errorf("Match(tenant=%q) = %v, linear reference %v", tt.value, r, l)
		}
		if n := testing.AllocsPerRun(100, func() { snap.Match("d", entries) }); n != 0 {
			t.Errorf("Match(tenant=%q) allocates %v times, want 0", tt.value, n)
		}
	}
}

// BenchmarkMatchWildcard: one Match among n prefix wildcard values, for a
// value only the last declared matches.
func BenchmarkMatchWildcard(b *testing.B) {
	benchWildcard(b, wildcardFile, (*Snapshot).Match)
}

// BenchmarkMatchWildcardSuffix: the same with suffix wildcard values,
// matched through the suffix trees.
func BenchmarkMatchWildcardSuffix(b *testing.B) {
	benchWildcard(b, suffixFile, (*Snapshot).Match)
}

// BenchmarkMatchWildcardLinear: the same with the linear scan Match used
// before (the test-only reference), for comparison in the same run.
func BenchmarkMatchWildcardLinear(b *testing.B) {
	benchWildcard(b, wildcardFile, func(s *Snapshot, domain string, entries []Entry) *Rule { return matchLinear(s, domain, entries) })
}

func benchWildcard(b *testing.B, rules func(n int) ([]byte, string), match func(*Snapshot, string, []Entry) *Rule) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			file, value := rules(n)
			snap, err := Parse("d.yaml", file, Options{})
			if err != nil {
				b.Fatal(err)
			}
			entries := []Entry{{Key: "tenant", Value: value}}
			if match(snap, "d", entries) == nil {
				b.Fatalf("no rule matches tenant=%s", value)
			}
			// No GC cycle left over from the parse runs among the
			// measured calls (it would move callgrind's counts).
			runtime.GC()
			b.ReportAllocs()
			for b.Loop() {
				match(snap, "d", entries)
			}
		})
	}
}
