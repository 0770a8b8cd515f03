// Package pgtest starts real PostgreSQL servers for tests: initdb once per
// test binary into a template directory, then one postgres process per Start
// on a free loopback port, without fsync (test data need not survive a
// power cut, but commits do survive Kill, a process crash), stopped when the
// test ends.
//
// The binaries come from Debian's postgresql package
// (/usr/lib/postgresql/<version>/bin, the newest version first) or PATH.
// PostgreSQL refuses to run as root, so when the test runs as root the
// server runs as the "postgres" user the package creates.
//
// Without the binaries the test is skipped with a message saying what to
// install, except when the environment variable CI is "true": then it fails,
// so that CI never passes by skipping the PostgreSQL tests.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 30 * time.Second

// binDir finds the directory holding initdb and postgres, or "".
func binDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if exe(filepath.Join(d, "initdb")) && exe(filepath.Join(d, "postgres")) {
			return d
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if d := filepath.Dir(p); exe(filepath.Join(d, "postgres")) {
			return d
		}
	}
	return ""
}

func version(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

func exe(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// need returns the binary directory, or skips (fails when CI=true) the test.
func need(t testing.TB) string {
	t.Helper()
	if d := binDir(); d != "" {
		return d
	}
	proctest.Missing(t, "postgres", "PostgreSQL (initdb, postgres) not found in /usr/lib/postgresql/*/bin or on PATH: the tests that need a real PostgreSQL are skipped (go test -v names them); install it (apt-get install -y postgresql) or see .ci/run")
	return ""
}

// template is the initdb output every server of this test binary copies.
var template struct {
	once sync.Once
	dir  string
	cred *syscall.Credential
	err  error
}

// credential returns who the server must run as: nil for the current user,
// or the postgres user when running as root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: %w (create a postgres user)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// mkdir makes a directory the server's user owns, mode 0700.
func mkdir(cred *syscall.Credential, pattern string) (string, error) {
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(d, int(cred.Uid), int(cred.Gid)); err != nil {
			return "", err
		}
	}
	return d, nil
}

// initTemplate runs initdb once per machine and PostgreSQL version into
// a directory under the temporary directory that later runs reuse (it is
// built beside its final name and renamed into place, so concurrent test
// binaries never see half of it).
func initTemplate(bin string) {
	template.cred, template.err = credential()
	if template.err != nil {
		return
	}
	final := filepath.Join(os.TempDir(), fmt.Sprintf("sluice-pgtest-template-%d-%d", version(bin), os.Geteuid()))
	if st, err := os.Stat(filepath.Join(final, "PG_VERSION")); err == nil && st.Mode().IsRegular() {
		template.dir = final
		return
	}
	dir, err := mkdir(template.cred, "sluice-pgtest-initdb-")
	if err != nil {
		template.err = err
		return
	}
	defer os.RemoveAll(dir)
	data := filepath.Join(dir, "data")
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "sluice", "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: template.cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		template.err = fmt.Errorf("initdb: %w\n%s", err, out)
		return
	}
	if err := os.Rename(data, final); err != nil {
		if _, serr := os.Stat(filepath.Join(final, "PG_VERSION")); serr != nil {
			template.err = fmt.Errorf("initdb: %w", err)
			return
		}
	}
	template.dir = final
}

// Server is one postgres process. Its methods are safe for concurrent use;
// Kill, Stop and Start fail the test on error.
type Server struct {
	t    testing.TB
	bin  string
	root string // owned by the server's user; data and socket below
	port int
	cred *syscall.Credential

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	dbs    atomic.Int64
}

