// Package proctest holds what the helpers that start real servers for tests
// (internal/redistest, internal/pgtest) share: skipping or failing when a
// binary is missing, picking free loopback ports, and waiting for a started
// process to become ready.
package proctest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// TB is the part of testing.TB Missing uses.
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// Missing reports that a binary the test needs is absent: it skips the test
// with msg, or fails it when the environment variable CI is "true", so that
// CI never passes by skipping the real-server tests.
func Missing(t TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: failing instead of skipping)")
		return
	}
	t.Skip(msg)
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
