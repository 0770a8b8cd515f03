package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	if got, err := s.Do("SET", "k", "v"); err != nil || got != "OK" {
		t.Fatalf("SET = %v, %v; want OK, nil", got, err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET = %v, %v; want v, nil", got, err)
	}
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") {
		t.Fatalf("URL() = %q, want redis://127.0.0.1:port/0", s.URL())
	}

	s.Pause()
	// Do bounds each command by its own deadline: a paused server ends in a
	// timeout error, not a hang (a minute is the hang guard, not a bound).
	done := make(chan error, 1)
	go func() { _, err := Do(s.Addr(), "PING"); done <- err }()
	select {
	case err := <-done:
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("PING to a paused server = %v; want a timeout error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("PING to a paused server has not returned after a minute; want a timeout error")
	}
	s.Resume()
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("PING after Resume = %v, %v; want PONG", got, err)
	}

	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING to a killed server succeeded")
	}
	s.Restart()
	if got, err := s.Do("DBSIZE"); err != nil || got != int64(0) {
		t.Fatalf("DBSIZE after Restart = %v, %v; want 0 (a fresh server)", got, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t)
	if n := len(c.Addrs()); n != 3 {
		t.Fatalf("len(Addrs()) = %d, want 3", n)
	}
	r, err := c.Servers[0].Do("CLUSTER", "INFO")
	if err != nil {
		t.Fatal(err)
	}
	if info, _ := r.(string); !strings.Contains(info, "cluster_known_nodes:3") {
		t.Fatalf("CLUSTER INFO = %q, want cluster_known_nodes:3", info)
	}
	if u := c.URL(); strings.Count(u, "addr=") != 2 {
		t.Fatalf("URL() = %q, want two addr= parameters", u)
	}
}

func TestSentinel(t *testing.T) {
	m := Start(t)
	s := StartSentinel(t, m)
	r, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster")
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := r.([]any); len(got) != 2 || got[1] != strconv.Itoa(m.port) {
		t.Fatalf("SENTINEL GET-MASTER-ADDR-BY-NAME = %v, want [127.0.0.1 %d]", r, m.port)
	}
	if !strings.HasPrefix(s.SentinelURL(), "redis-sentinel://127.0.0.1:") {
		t.Fatalf("SentinelURL() = %q", s.SentinelURL())
	}
}

// recorder stands in for a test to see whether need skips or fails.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()           {}
func (r *recorder) Skip(args ...any)  { r.skipped = fmt.Sprint(args...) }
func (r *recorder) Fatal(args ...any) { r.failed = fmt.Sprint(args...) }

func TestMissingBinary(t *testing.T) {
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		r := &recorder{TB: t}
		proctest.DiscardNotices(t)
		need(r, "no-such-redis-server-binary")
		if ci == "true" && (r.failed == "" || r.skipped != "") {
			t.Errorf("CI=true: failed %q skipped %q, want a failure", r.failed, r.skipped)
		}
		if ci == "" && (r.skipped == "" || r.failed != "") {
			t.Errorf("CI unset: failed %q skipped %q, want a skip", r.failed, r.skipped)
		}
		if msg := r.failed + r.skipped; !strings.Contains(msg, "apt-get install") {
			t.Errorf("message %q does not say what to install", msg)
		}
	}
}

func TestStartProcess(t *testing.T) {
	need(t, "redis-server")
	srv, stop, err := StartProcess()
	if err != nil {
		t.Fatalf("StartProcess: %v", err)
	}
	if r, err := srv.Do("PING"); err != nil || r != "PONG" || srv.PID() == 0 {
		t.Errorf("PING = %v, %v (pid %d); want PONG from a running server", r, err, srv.PID())
	}
	stop()
	if _, err := Do(srv.Addr(), "PING"); err == nil {
		t.Errorf("PING after stop answered; want the server gone")
	}
}

// TestProxyDrop: Drop closes the connections open through the proxy (a
// client's next read fails) and the proxy goes on accepting new ones.
func TestProxyDrop(t *testing.T) {
	s := Start(t)
	p := StartProxy(t, s.Addr())
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING through the proxy: got %q, %v; want +PONG", line, err)
	}
	p.Drop()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Errorf("read after Drop: got no error, want the connection closed")
	}
	if got, err := Do(p.Addr(), "PING"); err != nil || got != "PONG" {
		t.Errorf("a new connection after Drop: got %v, %v; want PONG", got, err)
	}
}
