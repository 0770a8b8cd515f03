package watch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// startGuarded runs a watcher with guard g on dir until the test ends; it
// returns the watcher and the holds reported to OnHold (nil: applied).
func startGuarded(t *testing.T, dir string, g *Guard) (*Watcher, func() []*rules.Hold) {
	t.Helper()
	w, err := New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	w.Guard, w.Debounce = g, 20*time.Millisecond
	var mu sync.Mutex
	var holds []*rules.Hold
	w.OnHold = func(h *rules.Hold) { mu.Lock(); holds = append(holds, h); mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil after cancel", err)
		}
	})
	return w, func() []*rules.Hold { mu.Lock(); defer mu.Unlock(); return append([]*rules.Hold(nil), holds...) }
}

func TestGuardHoldsDomainRemovalUntilConfirmed(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	writeAtomic(t, filepath.Join(dir, "two.yaml"), ruleFile("two", 2))
	w, holds := startGuarded(t, dir, &Guard{})

	if err := os.Remove(filepath.Join(dir, "two.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the removal of domain two held", func() bool { return w.Held() != nil })
	h := w.Held()
	if got, want := strings.Join(h.Reasons, ","), rules.HoldDomainRemoved; got != want {
		t.Errorf("reasons = %q, want %q", got, want)
	}
	if got := strings.Join(h.Domains, ","); got != "two" {
		t.Errorf("held domains = %q, want two", got)
	}
	if got := quotaOf(w, "two"); got != 2 {
		t.Errorf("domain two while held: quota %d, want 2 (still enforced)", got)
	}
	if err := w.LastError(); err != nil {
		t.Errorf("LastError while held = %v, want nil (the files are valid)", err)
	}
	// Held() is set before OnHold runs (after the watcher's lock is let
	// go): wait for the call rather than race it.
	eventually(t, "OnHold called with the hold", func() bool {
		hs := holds()
		return len(hs) > 0 && hs[len(hs)-1] != nil
	})

	// A change elsewhere keeps the hold and applies nothing.
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 5))
	time.Sleep(100 * time.Millisecond) // let a reload happen; what matters is asserted below
	eventually(t, "still held", func() bool { return w.Held() != nil })
	if got := quotaOf(w, "one"); got != 1 {
		t.Errorf("domain one while held: quota %d, want the rules in force (1)", got)
	}

	// The operator confirms.
	if err := os.WriteFile(filepath.Join(dir, rules.AllowRemovalFile), []byte("# ticket 42\ntwo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the confirmed removal applied", func() bool { return !w.Current().HasDomain("two") })
	if h := w.Held(); h != nil {
		t.Errorf("Held after confirmation = %+v, want nil", h)
	}
	if got := quotaOf(w, "one"); got != 5 {
		t.Errorf("domain one after confirmation: quota %d, want 5", got)
	}
	eventually(t, "OnHold called with nil (applied)", func() bool {
		hs := holds()
		return len(hs) > 0 && hs[len(hs)-1] == nil
	})
}

