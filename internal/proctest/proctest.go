// Package proctest holds what the helpers that start real servers for tests
// (internal/redistest, internal/pgtest) share: skipping or failing when a
// binary is missing, picking free loopback ports, waiting for a started
// process to become ready, and building a command once for the tests that
// run it.
package proctest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TB is the part of testing.TB Missing uses.
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// Missing reports that binary, which the test needs, is absent. With the
// environment variable CI "true" it fails the test with notice, so that CI
// never passes by skipping the real-server tests. Otherwise it skips the
// test (the skip message, shown by go test -v, is notice), and tells the
// developer once: the first skip for binary in a go test run writes notice
// as one line to the terminal (/dev/tty, else stderr), because go test
// shows nothing of a passing package's output. notice names the binary,
// what is skipped and how to install it. Missing is safe for concurrent
// use.
func Missing(t TB, binary, notice string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(notice + " (CI=true: failing instead of skipping)")
		return
	}
	once, _ := announced.LoadOrStore(binary, new(sync.Once))
	once.(*sync.Once).Do(func() { announce(binary, notice) })
	t.Skip(notice)
}

// announced holds a *sync.Once per binary: one notice per test binary.
var announced sync.Map

// announce writes notice once per go test run: go test runs each package's
// test binary as a child of the go command, so the first binary of a run to
// create a marker file named by that parent (pid and start time) and binary
// writes the line, and the others, seeing the file, do not.
func announce(binary, notice string) {
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-missing-%s-%s", runID(), strings.Map(safe, binary)))
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return // another package of this run said it
		}
	} else {
		_ = f.Close()
	}
	out := noticeTo
	if out == nil {
		out = os.Stderr
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			defer tty.Close()
			out = tty
		}
	}
	fmt.Fprintln(out, notice)
}

// noticeTo, if set (by tests), receives the notices instead of the
// terminal.
var noticeTo io.Writer

// DiscardNotices makes Missing print no notice until t ends: for tests of
// the helpers themselves, which skip on made-up binaries. Not for parallel
// tests.
func DiscardNotices(t interface{ Cleanup(func()) }) {
	old := noticeTo
	noticeTo = io.Discard
	t.Cleanup(func() { noticeTo = old })
}

// runID names the go command running this test binary: its pid and, on
// Linux, its start time (so that a reused pid is another run).
func runID() string {
	pp := os.Getppid()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pp)); err == nil {
		// Field 22 is the start time; fields after the command (in
		// parentheses, which may hold spaces) are space-separated.
		if i := bytes.LastIndexByte(b, ')'); i >= 0 {
			if f := strings.Fields(string(b[i+1:])); len(f) > 19 {
				return fmt.Sprintf("%d-%s", pp, f[19])
			}
		}
	}
	return strconv.Itoa(pp)
}

func safe(r rune) rune {
	if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
		return r
	}
	return '_'
}

// portMu keeps concurrent FreePort calls in one process from picking the
// same port between choosing it and binding it.
var (
	portMu   sync.Mutex
	lastPort = map[int]bool{}
)

// FreePort returns a loopback port that is free now and that this process
// has not handed out before; port+offset is free too for every offset (a
// Redis Cluster node needs its bus port, port+10000). It is safe for
// concurrent use.
func FreePort(offsets ...int) (int, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find a free port: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if lastPort[p] || !free(p, offsets) {
			continue
		}
		lastPort[p] = true
		return p, nil
	}
	return 0, errors.New("no free port found")
}

func free(p int, offsets []int) bool {
	for _, o := range offsets {
		if p+o > 65535 {
			return false
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+o)))
		if err != nil {
			return false
		}
		_ = l.Close()
	}
	return true
}

// ErrExited is returned by WaitReady when the process exits before it is
// ready.
var ErrExited = errors.New("exited at start")

