package rules

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

var update = flag.Bool("update", false, "rewrite the golden .err files of testdata/bad")

// TestParseErrors parses every fixture in testdata/bad and compares the
// complete error text with its golden file.
func TestParseErrors(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := Parse(file, data, Options{})
			if err == nil {
				t.Fatalf("Parse(%s) = %d rules, nil error; want errors", file, len(snap.Rules()))
			}
			if snap != nil {
				t.Errorf("Parse(%s) returned a snapshot along with errors", file)
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("Parse(%s) error %T %v, want a non-empty Errors", file, err, err)
			}
			for _, p := range errs {
				if p.File != file {
					t.Errorf("problem %q names file %q, want %q", p.Msg, p.File, file)
				}
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(file, ".yaml") + ".err"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("golden file: %v (run go test ./rules -run TestParseErrors -update)", err)
			}
			if got != string(want) {
				t.Errorf("Parse(%s) errors:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}

func TestLoadDirGood(t *testing.T) {
	snap, err := LoadDir("testdata/good", Options{})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	if got, want := snap.Domains(), []string{"api", "edge"}; !slices.Equal(got, want) {
		t.Errorf("Domains() = %v, want %v", got, want)
	}
	var ids []string
	for _, r := range snap.Rules() {
		ids = append(ids, r.Domain+" "+r.ID)
	}
	want := []string{
		"api api_key", "api api_key=free-*", "api batch", "api jobs", "api month", "api partner_key",
		"edge ldap", "edge path=*", "edge path=/api/*/action", "edge remote_address", "edge remote_address=50.0.0.5",
		"edge tenant.user", "edge tenant=acme.user", "edge tenant=acme.user=admin",
	}
	if !slices.Equal(ids, want) {
		t.Errorf("Rules() IDs =\n%q\nwant\n%q", ids, want)
	}
	get := func(domain, id string) *Rule {
		for _, r := range snap.Rules() {
			if r.Domain == domain && r.ID == id {
				return r
			}
		}
		t.Fatalf("no rule %s %s", domain, id)
		return nil
	}
	tests := []struct {
		domain, id string
		check      func(r *Rule) bool
		what       string
	}{
		{"edge", "remote_address", func(r *Rule) bool {
			return r.Limit == sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Second} && r.Unit == "second" && r.RequestsPerUnit == 10
		}, "10/second fixed window"},
		{"edge", "remote_address=50.0.0.5", func(r *Rule) bool { return r.Limit.Quota == 0 && r.Unit == "second" }, "0/second, unit lower-cased"},
		{"edge", "path=/api/*/action", func(r *Rule) bool { return r.ShadowMode && r.DetailedMetric }, "shadow and detailed"},
		{"edge", "ldap", func(r *Rule) bool { return r.Unlimited && r.Name == "ldap" && r.Limit == sluice.Limit{} }, "unlimited"},
		{"edge", "tenant=acme.user=admin", func(r *Rule) bool { return r.Unlimited && slices.Equal(r.Replaces, []string{"per_user"}) }, "replaces per_user"},
		{"api", "api_key", func(r *Rule) bool {
			return r.Limit == sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 100, Window: time.Minute, Burst: 20} && r.FailureMode == FailureLocal && r.Name == "per_key"
		}, "token bucket, burst 20, local"},
		{"api", "partner_key", func(r *Rule) bool { return r.Limit.Burst == 20 && r.Name == "per_key" }, "read through an alias"},
		{"api", "api_key=free-*", func(r *Rule) bool {
			return r.Limit == sluice.Limit{Algorithm: sluice.SlidingWindow, Quota: 30, Window: 90 * time.Second} && r.Unit == "" && r.FailureMode == FailureClosed && r.Path[0].Shared
		}, "sliding window 30/90s, closed, shared"},
		{"api", "batch", func(r *Rule) bool { return r.Limit.Algorithm == sluice.LeakyBucket && r.FailureMode == FailureOpen }, "leaky bucket, open"},
		{"api", "jobs", func(r *Rule) bool { return r.Limit.Algorithm == sluice.Concurrency && r.FailureMode == FailureDefault }, "concurrency"},
		{"api", "month", func(r *Rule) bool { return r.Limit.Window == 30*24*time.Hour }, "a month is 30 days"},
	}
	for _, tt := range tests {
		if r := get(tt.domain, tt.id); !tt.check(r) {
			t.Errorf("%s %s: want %s, got %+v", tt.domain, tt.id, tt.what, *r)
		}
	}
	r := get("edge", "tenant=acme.user")
	wantPath := []Step{{Key: "tenant", Value: "acme", Kind: MatchExact}, {Key: "user", Kind: MatchAny}}
	if !slices.Equal(r.Path, wantPath) || !strings.HasSuffix(r.File, "edge.yaml") || r.Line != 30 {
		t.Errorf("tenant=acme.user: path %+v at %s:%d, want %+v at edge.yaml:30", r.Path, r.File, r.Line, wantPath)
	}
	if got := snap.RuleByName("edge", "per_user"); got == nil || got.ID != "tenant=acme.user" {
		t.Errorf("RuleByName(edge, per_user) = %v, want tenant=acme.user", got)
	}
	if got := snap.RuleByName("edge", "nope"); got != nil {
		t.Errorf("RuleByName(edge, nope) = %v, want nil", got)
	}
}

func TestDefaultAlgorithm(t *testing.T) {
	const file = "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: second, requests_per_unit: 5}}\n  - {key: b, rate_limit: {unit: second, requests_per_unit: 5, burst: 9}}\n"
	snap, err := Parse("d.yaml", []byte(file), Options{DefaultAlgorithm: sluice.GCRA})
	if err != nil {
		t.Fatalf("Parse with default gcra: %v", err)
	}
	for _, r := range snap.Rules() {
		if r.Limit.Algorithm != sluice.GCRA {
			t.Errorf("rule %s algorithm = %v, want gcra", r.ID, r.Limit.Algorithm)
		}
	}
	_, err = Parse("d.yaml", []byte(file), Options{})
	want := "d.yaml:4: descriptors[1].rate_limit.burst: fixed_window has no burst; remove it or use token_bucket, gcra or leaky_bucket"
	if err == nil || err.Error() != want {
		t.Errorf("Parse with default fixed_window: error %v, want %q", err, want)
	}
}

func TestLoadDirErrors(t *testing.T) {
	_, err := LoadDir("testdata/dupdomain", Options{})
	want := `testdata/dupdomain/b.yaml:2: domain: domain "edge" is already defined in testdata/dupdomain/a.yaml:1
testdata/dupdomain/c.yaml:4: descriptors[0].rate_limit.unit: unknown unit "weekly" (want one of second, minute, hour, day, week, month, year)`
	if err == nil || err.Error() != want {
		t.Errorf("LoadDir(dupdomain) error:\n%v\nwant:\n%s", err, want)
	}
	if _, err := LoadDir("testdata/does-not-exist", Options{}); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadDir(missing dir) = %v, want an error wrapping os.ErrNotExist", err)
	}
	empty := t.TempDir()
	if _, err := LoadDir(empty, Options{}); err == nil || err.Error() != empty+": no rule files (*.yaml, *.yml)" {
		t.Errorf("LoadDir(empty dir) error = %v, want %q", err, empty+": no rule files (*.yaml, *.yml)")
	}
}

