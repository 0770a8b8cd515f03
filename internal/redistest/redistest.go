// Package redistest starts real redis-server processes for tests: a single
// node (Start) or a three-master Redis Cluster (StartCluster), each on free
// loopback ports in a temporary directory, without persistence, and stopped
// when the test ends. Programs outside go test (the benchmark harness) use
// StartProcess.
//
// Without redis-server (and, for clusters, redis-cli) on PATH the test is
// skipped with a message saying what to install, except when the environment
// variable CI is "true": then a missing binary fails the test, so that CI
// never passes by skipping the real-Redis tests.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// TB is the part of testing.TB this package uses; *testing.T and *testing.B
// satisfy it.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	Cleanup(f func())
	TempDir() string
}

// StartProcess starts a redis-server as Start does, for a program that is
// not a test: a failure (or a missing binary) is returned as an error, and
// stop kills the server and removes its directory. Use the Server's Addr,
// URL and PID only; its other methods report failures as to a test.
func StartProcess() (srv *Server, stop func(), err error) {
	st := &standalone{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv = Start(st)
	}()
	<-done
	if st.err != nil {
		st.close()
		return nil, nil, st.err
	}
	return srv, st.close, nil
}

// standalone is a TB outside go test: Fatal and Skip record the error and
// end the goroutine (StartProcess runs Start in one of its own), Cleanup
// and TempDir are undone by close.
type standalone struct {
	mu       sync.Mutex
	err      error
	cleanups []func()
}

func (*standalone) Helper() {}

func (s *standalone) Fatal(args ...any) { s.fail(errors.New(fmt.Sprint(args...))) }

func (s *standalone) Fatalf(format string, args ...any) { s.fail(fmt.Errorf(format, args...)) }

func (s *standalone) Skip(args ...any) { s.fail(errors.New(fmt.Sprint(args...))) }

func (s *standalone) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	runtime.Goexit()
}

func (s *standalone) Cleanup(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cleanups = append(s.cleanups, f)
}

func (s *standalone) TempDir() string {
	dir, err := os.MkdirTemp("", "redistest")
	if err != nil {
		s.Fatalf("redistest: %v", err)
	}
	s.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// close runs the cleanups, last first.
func (s *standalone) close() {
	s.mu.Lock()
	fs := s.cleanups
	s.cleanups = nil
	s.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 10 * time.Second

// need returns the path of binary, or skips (fails when CI=true) the test.
func need(t TB, binary string) string {
	t.Helper()
	p, err := exec.LookPath(binary)
	if err == nil {
		return p
	}
	proctest.Missing(t, binary, fmt.Sprintf("%s not found on PATH: the tests that need a real Redis are skipped (go test -v names them); install it (apt-get install -y redis-server redis-tools) or see .ci/run", binary))
	return ""
}

// Server is one redis-server process. Its methods are safe for concurrent
// use; Kill, Pause, Resume and Restart fail the test on error.
type Server struct {
	t    TB
	bin  string
	dir  string
	port int
	// tlsPort is the TLS port of a StartTLS server, else 0.
	tlsPort int
	extra   []string
	// sentinel is the config file of a Sentinel; empty for a data node.
	sentinel string
	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	paused   bool
}

// Start starts a redis-server on a free loopback port in a temporary
// directory, with persistence off (--save "" --appendonly no), and kills it
// when the test ends. It returns once the server answers PING.
func Start(t TB) *Server {
	t.Helper()
	bin := need(t, "redis-server")
	s := &Server{t: t, bin: bin, dir: t.TempDir(), port: freePort(t, false)}
	t.Cleanup(s.stop)
	s.start()
	return s
}

// StartArgs is Start with extra redis-server arguments after the helper's
// own, e.g. "--maxmemory-policy", "allkeys-lru" or "--rename-command",
// "CONFIG", "" (as a managed Redis that refuses CONFIG). Restart keeps them.
// The helper waits for PING, so PING must stay available.
func StartArgs(t TB, args ...string) *Server {
	t.Helper()
	bin := need(t, "redis-server")
	s := &Server{t: t, bin: bin, dir: t.TempDir(), port: freePort(t, false), extra: args}
	t.Cleanup(s.stop)
	s.start()
	return s
}

// StartTLS is Start with a TLS port beside the plain one (which the helper
// uses to see that the server answers): the server presents certFile and
// keyFile and, with requireClient, demands a client certificate signed by a
// CA in caFile (tls-auth-clients yes). It needs a redis-server built with
// TLS; one without is a test failure naming the cause.
func StartTLS(t TB, certFile, keyFile, caFile string, requireClient bool) *Server {
	t.Helper()
	bin := need(t, "redis-server")
	s := &Server{t: t, bin: bin, dir: t.TempDir(), port: freePort(t, false)}
	s.tlsPort = freePort(t, false)
	auth := "no"
	if requireClient {
		auth = "yes"
	}
	s.extra = []string{"--tls-port", strconv.Itoa(s.tlsPort), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", auth}
	t.Cleanup(s.stop)
	s.start()
	return s
}

// TLSAddr returns the host:port of a StartTLS server's TLS port.
func (s *Server) TLSAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort)) }

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// PID returns the process ID of the running server (0 when it is not).
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// URL returns redis://127.0.0.1:port/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

