package tenant

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

func TestFileRoundTrip(t *testing.T) {
	rs := testSnapshot(t)
	at := time.Date(2026, 11, 26, 6, 0, 0, 123000, time.UTC)
	exp := at.Add(24 * time.Hour)
	base := NewSnapshot([]Record{
		{Tenant: "acme", Tier: rules.TierPro, ExpiresAt: exp, Overrides: []Override{
			{Domain: "api", Descriptor: "endpoint:POST /orders", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 7, Window: time.Minute}, RequestsPerUnit: 7, Unit: "minute"},
			{Domain: AnyDomain, Descriptor: "", Limit: sluice.Limit{Algorithm: sluice.TokenBucket, Quota: 9, Window: 90 * time.Second, Burst: 12}, RequestsPerUnit: 9},
		}},
		{Tenant: "gone", Tier: rules.TierEnterprise},
		{Tenant: "plain", Tier: rules.TierFree},
	}, []RuleSwitch{{Domain: "api", Rule: "remote_address", State: rules.SwitchShadow}}, at)
	// Changes since the full load: one removed, one added.
	snap := base.withTenant("gone", nil, at).withTenant("new", &Record{Tenant: "new", Tier: rules.TierEnterprise}, at)
	path := filepath.Join(t.TempDir(), "sub", "tenants.snapshot")
	if err := WriteFile(path, snap, 0); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file: %v, %v; want mode 0600", st, err)
	}
	got, err := ReadFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != 3 || !got.At().Equal(at.Truncate(time.Microsecond)) {
		t.Errorf("read back %d tenants at %v; want 3 at %v", got.Len(), got.At(), at)
	}
	if _, ok := got.lookup("gone"); ok {
		t.Error("a removed tenant came back")
	}
	if got.Switch("api", "remote_address") != rules.SwitchShadow {
		t.Error("the switch was lost")
	}
	for _, tc := range []struct {
		kv   []string
		want int64 // quota resolved; -1: the rule's own
	}{
		{[]string{"api_key", "acme", "endpoint", "POST /orders"}, 7},
		{[]string{"api_key", "acme"}, 9},
		{[]string{"api_key", "new"}, -1}, // enterprise: no tier limit, the rule's own
		{[]string{"api_key", "plain"}, 50},
	} {
		r, es := match(t, rs, tc.kv...)
		// At the snapshot's instant, not time.Now: the record expires a day
		// after it, and the test must not depend on the day it runs.
		want, _ := snap.Resolve(r, es, func() time.Time { return at })
		tl, _ := got.Resolve(r, es, func() time.Time { return at })
		q := int64(-1)
		if tl != nil {
			q = tl.Limit.Quota
		}
		if q != tc.want || (tl == nil) != (want == nil) || (tl != nil && (*tl != *want)) {
			t.Errorf("%v: read back %+v, want %+v (quota %d)", tc.kv, tl, want, tc.want)
		}
	}
	r, es := match(t, rs, "api_key", "acme")
	if tl, _ := got.Resolve(r, es, func() time.Time { return exp }); tl != r.Tiers[rules.TierFree] {
		t.Errorf("after the record's expiry: %+v, want the free tier (expiry kept)", tl)
	}
}