// Start starts a PostgreSQL server on a free loopback port in a temporary
// directory and stops it when the test ends. It returns once the server
// accepts connections. The superuser is "sluice", with trust
// authentication on loopback.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := need(t)
	template.once.Do(func() { initTemplate(bin) })
	if template.err != nil {
		t.Fatalf("pgtest: %v", template.err)
	}
	root, err := mkdir(template.cred, "pgtest-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	s := &Server{t: t, bin: bin, root: root, port: freePort(t), cred: template.cred}
	t.Cleanup(func() {
		s.kill()
		_ = os.RemoveAll(root)
	})
	// cp -a keeps the owner and modes postgres insists on.
	if out, err := exec.Command("cp", "-a", template.dir, s.data()).CombinedOutput(); err != nil {
		t.Fatalf("pgtest: copy template: %v\n%s", err, out)
	}
	s.Start()
	return s
}

func (s *Server) data() string { return filepath.Join(s.root, "data") }

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL returns the URL of database db ("postgres" if empty).
func (s *Server) URL(db string) string {
	if db == "" {
		db = "postgres"
	}
	return "postgres://sluice@" + s.Addr() + "/" + db + "?sslmode=disable"
}

// NewDatabase creates an empty database and returns its URL, so tests can
// share one server without sharing data.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	name := fmt.Sprintf("t%d", s.dbs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, s.URL(""))
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	return s.URL(name)
}

// Start starts the server again after Kill or Stop (a crash recovery after
// Kill). Starting a running server fails the test.
func (s *Server) Start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		s.t.Fatal("pgtest: Start: already running")
	}
	logf, err := os.OpenFile(filepath.Join(s.root, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatalf("pgtest: %v", err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"),
		"-D", s.data(),
		"-p", strconv.Itoa(s.port),
		"-k", s.root, // the Unix socket, away from /var/run/postgresql
		"-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "max_connections=100",
		"-c", "shared_buffers=16MB",
	)
	cmd.Dir = s.root
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("pgtest: start postgres: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited

	err = proctest.WaitReady(exited, startTimeout, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, s.URL(""))
		if err == nil {
			_ = c.Close(ctx)
		}
		return err
	})
	if errors.Is(err, proctest.ErrExited) {
		s.cmd = nil
	}
	if err != nil {
		s.t.Fatalf("pgtest: postgres on port %d: %v; log:\n%s", s.port, err, s.log())
	}
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.root, "postgres.log"))
	return string(b)
}

// Kill stops the server and its backends with SIGKILL, as a crash would,
// and waits for them to exit. Killing a stopped server does
// nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalLocked(syscall.SIGKILL)
}

// Stop shuts the server down cleanly (fast shutdown: open sessions are
// ended) and waits for it.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.signalLocked(syscall.SIGINT)
}

func (s *Server) kill() { s.Kill() }

func (s *Server) signalLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	var kids []int
	if sig == syscall.SIGKILL {
		// Every backend makes itself a session leader, so signalling the
		// postmaster's group does not reach them: kill each child, as a
		// crash would, or a restart finds their shared memory in use.
		kids = children(pid)
		for _, k := range kids {
			_ = syscall.Kill(k, sig)
		}
	}
	_ = s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(startTimeout):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	waitGone(kids)
	s.cmd = nil
}

// children returns the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, d := range dirs {
		if ppid, _, ok := procStat(d); ok && ppid == pid {
			k, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
			out = append(out, k)
		}
	}
	return out
}

// procStat reads the parent and state of /proc/<pid>/stat.
func procStat(path string) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	i := strings.LastIndexByte(string(b), ')') // the command may hold spaces
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return ppid, f[0][0], err == nil
}

// waitGone waits (bounded) until every pid has exited (a zombie counts as
// exited: it holds no shared memory).
func waitGone(pids []int) {
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for time.Now().Before(deadline) {
			_, state, ok := procStat(fmt.Sprintf("/proc/%d/stat", p))
			if !ok || state == 'Z' {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// freePort returns a loopback port that was free a moment ago and that this
// process has not handed out before.
func freePort(t testing.TB) int {
	t.Helper()
	p, err := proctest.FreePort()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return p
}

// Exec runs sql on database db of the server (for tests that set up state
// behind the code under test's back).
func (s *Server) Exec(t testing.TB, url, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("pgtest: %s: %v", strings.TrimSpace(sql), err)
	}
}
