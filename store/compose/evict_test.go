package compose

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/redis"
)

// logBuffer collects a logger's lines from many goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// TestEvictionRefused: a Redis whose policy evicts fails New even with
// Background (a configuration to fix, not an outage to wait out), naming
// the fix; with AllowEviction the stack starts and logs the accepted risk.
func TestEvictionRefused(t *testing.T) {
	srv := redistest.StartArgs(t, "--maxmemory-policy", "volatile-lru")
	c := stackConfig(srv.URL(), nil, DeniedAuto)
	c.Background = true
	s, err := New(c)
	if err == nil {
		s.Close()
		t.Fatal("New over a volatile-lru Redis = nil error, want a refusal")
	}
	if !errors.Is(err, redis.ErrEvictionPolicy) || !strings.Contains(err.Error(), "CONFIG SET maxmemory-policy noeviction") {
		t.Errorf("New = %v, want an error wrapping redis.ErrEvictionPolicy that names CONFIG SET maxmemory-policy noeviction", err)
	}
	var logs logBuffer
	c.Redis.AllowEviction, c.Logger = true, logs.logger()
	st := newStack(t, c)
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "volatile-lru") || !strings.Contains(got, "AllowEviction") {
		t.Errorf("log = %q, want a warning naming volatile-lru and AllowEviction", got)
	}
	ev := waitEviction(t, st, func(e Eviction) bool { return !e.Checked.IsZero() })
	if len(ev.Nodes) != 1 || ev.Nodes[0].Policy != "volatile-lru" || !ev.Nodes[0].Evicts || !ev.Allowed || !ev.Nodes[0].Known {
		t.Errorf("Eviction() = %+v, want one node, volatile-lru, evicting, allowed, known", ev)
	}
}

// waitEviction polls the stack's Eviction until ok says it is what the
// test waits for, or fails after a generous deadline.
func waitEviction(t *testing.T, st *Stack, ok func(Eviction) bool) Eviction {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		e := st.Eviction()
		if ok(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("Eviction() = %+v after 30s, not what the test waits for", e)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEvictionWatched: with an evicting policy accepted, a flood of
// unique keys that fills Redis's memory makes it evict; the watcher counts
// the evictions (Eviction) and logs a warning.
func TestEvictionWatched(t *testing.T) {
	srv := redistest.StartArgs(t, "--maxmemory-policy", "allkeys-lru")
	var logs logBuffer
	c := stackConfig(srv.URL(), nil, DeniedOff)
	c.Redis.AllowEviction, c.Logger, c.MemoryWatch = true, logs.logger(), 50*time.Millisecond
	st := newStack(t, c)
	waitEviction(t, st, func(e Eviction) bool { return !e.Checked.IsZero() })
	setMaxMemory(t, srv, 2<<20)
	l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 100, Window: time.Hour}
	ctx := context.Background()
	ops := make([]sluice.Op, 100)
	res := make([]sluice.Result, len(ops))
	var keys int
	for st.Eviction().Evicted() == 0 {
		if keys > 1_000_000 {
			t.Fatalf("no eviction counted after %d unique keys; Eviction() = %+v", keys, st.Eviction())
		}
		for i := range ops {
			ops[i] = sluice.Op{Key: "flood:" + strconv.Itoa(keys), Limit: l, Cost: 1}
			keys++
		}
		if err := st.Take(ctx, ops, res); err != nil {
			t.Fatalf("Take after %d keys: %v (allkeys-lru never refuses a write)", keys, err)
		}
	}
	ev := st.Eviction()
	t.Logf("%d unique keys written; %d evictions counted", keys, ev.Evicted())
	info, err := srv.Do("INFO", "stats")
	if err != nil {
		t.Fatal(err)
	}
	if n := infoValue(t, info, "evicted_keys"); uint64(n) < ev.Evicted() {
		t.Errorf("counted %d evictions, but the node says evicted_keys:%d", ev.Evicted(), n)
	}
	if got := logs.String(); !strings.Contains(got, "Redis evicted keys") || !strings.Contains(got, "node="+srv.Addr()) {
		t.Errorf("log = %q, want a warning that Redis evicted keys, naming the node", got)
	}
}

// TestEvictionPolicyChanged: a policy changed to an evicting one after
// the stack connected (CONFIG SET, a failover to a node configured
// otherwise) is logged as an error, once while it stays.
func TestEvictionPolicyChanged(t *testing.T) {
	srv := redistest.Start(t)
	var logs logBuffer
	c := stackConfig(srv.URL(), nil, DeniedOff)
	c.Logger, c.MemoryWatch = logs.logger(), 20*time.Millisecond
	st := newStack(t, c)
	waitEviction(t, st, func(e Eviction) bool { return len(e.Nodes) == 1 && e.Nodes[0].Policy == "noeviction" })
	if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", "allkeys-random"); err != nil {
		t.Fatal(err)
	}
	waitEviction(t, st, func(e Eviction) bool { return e.Nodes[0].Policy == "allkeys-random" })
	checked := st.Eviction().Checked
	waitEviction(t, st, func(e Eviction) bool { return e.Checked.After(checked.Add(100 * time.Millisecond)) })
	if n := strings.Count(logs.String(), "now evicts Sluice's keys"); n != 1 {
		t.Errorf("log has %d errors about the policy, want 1:\n%s", n, logs.String())
	}
	if got := logs.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, "allkeys-random") {
		t.Errorf("log = %q, want an error naming allkeys-random", got)
	}
}

// setMaxMemory sets the server's maxmemory to its used_memory now plus
// extra bytes.
func setMaxMemory(t *testing.T, srv *redistest.Server, extra int64) {
	t.Helper()
	info, err := srv.Do("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	used := infoValue(t, info, "used_memory")
	if _, err := srv.Do("CONFIG", "SET", "maxmemory", strconv.FormatInt(used+extra, 10)); err != nil {
		t.Fatal(err)
	}
}

// infoValue returns the integer field name of an INFO reply.
func infoValue(t *testing.T, info any, name string) int64 {
	t.Helper()
	s, _ := info.(string)
	for line := range strings.Lines(s) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %q: %v", name, v, err)
			}
			return n
		}
	}
	t.Fatalf("INFO has no %s: %s", name, fmt.Sprint(info))
	return 0
}