func TestGuardFilesWrittenOneByOne(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"one", "two", "three"} {
		writeAtomic(t, filepath.Join(dir, d+".yaml"), ruleFile(d, 1))
	}
	w, _ := startGuarded(t, dir, &Guard{})

	// Watch the rules in force while the files are rewritten one by one,
	// the way a tool without atomic swaps does: every domain must stay.
	stop := make(chan struct{})
	var missing atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			s := w.Current()
			for _, d := range []string{"one", "two", "three"} {
				if !s.HasDomain(d) {
					missing.Add(1)
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for _, d := range []string{"one", "two", "three"} {
		if err := os.Remove(filepath.Join(dir, d+".yaml")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond) // > debounce: each step may be its own reload
	}
	for _, d := range []string{"one", "two", "three"} {
		writeAtomic(t, filepath.Join(dir, d+".yaml"), ruleFile(d, 9))
		time.Sleep(60 * time.Millisecond)
	}
	eventually(t, "the new rules applied", func() bool {
		return quotaOf(w, "one") == 9 && quotaOf(w, "two") == 9 && quotaOf(w, "three") == 9
	})
	close(stop)
	wg.Wait()
	if n := missing.Load(); n != 0 {
		t.Errorf("a domain was missing from the rules in force %d times while files were rewritten, want 0", n)
	}
	if h := w.Held(); h != nil {
		t.Errorf("Held after the files came back = %+v, want nil", h)
	}
}

func TestGuardRuleInUse(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	var inUse sync.Map // rules.RuleRef → true
	inUse.Store(rules.RuleRef{Domain: "one", ID: "b"}, true)
	w, _ := startGuarded(t, dir, &Guard{InUse: func(r rules.RuleRef) bool { _, ok := inUse.Load(r); return ok }})
	onlyA := "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 3}\n"

	// Rule b saw traffic: its removal is held.
	writeAtomic(t, filepath.Join(dir, "one.yaml"), onlyA)
	eventually(t, "the removal of rule one/b held", func() bool { return w.Held() != nil })
	h := w.Held()
	if len(h.Rules) != 1 || h.Rules[0] != (rules.RuleRef{Domain: "one", ID: "b"}) || strings.Join(h.Reasons, ",") != rules.HoldRuleInUse {
		t.Errorf("hold = %+v, want rule one/b, reason %s", h, rules.HoldRuleInUse)
	}
	if r := w.Current().Match("one", []rules.Entry{{Key: "b", Value: "x"}}); r == nil {
		t.Error("rule one/b gone while held, want it in force")
	}

	// Once b sees no traffic, the next reload applies.
	inUse.Delete(rules.RuleRef{Domain: "one", ID: "b"})
	writeAtomic(t, filepath.Join(dir, "one.yaml"), onlyA+"# touched\n")
	eventually(t, "the removal applied once the rule is idle", func() bool { return quotaOf(w, "one") == 3 })
	if r := w.Current().Match("one", []rules.Entry{{Key: "b", Value: "x"}}); r != nil {
		t.Error("rule one/b still in force after the applied reload")
	}
	if h := w.Held(); h != nil {
		t.Errorf("Held = %+v, want nil", h)
	}
}

func TestGuardMarkerRuleLine(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	w, err := New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Guard = &Guard{InUse: func(rules.RuleRef) bool { return true }}
	onlyA := "domain: one\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 3}\n"
	writeAtomic(t, filepath.Join(dir, "one.yaml"), onlyA)
	if err := w.Reload(); !errors.Is(err, ErrHeld) {
		t.Fatalf("Reload = %v, want ErrHeld", err)
	}
	// A marker naming another rule confirms nothing.
	marker := filepath.Join(dir, rules.AllowRemovalFile)
	if err := os.WriteFile(marker, []byte("one a\nother\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); !errors.Is(err, ErrHeld) {
		t.Fatalf("Reload with a marker for other rules = %v, want ErrHeld", err)
	}
	if err := os.WriteFile(marker, []byte("one b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatalf("Reload with the rule confirmed = %v, want nil", err)
	}
	if got := quotaOf(w, "one"); got != 3 {
		t.Errorf("quota = %d, want 3", got)
	}
}

func TestGuardBadMarker(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	writeAtomic(t, filepath.Join(dir, "two.yaml"), ruleFile("two", 2))
	w, err := New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Guard = &Guard{}
	if err := os.WriteFile(filepath.Join(dir, rules.AllowRemovalFile), []byte("# ok\ntwo\n\x01bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "two.yaml")); err != nil {
		t.Fatal(err)
	}
	err = w.Reload()
	want := rules.AllowRemovalFile + ":3: not printable text"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Reload = %v, want an error containing %q", err, want)
	}
	if !w.Current().HasDomain("two") {
		t.Error("domain two removed by a reload that failed, want the rules in force kept")
	}
	if w.LastError() == nil {
		t.Error("LastError = nil after a bad marker, want the error")
	}
}

func TestGuardSettle(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	writeAtomic(t, filepath.Join(dir, "two.yaml"), ruleFile("two", 2))
	w, err := New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var mu sync.Mutex
	now := time.Unix(1_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	w.Guard = &Guard{Settle: time.Minute, Now: clock}
	if err := os.Remove(filepath.Join(dir, "two.yaml")); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance  time.Duration
		wantHeld bool
	}{
		{0, true},
		{30 * time.Second, true},
		{29 * time.Second, true},
		{time.Second, false}, // a minute after it was first held
	}
	for i, s := range steps {
		advance(s.advance)
		err := w.Reload()
		if held := errors.Is(err, ErrHeld); held != s.wantHeld {
			t.Fatalf("step %d: Reload = %v, held %v, want held %v", i, err, held, s.wantHeld)
		}
		if got := w.Current().HasDomain("two"); got != s.wantHeld {
			t.Errorf("step %d: domain two in force = %v, want %v", i, got, s.wantHeld)
		}
	}

	// A removal that changes restarts the settle time.
	writeAtomic(t, filepath.Join(dir, "two.yaml"), ruleFile("two", 2))
	writeAtomic(t, filepath.Join(dir, "three.yaml"), ruleFile("three", 3))
	if err := w.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "two.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); !errors.Is(err, ErrHeld) {
		t.Fatalf("Reload = %v, want held", err)
	}
	advance(50 * time.Second)
	if err := os.Remove(filepath.Join(dir, "three.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); !errors.Is(err, ErrHeld) {
		t.Fatalf("Reload with a larger removal = %v, want held", err)
	}
	advance(50 * time.Second) // 100s after the first hold, 50s after this one
	if err := w.Reload(); !errors.Is(err, ErrHeld) {
		t.Fatalf("Reload 50s into a new removal = %v, want held", err)
	}
	if h := w.Held(); strings.Join(h.Domains, ",") != "three,two" {
		t.Errorf("held domains = %v, want [three two]", h.Domains)
	}
}

func TestGuardAllowRemoval(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	writeAtomic(t, filepath.Join(dir, "two.yaml"), ruleFile("two", 2))
	w, err := New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Guard = &Guard{AllowRemoval: true, InUse: func(rules.RuleRef) bool { return true }}
	if err := os.Remove(filepath.Join(dir, "two.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := w.Reload(); err != nil {
		t.Fatalf("Reload = %v, want nil with AllowRemoval", err)
	}
	if w.Current().HasDomain("two") {
		t.Error("domain two still in force, want removed")
	}
}
