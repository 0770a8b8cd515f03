package watch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
)

func ruleFile(domain string, quota int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: %d}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: %d}\n", domain, quota, quota)
}

// writeAtomic writes a file the way editors and config tools do: a hidden
// temporary file renamed over the target.
func writeAtomic(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

type reloadEvent struct {
	ok  bool
	err error
}

// startWatcher runs a watcher on dir until the test ends and returns its
// reload events.
func startWatcher(t *testing.T, dir string) (*Watcher, chan reloadEvent) {
	t.Helper()
	return startWatcherOpts(t, dir, rules.Options{})
}

// startWatcherOpts is startWatcher loading with opts.
func startWatcherOpts(t *testing.T, dir string, opts rules.Options) (*Watcher, chan reloadEvent) {
	t.Helper()
	w, err := New(dir, opts, nil)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	events := make(chan reloadEvent, 100)
	w.OnReload = func(ok bool, err error) { events <- reloadEvent{ok, err} }
	w.Debounce = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil after cancel", err)
		}
	})
	return w, events
}

// waitReload waits for a reload with the wanted outcome and returns it.
func waitReload(t *testing.T, events chan reloadEvent, wantOK bool, cond func() bool) reloadEvent {
	t.Helper()
	timeout := time.After(time.Minute) // a poll's deadline, not a bound
	for {
		select {
		case ev := <-events:
			if ev.ok == wantOK && cond() {
				return ev
			}
		case <-timeout:
			t.Fatalf("no reload with ok=%v and the expected rules within a minute", wantOK)
		}
	}
}

func quotaOf(w *Watcher, domain string) int64 {
	r := w.Current().Match(domain, []rules.Entry{{Key: "a", Value: "x"}})
	if r == nil {
		return -1
	}
	return r.Limit.Quota
}

func TestWatcherFollowsWritesReplacesAndBreaks(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	w, events := startWatcher(t, dir)
	if got := quotaOf(w, "one"); got != 1 {
		t.Fatalf("initial quota = %d, want 1", got)
	}

	// A new file.
	if err := os.WriteFile(filepath.Join(dir, "two.yaml"), []byte(ruleFile("two", 2)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitReload(t, events, true, func() bool { return quotaOf(w, "two") == 2 })

	// A file replaced by rename.
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 10))
	waitReload(t, events, true, func() bool { return quotaOf(w, "one") == 10 })
	good := w.LastReload()

	// A broken file: the last good rules stay, the error is reported.
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 10)+"  - key: c\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	ev := waitReload(t, events, false, func() bool { return true })
	if ev.err == nil || !strings.Contains(ev.err.Error(), "one.yaml:8: descriptors[2].rate_limit.unit: unknown unit") {
		t.Errorf("reload error = %v, want one naming one.yaml:8 and the unit", ev.err)
	}
	if got := quotaOf(w, "one"); got != 10 {
		t.Errorf("after a bad reload quota = %d, want the last good 10", got)
	}
	if err := w.LastError(); err == nil || err.Error() != ev.err.Error() {
		t.Errorf("LastError() = %v, want %v", err, ev.err)
	}
	if !w.LastReload().Equal(good) {
		t.Errorf("LastReload moved on a failed reload: %v, want %v", w.LastReload(), good)
	}

	// Fixed again.
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 11))
	waitReload(t, events, true, func() bool { return quotaOf(w, "one") == 11 })
	if err := w.LastError(); err != nil {
		t.Errorf("LastError() after a good reload = %v, want nil", err)
	}

	// A file removed.
	if err := os.Remove(filepath.Join(dir, "two.yaml")); err != nil {
		t.Fatal(err)
	}
	waitReload(t, events, true, func() bool { return !w.Current().HasDomain("two") })

	// Files the watcher does not read do not cause reloads.
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		t.Errorf("a reload (%+v) after writing notes.txt, want none", ev)
	case <-time.After(150 * time.Millisecond):
	}
}