func (s *Server) start() {
	s.t.Helper()
	var args []string
	if s.sentinel != "" {
		args = append(args, s.sentinel, "--sentinel")
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "redis.log",
		"--protected-mode", "no",
	)
	if s.sentinel == "" {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, s.extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited, s.paused = cmd, exited, false
	s.mu.Unlock()
	err := proctest.WaitReady(exited, startTimeout, 10*time.Millisecond, func() error {
		r, err := s.Do("PING")
		if err == nil && r != "PONG" {
			err = fmt.Errorf("PING answered %v", r)
		}
		return err
	})
	if err != nil {
		s.t.Fatalf("redistest: redis-server on port %d: %v; log:\n%s", s.port, err, s.log())
	}
}

func (s *Server) log() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	return string(b)
}

// Kill stops the server with SIGKILL (as a crash would) and waits for it to
// exit. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	if s.paused {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
	<-s.exited
	s.cmd, s.paused = nil, false
}

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// answers, as with a hung Redis.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP, true) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT, false) }

func (s *Server) signal(sig syscall.Signal, paused bool) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %v: server on port %d is not running", sig, s.port)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v to redis-server: %v", sig, err)
	}
	s.paused = paused
}

// Restart kills the server if it runs and starts a new, empty one on the
// same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

func (s *Server) stop() { s.Kill() }

// Do sends one command to the server on a new connection and returns its
// reply: string for simple and bulk strings, int64 for integers, nil for a
// null, []any for arrays; a Redis error reply is returned as an error. It
// gives up after 2 seconds.
func (s *Server) Do(args ...string) (any, error) {
	return Do(s.Addr(), args...)
}

// Do sends one command to the Redis server at addr on a new connection and
// returns its reply, as Server.Do does.
func Do(addr string, args ...string) (any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	dl, _ := ctx.Deadline()
	_ = c.SetDeadline(dl)
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return nil, err
	}
	return readReply(bufio.NewReader(c))
}

// ReplyError is an error reply from Redis.
type ReplyError string

func (e ReplyError) Error() string { return "redis: " + string(e) }