func TestMatch(t *testing.T) {
	snap, err := LoadDir("testdata/good", Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := func(kv ...string) []Entry {
		var out []Entry
		for i := 0; i+1 < len(kv); i += 2 {
			out = append(out, Entry{kv[i], kv[i+1]})
		}
		return out
	}
	tests := []struct {
		domain  string
		entries []Entry
		want    string // rule ID, "" for no rule
	}{
		{"edge", e("remote_address", "1.2.3.4"), "remote_address"},
		{"edge", e("remote_address", "50.0.0.5"), "remote_address=50.0.0.5"},
		{"edge", e("remote_address", ""), "remote_address"},
		{"edge", e("path", "/api/v1/action"), "path=/api/*/action"},
		{"edge", e("path", "/api//action"), "path=/api/*/action"},
		{"edge", e("path", "/api/v1/other"), "path=*"},
		{"edge", e("path", ""), "path=*"},
		{"edge", e("ldap", "anyone"), "ldap"},
		{"edge", e("tenant", "acme", "user", "bob"), "tenant=acme.user"},
		{"edge", e("tenant", "acme", "user", "admin"), "tenant=acme.user=admin"},
		{"edge", e("tenant", "other", "user", "bob"), "tenant.user"},
		{"edge", e("tenant", "acme"), ""},                                     // no limit at that level
		{"edge", e("tenant", "acme", "user", "bob", "extra", "x"), ""},        // deeper than the rules
		{"edge", e("remote_address", "1.2.3.4", "path", "/api/x/action"), ""}, // a limit only at the last entry
		{"edge", e("no_limit_here", "x"), ""},
		{"edge", e("unknown", "x"), ""},
		{"nowhere", e("remote_address", "1.2.3.4"), ""},
		{"edge", nil, ""},
		{"api", e("api_key", "free-123"), "api_key=free-*"},
		{"api", e("api_key", "paid-123"), "api_key"},
	}
	for _, tt := range tests {
		r := snap.Match(tt.domain, tt.entries)
		got := ""
		if r != nil {
			got = r.ID
		}
		if got != tt.want {
			t.Errorf("Match(%s, %v) = %q, want %q", tt.domain, tt.entries, got, tt.want)
		}
	}
	var nilSnap *Snapshot
	if nilSnap.Match("edge", e("a", "b")) != nil || nilSnap.Rules() != nil || nilSnap.Domains() != nil || nilSnap.HasDomain("edge") {
		t.Error("a nil Snapshot must be empty")
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	snap, err := LoadDir("testdata/good", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, entries := range [][]Entry{
		{{"remote_address", "1.2.3.4"}},
		{{"path", "/api/v1/action"}},
		{{"tenant", "acme"}, {"user", "bob"}},
		{{"unknown", "x"}},
	} {
		if n := testing.AllocsPerRun(100, func() { snap.Match("edge", entries) }); n != 0 {
			t.Errorf("Match(%v) allocates %v times, want 0", entries, n)
		}
	}
}

func TestProblemFormat(t *testing.T) {
	tests := []struct {
		p    Problem
		want string
	}{
		{Problem{"a.yaml", 3, "domain", "required"}, "a.yaml:3: domain: required"},
		{Problem{"a.yaml", 0, "", "permission denied"}, "a.yaml: permission denied"},
		{Problem{"a.yaml", 7, "", "YAML syntax: bad"}, "a.yaml:7: YAML syntax: bad"},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("%+v.Error() = %q, want %q", tt.p, got, tt.want)
		}
	}
}

func TestAliasBombIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [{key: k}]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("a" + itoa(i) + ": &a" + itoa(i) + " [")
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*a" + itoa(i-1))
		}
		b.WriteString("]\n")
	}
	b.WriteString("domain: d\ndescriptors: *a11\n")
	// Expanded, the bomb is 10^11 nodes: a parser that expanded it would
	// not return within the minute allowed here (a hang guard, not a bound).
	done := make(chan error, 1)
	go func() {
		_, err := Parse("bomb.yaml", []byte(b.String()), Options{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Parse(alias bomb) = nil error, want one")
		}
	case <-time.After(time.Minute):
		t.Fatal("Parse(alias bomb) has not returned after a minute: it expands the aliases")
	}
}

func itoa(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }

func TestYAML11Booleans(t *testing.T) {
	tests := []struct {
		value string
		want  bool
		ok    bool
	}{
		{"true", true, true}, {"false", false, true}, {"yes", true, true}, {"No", false, true},
		{"on", true, true}, {"OFF", false, true}, {`"yes"`, false, false}, {"maybe", false, false},
	}
	for _, tt := range tests {
		file := "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: " + tt.value + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
		snap, err := Parse("b.yaml", []byte(file), Options{})
		if !tt.ok {
			if err == nil {
				t.Errorf("shadow_mode: %s accepted, want an error", tt.value)
			}
			continue
		}
		if err != nil {
			t.Errorf("shadow_mode: %s: %v", tt.value, err)
			continue
		}
		if got := snap.Rules()[0].ShadowMode; got != tt.want {
			t.Errorf("shadow_mode: %s = %v, want %v", tt.value, got, tt.want)
		}
	}
}