// TestWatcherConfigMapSwap replays what the kubelet does to a ConfigMap
// volume on update: the files are symlinks through ..data, which is swapped
// atomically to a new timestamped directory.
func TestWatcherConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name string, quota int) {
		t.Helper()
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "rules.yaml"), []byte(ruleFile("cm", quota)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_01_01_00_00_00.1", 1)
	must(t, os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")))
	must(t, os.Symlink("..data/rules.yaml", filepath.Join(dir, "rules.yaml")))
	w, events := startWatcher(t, dir)
	if got := quotaOf(w, "cm"); got != 1 {
		t.Fatalf("initial quota = %d, want 1", got)
	}
	for i, name := range []string{"..2026_01_01_00_01_00.2", "..2026_01_01_00_02_00.3"} {
		quota := i + 2
		old, err := os.Readlink(filepath.Join(dir, "..data"))
		must(t, err)
		version(name, quota)
		must(t, os.Symlink(name, filepath.Join(dir, "..data_tmp")))
		must(t, os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")))
		must(t, os.RemoveAll(filepath.Join(dir, old)))
		waitReload(t, events, true, func() bool { return quotaOf(w, "cm") == int64(quota) })
	}
}

// TestWatcherSymlinkedDir: the rules directory itself is a symlink that is
// swapped to another directory.
func TestWatcherSymlinkedDir(t *testing.T) {
	base := t.TempDir()
	for i, name := range []string{"v1", "v2"} {
		must(t, os.Mkdir(filepath.Join(base, name), 0o755))
		must(t, os.WriteFile(filepath.Join(base, name, "r.yaml"), []byte(ruleFile("sym", i+1)), 0o644))
	}
	link := filepath.Join(base, "current")
	must(t, os.Symlink("v1", link))
	w, events := startWatcher(t, link)
	if got := quotaOf(w, "sym"); got != 1 {
		t.Fatalf("initial quota = %d, want 1", got)
	}
	must(t, os.Symlink("v2", filepath.Join(base, "current.tmp")))
	must(t, os.Rename(filepath.Join(base, "current.tmp"), link))
	waitReload(t, events, true, func() bool { return quotaOf(w, "sym") == 2 })
}

func TestNewWatcherNeedsGoodRules(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte("domain: x\nbogus: 1\n"), 0o644))
	if _, err := New(dir, rules.Options{}, nil); err == nil || !strings.Contains(err.Error(), "bad.yaml:2: bogus: unknown key") {
		t.Errorf("New(bad rules) = %v, want the file's problem", err)
	}
	if _, err := New(filepath.Join(dir, "missing"), rules.Options{}, nil); err == nil {
		t.Error("New(missing dir) = nil error, want one")
	}
}

// TestCurrentIsNeverHalfAReload reloads continuously while readers check
// that every snapshot they hold is internally consistent and never changes
// under them.
func TestCurrentIsNeverHalfAReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.yaml")
	writeAtomic(t, path, ruleFile("r", 1))
	w, err := New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var reloads atomic.Int64
	w.OnReload = func(ok bool, err error) {
		if ok {
			reloads.Add(1)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
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
				a := s.Match("r", []rules.Entry{{Key: "a", Value: "1"}})
				b := s.Match("r", []rules.Entry{{Key: "b", Value: "1"}})
				if a == nil || b == nil || a.Limit.Quota != b.Limit.Quota {
					t.Errorf("inconsistent snapshot: a=%v b=%v", a, b)
					return
				}
				if again := s.Match("r", []rules.Entry{{Key: "a", Value: "1"}}); again != a {
					t.Errorf("a snapshot changed under its reader")
					return
				}
			}
		}()
	}
	for i := 2; i < 60; i++ {
		writeAtomic(t, path, ruleFile("r", i))
		if err := w.Reload(); err != nil {
			t.Fatalf("Reload: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if got := quotaOf(w, "r"); got != 59 || reloads.Load() != 58 {
		t.Errorf("after 58 reloads: quota %d, reloads %d; want 59, 58", got, reloads.Load())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWatcherDirectoryRemovedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rules")
	must(t, os.Mkdir(dir, 0o755))
	writeAtomic(t, filepath.Join(dir, "r.yaml"), ruleFile("gone", 1))
	w, events := startWatcher(t, dir)
	must(t, os.RemoveAll(dir))
	ev := waitReload(t, events, false, func() bool { return true })
	if ev.err == nil || quotaOf(w, "gone") != 1 {
		t.Fatalf("after removing the directory: err %v, quota %d; want an error and the last good quota 1", ev.err, quotaOf(w, "gone"))
	}
	must(t, os.Mkdir(dir, 0o755))
	writeAtomic(t, filepath.Join(dir, "r.yaml"), ruleFile("gone", 2))
	waitReload(t, events, true, func() bool { return quotaOf(w, "gone") == 2 })
	// Watched again: a later change is seen.
	writeAtomic(t, filepath.Join(dir, "r.yaml"), ruleFile("gone", 3))
	waitReload(t, events, true, func() bool { return quotaOf(w, "gone") == 3 })
}

// TestChangeBeforeRunIsSeen: New watches before it loads, so an edit made
// after New returned but before Run started (the gap a watch-after-load
// watcher loses) still reloads.
func TestChangeBeforeRunIsSeen(t *testing.T) {
	dir := t.TempDir()
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 1))
	w, err := New(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, filepath.Join(dir, "one.yaml"), ruleFile("one", 7))
	events := make(chan reloadEvent, 10)
	w.OnReload = func(ok bool, err error) { events <- reloadEvent{ok, err} }
	w.Debounce = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil after cancel", err)
		}
	}()
	waitReload(t, events, true, func() bool { return quotaOf(w, "one") == 7 })
}

