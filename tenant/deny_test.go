package tenant

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

func TestSnapshotDenyLists(t *testing.T) {
	s := NewSnapshot(nil, nil, time.Unix(0, 0)).WithDeny([]DenyEntry{
		{Domain: "api", Key: "remote_address", CIDR: "10.1.0.0/16"},
		{Domain: "api", Key: "remote_address", CIDR: "2001:db8::/32"},
		{Domain: "api", Key: "user", Value: "mallory"},
		{Domain: "web", Key: "ua"},
		{Domain: "web", Key: "bad", CIDR: "not an address"}, // skipped: validated on the way in
	})
	// A later tenant or switch change keeps the lists.
	s = s.withSwitches([]RuleSwitch{{Domain: "api", Rule: "r", State: rules.SwitchOff}})
	s = s.withTenant("acme", &Record{Tenant: "acme", Tier: rules.TierPro}, time.Unix(0, 0))
	for _, c := range []struct {
		domain string
		e      rules.Entry
		want   bool
	}{
		{"api", rules.Entry{Key: "remote_address", Value: "10.1.200.3"}, true},
		{"api", rules.Entry{Key: "remote_address", Value: "::ffff:10.1.0.1"}, true},
		{"api", rules.Entry{Key: "remote_address", Value: "10.2.0.1"}, false},
		{"api", rules.Entry{Key: "remote_address", Value: "2001:db8::7"}, true},
		{"api", rules.Entry{Key: "remote_address", Value: "not-an-ip"}, false},
		{"api", rules.Entry{Key: "user", Value: "mallory"}, true},
		{"api", rules.Entry{Key: "user", Value: "alice"}, false},
		{"api", rules.Entry{Key: "ua", Value: "x"}, false}, // web's entry, not api's
		{"web", rules.Entry{Key: "ua", Value: "anything"}, true},
		{"web", rules.Entry{Key: "bad", Value: "1.2.3.4"}, false},
		{"other", rules.Entry{Key: "user", Value: "mallory"}, false},
	} {
		if got := s.DenyList(c.domain).Denies(c.e); got != c.want {
			t.Errorf("%s %s=%s: got denied %v, want %v", c.domain, c.e.Key, c.e.Value, got, c.want)
		}
	}
	if n := s.DenyList("api").Len(); n != 3 {
		t.Errorf("api's list: got %d entries, want 3", n)
	}
	if got := s.WithDeny(nil).DenyList("api"); got != nil {
		t.Errorf("after WithDeny(nil): got a list of %d entries, want none", got.Len())
	}
	var nilSnap *Snapshot
	if nilSnap.DenyList("api") != nil {
		t.Error("nil snapshot: got a deny list, want none")
	}
}

func TestRegistryDenyListDoesNotAllocate(t *testing.T) {
	g := NewRegistry(nil, Options{})
	g.Set(NewSnapshot(nil, nil, time.Unix(0, 0)).WithDeny([]DenyEntry{{Domain: "api", Key: "remote_address", CIDR: "10.0.0.0/8"}}))
	in, out := rules.Entry{Key: "remote_address", Value: "10.3.4.5"}, rules.Entry{Key: "remote_address", Value: "192.0.2.1"}
	var denied int
	allocs := testing.AllocsPerRun(1000, func() {
		dl := g.DenyList("api")
		if dl.Denies(in) {
			denied++
		}
		if dl.Denies(out) {
			denied += 1000
		}
	})
	if allocs != 0 {
		t.Errorf("got %v allocations per lookup, want 0", allocs)
	}
	if denied != 1001 { // AllocsPerRun runs the function once more to warm up
		t.Errorf("got %d, want 1001 (the address in range denied every run, the other never)", denied)
	}
}

func TestFileKeepsDenyEntries(t *testing.T) {
	path := filepath.Join(t.TempDir(), "snap")
	s := NewSnapshot([]Record{{Tenant: "acme", Tier: rules.TierPro}}, nil, time.Unix(100, 0)).WithDeny([]DenyEntry{
		{Domain: "api", Key: "remote_address", CIDR: "10.1.0.0/16", Reason: "not kept in the file"},
		{Domain: "api", Key: "user", Value: "mallory"},
	})
	if err := WriteFile(path, s, 0); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Len() != 1 || got.DenyList("api").Len() != 2 {
		t.Fatalf("read back: got %d records and %d deny entries, want 1 and 2", got.Len(), got.DenyList("api").Len())
	}
	if !got.DenyList("api").Denies(rules.Entry{Key: "remote_address", Value: "10.1.2.3"}) || got.DenyList("api").Denies(rules.Entry{Key: "user", Value: "alice"}) {
		t.Error("read back: the lists do not deny what was written")
	}
	// A file whose header promises more entries than it holds is refused.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(b), `"deny":2`, `"deny":3`, 1)
	if bad == string(b) {
		t.Fatalf("the header does not count deny entries: %s", b)
	}
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path, 0); err == nil || !strings.Contains(err.Error(), "deny entries") {
		t.Errorf("header says 3, file holds 2: got %v, want an error about deny entries", err)
	}
}
