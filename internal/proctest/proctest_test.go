package proctest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		p, err := FreePort(1)
		if err != nil {
			t.Fatalf("FreePort: got error %v, want nil", err)
		}
		if seen[p] {
			t.Fatalf("FreePort: got port %d twice, want a new port each call", p)
		}
		seen[p] = true
	}
}

func TestWaitReady(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	notReady := errors.New("not yet")
	tests := []struct {
		name    string
		exited  chan struct{}
		readyAt int // the call that succeeds; 0: never
		want    func(error) bool
	}{
		{"ready at once", make(chan struct{}), 1, func(err error) bool { return err == nil }},
		{"ready at the third try", make(chan struct{}), 3, func(err error) bool { return err == nil }},
		{"exited", closed, 0, func(err error) bool { return errors.Is(err, ErrExited) }},
		{"timeout", make(chan struct{}), 0, func(err error) bool { return errors.Is(err, notReady) && !errors.Is(err, ErrExited) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			// Ready cases get a minute (a loaded machine is slow); the
			// case that never gets ready times out after 20ms.
			timeout := time.Minute
			if tt.readyAt == 0 {
				timeout = 20 * time.Millisecond
			}
			err := WaitReady(tt.exited, timeout, time.Millisecond, func() error {
				calls++
				if calls == tt.readyAt {
					return nil
				}
				return notReady
			})
			if !tt.want(err) {
				t.Errorf("WaitReady: got %v after %d calls", err, calls)
			}
		})
	}
}

// fakeTB records what Missing does with a test.
type fakeTB struct{ fatal, skip []string }

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Fatal(args ...any) { f.fatal = append(f.fatal, fmt.Sprint(args...)) }
func (f *fakeTB) Skip(args ...any)  { f.skip = append(f.skip, fmt.Sprint(args...)) }

// TestMissing: outside CI every test needing an absent binary is skipped
// with the notice, and the notice is printed once per binary, however many
// tests skip; with CI=true each such test fails.
func TestMissing(t *testing.T) {
	var out bytes.Buffer
	noticeTo = &out
	t.Cleanup(func() { noticeTo = nil })
	bin := fmt.Sprintf("no-such-binary-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		_ = os.Remove(filepath.Join(os.TempDir(), "sluice-missing-"+runID()+"-"+bin))
	})
	notice := bin + " not found: the tests that need it are skipped"

	t.Setenv("CI", "")
	var tbs [3]fakeTB
	var wg sync.WaitGroup
	for i := range tbs {
		wg.Go(func() { Missing(&tbs[i], bin, notice) })
	}
	wg.Wait()
	Missing(&tbs[0], "other-"+bin, "other "+notice)
	t.Cleanup(func() {
		_ = os.Remove(filepath.Join(os.TempDir(), "sluice-missing-"+runID()+"-other-"+bin))
	})
	for i, tb := range tbs {
		if len(tb.fatal) != 0 || len(tb.skip) == 0 || tb.skip[0] != notice {
			t.Errorf("test %d without CI: fatal %q, skip %q; want skipped with %q", i, tb.fatal, tb.skip, notice)
		}
	}
	if got, want := out.String(), notice+"\nother "+notice+"\n"; got != want {
		t.Errorf("notices printed: %q, want each binary's once: %q", got, want)
	}

	t.Setenv("CI", "true")
	var ci fakeTB
	Missing(&ci, bin, notice)
	if len(ci.fatal) != 1 || !strings.Contains(ci.fatal[0], notice) || len(ci.skip) != 0 {
		t.Errorf("with CI=true: fatal %q, skip %q; want the test failed with the notice", ci.fatal, ci.skip)
	}
}

// TestRaiseParallel: without -parallel on the command line the value
// becomes perCPU × GOMAXPROCS (perCPU at least 1); with it, it stays.
func TestRaiseParallel(t *testing.T) {
	f := flag.Lookup("test.parallel")
	old := f.Value.String()
	t.Cleanup(func() { _ = f.Value.Set(old) })
	explicit := false
	flag.Visit(func(v *flag.Flag) { explicit = explicit || v.Name == "test.parallel" })
	procs := runtime.GOMAXPROCS(0)
	for _, tt := range []struct{ perCPU, want int }{{3, 3 * procs}, {1, procs}, {0, procs}, {-2, procs}} {
		want := strconv.Itoa(tt.want)
		if explicit {
			want = old
		}
		if got := RaiseParallel(tt.perCPU); strconv.Itoa(got) != want || f.Value.String() != want {
			t.Errorf("RaiseParallel(%d) = %d, -parallel %s; want %s (explicit -parallel: %v)", tt.perCPU, got, f.Value.String(), want, explicit)
		}
	}
}

// TestAlone runs in a process of its own: there, it is the only test the
// process runs.
func TestAlone(t *testing.T) {
	if !Alone(t) {
		return
	}
	if got := os.Getenv(childEnv); got != t.Name() {
		t.Errorf("%s = %q in the child, want %q", childEnv, got, t.Name())
	}
}

// TestAloneChildFails only fails, and only in a child Alone started for it.
func TestAloneChildFails(t *testing.T) {
	if os.Getenv(childEnv) != t.Name() {
		t.Skip("only in the child TestAloneReportsChild starts")
	}
	t.Error("failing on purpose")
}

// fakeChildTB records what Alone reports.
type fakeChildTB struct {
	name     string
	parallel bool
	logs     []string
	fatal    string
}

func (*fakeChildTB) Helper()                             {}
func (f *fakeChildTB) Name() string                      { return f.name }
func (f *fakeChildTB) Parallel()                         { f.parallel = true }
func (f *fakeChildTB) Log(args ...any)                   { f.logs = append(f.logs, fmt.Sprint(args...)) }
func (f *fakeChildTB) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

// TestAloneReportsChild: a child that fails, or runs no test, fails the
// parent; one that passes does not.
func TestAloneReportsChild(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("not in a child")
	}
	for _, tt := range []struct {
		name, fatal string
	}{
		{"TestAloneChildFails", "exit status 1"},
		{"TestNoSuchTest", "it did not run"},
		{"TestFreePortNeverRepeats", ""},
	} {
		f := &fakeChildTB{name: tt.name}
		if Alone(f) {
			t.Fatalf("Alone(%s) = true in the parent", tt.name)
		}
		if !f.parallel {
			t.Errorf("Alone(%s) did not mark the test parallel", tt.name)
		}
		if tt.fatal == "" && f.fatal != "" || tt.fatal != "" && !strings.Contains(f.fatal, tt.fatal) {
			t.Errorf("Alone(%s) failed the test with %q, want %q", tt.name, f.fatal, tt.fatal)
		}
	}
}