func TestFileBounds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tenants.snapshot")
	small := NewSnapshot([]Record{{Tenant: "a", Tier: rules.TierPro}}, nil, time.Now())
	if err := WriteFile(path, small, 0); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	var recs []Record
	for i := range 1000 {
		recs = append(recs, Record{Tenant: strings.Repeat("t", 100) + string(rune('a'+i%26)) + time.Duration(i).String(), Tier: rules.TierPro})
	}
	if err := WriteFile(path, NewSnapshot(recs, nil, time.Now()), 4096); !errors.Is(err, ErrFileTooLarge) {
		t.Fatalf("writing 100 KB with a 4 KiB bound: %v, want ErrFileTooLarge", err)
	}
	after, _ := os.ReadFile(path)
	if string(after) != string(before) {
		t.Error("a refused write changed the file")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := ReadFile(path, 10); !errors.Is(err, ErrFileTooLarge) {
		t.Errorf("reading with a 10-byte bound: %v, want ErrFileTooLarge", err)
	}
	lines := strings.SplitAfter(string(before), "\n")
	for _, tc := range []struct {
		name, text, want string
	}{
		{"cut short", strings.Join(lines[:2], ""), ":3: cut short"},
		{"other version", strings.Replace(string(before), `"version":1`, `"version":2`, 1), "version 2"},
		{"other format", `{"format":"x","version":1}` + "\n", `format "x"`},
		{"bad tier", strings.Replace(string(before), `"tier":"pro"`, `"tier":"gold"`, 1), ":2: tier"},
		{"empty", "", ":1: cut short"},
	} {
		p := filepath.Join(dir, "bad")
		if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadFile(p, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: ReadFile = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// FuzzReadFile: any file content reads to a snapshot or an error, never a
// panic; a snapshot read is one that writes and reads back the same.
func FuzzReadFile(f *testing.F) {
	dir := f.TempDir()
	good := filepath.Join(dir, "good")
	snap := NewSnapshot([]Record{{Tenant: "acme", Tier: rules.TierPro, Overrides: []Override{
		{Domain: "api", Descriptor: "", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 7, Window: time.Minute}, RequestsPerUnit: 7, Unit: "minute"}}}},
		[]RuleSwitch{{Domain: "api", Rule: "r", State: rules.SwitchOff}}, time.Now())
	if err := WriteFile(good, snap, 0); err != nil {
		f.Fatal(err)
	}
	b, _ := os.ReadFile(good)
	f.Add(b)
	f.Add([]byte(`{"format":"sluice-tenant-snapshot","version":1,"records":0,"switches":[]}` + "\n" + `{"end":true,"records":0}` + "\n"))
	f.Add([]byte("{}\n"))
	// Nested input, as a hostile copy from Redis may be.
	f.Add([]byte(`{"format":"sluice-tenant-snapshot","version":1,"records":1,"switches":[]}` + "\n" + strings.Repeat("[", 4096) + "\n"))
	f.Add([]byte(`{"format":"sluice-tenant-snapshot","version":1,"records":1,"switches":[]}` + "\n" + `{"t":"a","tier":"pro","ovs":[{"domain":{"x":[[[[{}]]]]}}]}` + "\n"))
	// Nested input and hostile counts.
	f.Add([]byte(`{"format":"sluice-tenant-snapshot","version":1,"records":-1,"switches":[]}` + "\n"))
	f.Add([]byte(`{"format":"sluice-tenant-snapshot","version":1,"records":1125899906842624,"switches":[]}` + "\n" + `{"t":"a","tier":"pro","ovs":[[[[[{"domain":[[{}]]}]]]]]}` + "\n"))
	f.Add([]byte(`{"format":"sluice-tenant-snapshot","version":1,"records":1,"switches":[[[[{"x":{"y":{"z":[]}}}]]]]}` + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := ReadFile(p, 1<<20)
		if err != nil {
			return
		}
		p2 := filepath.Join(t.TempDir(), "g")
		if err := WriteFile(p2, s, 0); err != nil {
			t.Fatalf("a snapshot read does not write: %v", err)
		}
		s2, err := ReadFile(p2, 0)
		if err != nil || s2.Len() != s.Len() {
			t.Fatalf("write and read back: %v, %d tenants, want %d", err, s2.Len(), s.Len())
		}
	})
}

// TestReadSnapshotWorstInput: the decoder of the snapshot file and of the
// fleet's shared copy (which arrives from Redis) allocates in proportion to
// its longest line, not to its input or nesting: every hostile body below
// stays under 24 MiB of allocation (a line is at most ~1.3 MiB: 1 MiB +
// MaxOverrides overrides of a domain and a descriptor at their bounds).
func TestReadSnapshotWorstInput(t *testing.T) {
	hdr := `{"format":"sluice-tenant-snapshot","version":1,"at":"2026-01-01T00:00:00Z","records":1,"switches":[]}` + "\n"
	ov := `{"domain":"d","path":"p","alg":"fixed_window","quota":1,"window_us":1000000,"rpu":1},`
	for _, tc := range []struct {
		name, body, want string
	}{
		{"nested 1 MiB", hdr + strings.Repeat("[", 1<<20) + "\n", "depth"},
		{"one line of 32 MiB", hdr + strings.Repeat("[", 32<<20) + "\n", "too long"},
		{"a long tenant name", hdr + `{"t":"` + strings.Repeat("a", 1<<20) + `","tier":"pro"}` + "\n", "longer than"},
		{"5000 overrides", hdr + `{"t":"a","tier":"pro","ovs":[` + strings.Repeat(ov, 5000) + `{}]}` + "\n", "at most 256"},
		{"a huge header count", strings.Replace(hdr, `"records":1`, `"records":2000000000`, 1) + "{}\n", ":2: tier"},
		{"many deny entries", strings.Replace(hdr, `"switches":[]`, `"switches":[],"deny":999999999`, 1), "deny"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := strings.NewReader(tc.body)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			_, err := ReadSnapshot(r, "copy", 64<<20)
			runtime.ReadMemStats(&after)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadSnapshot = %v, want an error containing %q", err, tc.want)
			}
			got := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes in, %d KiB allocated", len(tc.body), got>>10)
			if got > 24<<20 {
				t.Errorf("allocated %d MiB, want at most 24", got>>20)
			}
		})
	}
}