func readReply(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, ReplyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("redistest: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("redistest: bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readReply(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redistest: unexpected reply %q", line)
}

// StartSentinel starts one Redis Sentinel on a free loopback port that
// monitors master under the name "mymaster" (quorum 1), and stops it when
// the test ends. Its URL is redis-sentinel://127.0.0.1:port/mymaster.
func StartSentinel(t TB, master *Server) *Server {
	t.Helper()
	bin := need(t, "redis-server")
	s := &Server{t: t, bin: bin, dir: t.TempDir(), port: freePort(t, false)}
	conf := filepath.Join(s.dir, "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor mymaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds mymaster 2000\n", master.port)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		t.Fatalf("redistest: write sentinel.conf: %v", err)
	}
	s.sentinel = conf
	t.Cleanup(s.stop)
	s.start()
	return s
}

// SentinelURL returns redis-sentinel://127.0.0.1:port/mymaster for a server
// started by StartSentinel.
func (s *Server) SentinelURL() string { return "redis-sentinel://" + s.Addr() + "/mymaster" }

// Cluster is a three-master Redis Cluster, with replicas when started by
// StartClusterWith.
type Cluster struct {
	// Servers are the masters, in the order given to redis-cli.
	Servers []*Server
	// Replicas are the replicas (StartClusterWith), in no particular order.
	Replicas []*Server
}

// ClusterOptions configure StartClusterWith. The zero value is
// StartCluster's cluster.
type ClusterOptions struct {
	// Replicas is the number of replicas of each master (0: none).
	Replicas int
	// RequireFullCoverage sets cluster-require-full-coverage yes (Redis's
	// default): while a slot has no master, every node refuses commands.
	// False sets it to no.
	RequireFullCoverage bool
	// NodeTimeout is cluster-node-timeout: how long a master may not
	// answer before it is failed over. Default 2s.
	NodeTimeout time.Duration
}

// StartCluster starts three redis-server processes with cluster mode on
// (cluster-require-full-coverage no: a node down leaves the others
// serving), joins them with redis-cli --cluster create, waits until every node reports
// cluster_state:ok, and stops them when the test ends.
func StartCluster(t TB) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterOptions{})
}

// StartClusterWith is StartCluster with three masters and opts.Replicas
// replicas each; it returns once every node reports cluster_state:ok and
// every replica is in sync with its master.
func StartClusterWith(t TB, opts ClusterOptions) *Cluster {
	t.Helper()
	bin := need(t, "redis-server")
	cli := need(t, "redis-cli")
	coverage := "no"
	if opts.RequireFullCoverage {
		coverage = "yes"
	}
	timeout := opts.NodeTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	var all []*Server
	for range 3 * (1 + opts.Replicas) {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), port: freePort(t, true),
			// Without full coverage required, the masters left serve their
			// slots while one is down (as a rate limiter's cluster should be
			// configured: see docs/operations.md).
			extra: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
				"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
				"--cluster-require-full-coverage", coverage}}
		t.Cleanup(s.stop)
		s.start()
		all = append(all, s)
	}
	addrs := make([]string, len(all))
	for i, s := range all {
		addrs[i] = s.Addr()
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(opts.Replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c := &Cluster{}
	deadline := time.Now().Add(startTimeout + time.Duration(opts.Replicas)*startTimeout)
	for _, s := range all {
		for {
			r, err := s.Do("CLUSTER", "INFO")
			info, _ := r.(string)
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok within %v: %v %v", s.Addr(), startTimeout, info, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for _, s := range all {
		for {
			role, synced := s.role()
			if role == "master" {
				c.Servers = append(c.Servers, s)
				break
			}
			if role == "slave" && synced {
				c.Replicas = append(c.Replicas, s)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s: role %q, in sync %v within %v", s.Addr(), role, synced, startTimeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if len(c.Servers) != 3 {
		t.Fatalf("redistest: cluster has %d masters, want 3", len(c.Servers))
	}
	return c
}

// role returns the server's ROLE ("master" or "slave") and, for a
// replica, whether it is connected to its master and in sync.
func (s *Server) role() (string, bool) {
	r, err := s.Do("ROLE")
	a, _ := r.([]any)
	if err != nil || len(a) == 0 {
		return "", false
	}
	role, _ := a[0].(string)
	if role == "slave" && len(a) >= 4 {
		st, _ := a[3].(string)
		return role, st == "connected"
	}
	return role, false
}

// Addrs returns the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr()
	}
	return out
}

// URL returns the cluster as one URL: the first node in the host and the
// others as addr parameters, redis://127.0.0.1:p1?addr=127.0.0.1:p2&addr=….
// store/redis accepts this form (and discovers the topology from any node).
func (c *Cluster) URL() string {
	a := c.Addrs()
	var b strings.Builder
	b.WriteString("redis://" + a[0])
	for i, x := range a[1:] {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("addr=" + x)
	}
	return b.String()
}

// freePort returns a loopback port that is free now; with bus, port+10000
// (the cluster bus) is free too.
func freePort(t TB, bus bool) int {
	t.Helper()
	var offsets []int
	if bus {
		offsets = append(offsets, 10000)
	}
	p, err := proctest.FreePort(offsets...)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return p
}