// WaitReady calls ready every interval until it returns nil (WaitReady
// returns nil), exited is closed (ErrExited), or timeout has passed (an
// error holding ready's last error).
func WaitReady(exited <-chan struct{}, timeout, interval time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			return ErrExited
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v (last: %w)", timeout, err)
		}
		time.Sleep(interval)
	}
}

// Binary is a Go command built once per test binary, for the tests that run
// it as its own processes. Pkg is the package to build ("./cmd/sluice"),
// Dir the directory go build runs in ("" for the test's own), Name the
// binary's file name (default: Pkg's last element). The zero
// value of the rest is ready; Path is safe for concurrent use. A test
// binary's TestMain calls Remove after m.Run.
type Binary struct {
	Pkg, Dir, Name string

	once sync.Once
	dir  string
	path string
	err  error
}

// Path builds the command the first time it is asked (without -race: the
// processes stand for production ones; through GoBuild) and returns the binary's path; a
// failed build fails t, then and every later time.
func (b *Binary) Path(t TB) string {
	t.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "sluice-bin-"); b.err != nil {
			return
		}
		name := b.Name
		if name == "" {
			name = filepath.Base(b.Pkg)
		}
		path := filepath.Join(b.dir, name)
		if out, err := GoBuild(b.Dir, "-o", path, b.Pkg); err != nil {
			b.err = fmt.Errorf("%s: %w\n%s", b.Pkg, err, out)
			return
		}
		b.path = path
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Remove deletes what Path built.
func (b *Binary) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// RaiseParallel sets go test's -parallel to perCPU × GOMAXPROCS when the
// command line does not set it (an explicit -parallel always wins), and
// returns the value in force. go test's default, GOMAXPROCS, suits tests
// that use a CPU each; a test binary whose parallel tests mostly wait (for
// servers to start, clusters to form, timeouts, breakers and late replies to
// pass) calls it from TestMain, before m.Run, so that the waits overlap with
// each other and with the tests that compute. Tests that must not share the
// machine (a load they measure, a latency they rely on) stay serial: go
// test runs them alone, before the parallel ones. perCPU below 1 counts as
// 1. It parses the command line (flag.Parse) if TestMain has not.
func RaiseParallel(perCPU int) int {
	if !flag.Parsed() {
		flag.Parse()
	}
	f := flag.Lookup("test.parallel")
	if f == nil {
		return 0 // not a test binary
	}
	set := false
	flag.Visit(func(v *flag.Flag) { set = set || v.Name == f.Name })
	if !set {
		_ = f.Value.Set(strconv.Itoa(max(perCPU, 1) * runtime.GOMAXPROCS(0)))
	}
	n, _ := strconv.Atoi(f.Value.String())
	return n
}

// ChildTB is the part of testing.T Alone uses.
type ChildTB interface {
	Helper()
	Name() string
	Parallel()
	Log(args ...any)
	Fatalf(format string, args ...any)
}

// childEnv names, in a child process Alone started, the test it runs.
const childEnv = "SLUICE_PROCTEST_ALONE"

// Alone lets a test that measures its whole process (its allocations, say)
// run in parallel with the others without sharing the process with them:
// in the test binary go test started, it marks t parallel, runs t's test
// (and nothing else) in a new process of the same binary with the same
// environment, logs that process's output, fails t if it failed, and
// returns false: the test returns at once. In that child process it
// returns true: the test does its work. A child that fails, or does not
// run the test (a name -test.run does not match), fails t. Top-level tests
// only.
func Alone(t ChildTB) bool {
	t.Helper()
	if os.Getenv(childEnv) == t.Name() {
		return true
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	t.Log("in a process of its own:\n" + string(out))
	ran := bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) || bytes.Contains(out, []byte("--- SKIP: "+t.Name()+" "))
	switch {
	case err != nil:
		t.Fatalf("%s in a process of its own: %v", t.Name(), err)
	case !ran:
		t.Fatalf("%s in a process of its own: it did not run", t.Name())
	}
	return false
}