// TestWatcherPrices: the price table (in a directory of its own) is
// reloaded with the rules when it changes; a bad table keeps the last
// good rules and prices in force, and a fixed one is taken up.
func TestWatcherPrices(t *testing.T) {
	dir, pdir := t.TempDir(), t.TempDir()
	prices := filepath.Join(pdir, "prices.yaml")
	table := func(input int) string {
		return fmt.Sprintf("currency: USD\nmodels:\n  m: {input: %d}\n", input)
	}
	writeAtomic(t, filepath.Join(dir, "r.yaml"), "domain: llm\ndescriptors:\n  - key: k\n    descriptors:\n      - key: model\n        descriptors:\n          - key: in\n            rate_limit: {usage: {model: model, input: in}, budget: \"5\", unit: day, settle: after}\n")
	writeAtomic(t, prices, table(100))
	w, events := startWatcherOpts(t, dir, rules.Options{PricesFile: prices})
	inputPrice := func() int64 {
		p, ok := w.Current().Prices().Price("m")
		if !ok {
			return -1
		}
		return p[rules.Input]
	}
	if got := inputPrice(); got != 100 {
		t.Fatalf("input price %d at start, want 100", got)
	}
	writeAtomic(t, prices, table(200))
	waitReload(t, events, true, func() bool { return inputPrice() == 200 })

	writeAtomic(t, prices, "currency: USD\nmodels:\n  m: {input: -1}\n")
	ev := waitReload(t, events, false, func() bool { return true })
	if ev.err == nil || !strings.Contains(ev.err.Error(), "prices.yaml:3: models.m.input") || w.LastError() == nil {
		t.Errorf("bad table: reload error %v, LastError %v; want the table's file:line", ev.err, w.LastError())
	}
	if got := inputPrice(); got != 200 {
		t.Errorf("input price %d after a bad table, want the last good 200", got)
	}
	writeAtomic(t, prices, table(300))
	waitReload(t, events, true, func() bool { return inputPrice() == 300 })
	if w.LastError() != nil {
		t.Errorf("LastError %v after a good table", w.LastError())
	}
}

// TestWatcherPricesConfigMap: a price table mounted from a ConfigMap of
// its own (a symlink through ..data, swapped by the kubelet) is reloaded
// when the swap happens.
func TestWatcherPricesConfigMap(t *testing.T) {
	dir, pdir := t.TempDir(), t.TempDir()
	writeAtomic(t, filepath.Join(dir, "r.yaml"), "domain: llm\ndescriptors:\n  - key: model\n    descriptors:\n      - key: in\n        rate_limit: {usage: {model: model, input: in}, budget: \"5\", unit: day, settle: after}\n")
	version := func(name string, input int) {
		t.Helper()
		must(t, os.Mkdir(filepath.Join(pdir, name), 0o755))
		must(t, os.WriteFile(filepath.Join(pdir, name, "prices.yaml"), fmt.Appendf(nil, "currency: USD\nmodels:\n  m: {input: %d}\n", input), 0o644))
	}
	version("..2026_01_01_00_00_00.1", 1)
	must(t, os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(pdir, "..data")))
	must(t, os.Symlink("..data/prices.yaml", filepath.Join(pdir, "prices.yaml")))
	w, events := startWatcherOpts(t, dir, rules.Options{PricesFile: filepath.Join(pdir, "prices.yaml")})
	input := func() int64 {
		p, ok := w.Current().Prices().Price("m")
		if !ok {
			return -1
		}
		return p[rules.Input]
	}
	if got := input(); got != 1 {
		t.Fatalf("input price %d at start, want 1", got)
	}
	version("..2026_01_01_00_01_00.2", 2)
	must(t, os.Symlink("..2026_01_01_00_01_00.2", filepath.Join(pdir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(pdir, "..data_tmp"), filepath.Join(pdir, "..data")))
	must(t, os.RemoveAll(filepath.Join(pdir, "..2026_01_01_00_00_00.1")))
	waitReload(t, events, true, func() bool { return input() == 2 })
}
