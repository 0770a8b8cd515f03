package redis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestEvictionPolicy: New refuses every maxmemory-policy but noeviction,
// naming the fix, unless AllowEviction accepts it (then Warnings says so).
func TestEvictionPolicy(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		policy string
		evicts bool
	}{
		{"noeviction", false},
		{"allkeys-lru", true}, {"allkeys-lfu", true}, {"allkeys-random", true},
		{"volatile-lru", true}, {"volatile-lfu", true}, {"volatile-random", true}, {"volatile-ttl", true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			if _, err := srv.Do("CONFIG", "SET", "maxmemory-policy", tc.policy); err != nil {
				t.Fatalf("CONFIG SET maxmemory-policy %s: %v", tc.policy, err)
			}
			if got := Evicts(tc.policy); got != tc.evicts {
				t.Errorf("Evicts(%q) = %v, want %v", tc.policy, got, tc.evicts)
			}
			s, err := New(Options{URL: srv.URL()})
			if !tc.evicts {
				if err != nil {
					t.Fatalf("New with %s = %v, want nil", tc.policy, err)
				}
				if w := s.Warnings(); len(w) != 0 {
					t.Errorf("Warnings with %s = %q, want none", tc.policy, w)
				}
				s.Close()
				return
			}
			if err == nil {
				s.Close()
				t.Fatalf("New with %s = nil error, want one wrapping ErrEvictionPolicy", tc.policy)
			}
			if !errors.Is(err, ErrEvictionPolicy) {
				t.Errorf("New with %s = %v, want it to wrap ErrEvictionPolicy", tc.policy, err)
			}
			for _, want := range []string{srv.Addr(), tc.policy, "CONFIG SET maxmemory-policy noeviction", "redis.conf", "AllowEviction"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("New with %s: error %q does not name %q", tc.policy, err, want)
				}
			}
			s, err = New(Options{URL: srv.URL(), AllowEviction: true})
			if err != nil {
				t.Fatalf("New with %s and AllowEviction = %v, want nil", tc.policy, err)
			}
			defer s.Close()
			if w := strings.Join(s.Warnings(), "\n"); !strings.Contains(w, tc.policy) || !strings.Contains(w, "AllowEviction") {
				t.Errorf("Warnings with %s and AllowEviction = %q, want the policy and AllowEviction named", tc.policy, w)
			}
		})
	}
}

// TestMemory reads what a node says about its memory and evictions.
func TestMemory(t *testing.T) {
	srv := redistest.StartArgs(t, "--maxmemory", "64mb", "--maxmemory-policy", "noeviction")
	s := newTestStore(t, srv.URL(), nil)
	ms := s.Memory(context.Background())
	if len(ms) != 1 {
		t.Fatalf("Memory = %+v, want one node", ms)
	}
	m := ms[0]
	if m.Node != srv.Addr() || m.Policy != "noeviction" || m.MaxMemory != 64<<20 || m.UsedMemory <= 0 || m.EvictedKeys != 0 || m.Err != nil {
		t.Errorf("Memory = %+v, want node %s, policy noeviction, maxmemory %d, used_memory > 0, evicted_keys 0, no error", m, srv.Addr(), 64<<20)
	}
}

// TestEvictionConfigRefused: a Redis that refuses CONFIG (a managed one
// may) still tells its policy in INFO memory, and an evicting one is
// refused; one that refuses INFO too is accepted with a warning naming
// what to check.
func TestEvictionConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		refused bool   // New fails with ErrEvictionPolicy
		warn    string // else Warnings holds this
		policy  string // Memory's Policy
	}{
		{"no CONFIG, allkeys-lru", []string{"--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", ""}, true, "", "allkeys-lru"},
		{"no CONFIG, noeviction", []string{"--rename-command", "CONFIG", ""}, false, "", "noeviction"},
		{"no CONFIG nor INFO, allkeys-lru", []string{"--maxmemory-policy", "allkeys-lru", "--rename-command", "CONFIG", "", "--rename-command", "INFO", ""},
			false, "cannot read maxmemory-policy", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartArgs(t, tc.args...)
			s, err := New(Options{URL: srv.URL()})
			if tc.refused {
				if !errors.Is(err, ErrEvictionPolicy) {
					t.Fatalf("New = %v, want an error wrapping ErrEvictionPolicy", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New = %v, want nil", err)
			}
			defer s.Close()
			w := strings.Join(s.Warnings(), "\n")
			if tc.warn == "" && w != "" {
				t.Errorf("Warnings = %q, want none", w)
			}
			if tc.warn != "" && (!strings.Contains(w, tc.warn) || !strings.Contains(w, "noeviction") || !strings.Contains(w, srv.Addr())) {
				t.Errorf("Warnings = %q, want %q naming the node and noeviction", w, tc.warn)
			}
			ms := s.Memory(context.Background())
			if len(ms) != 1 || ms[0].Policy != tc.policy {
				t.Fatalf("Memory = %+v, want one node with policy %q", ms, tc.policy)
			}
			if tc.policy == "" && (ms[0].Err == nil || ms[0].EvictedKeys != -1) {
				t.Errorf("Memory = %+v, want an error and evicted_keys -1 (unknown)", ms[0])
			}
		})
	}
}

// TestClusterCoverageWarning: on a Redis Cluster, New warns about every
// node with cluster-require-full-coverage yes, saying what it costs, and
// about none with no.
func TestClusterCoverageWarning(t *testing.T) {
	t.Parallel() // its own Cluster (it mostly waits for it to form)
	if testing.Short() {
		t.Skip("starts a Redis Cluster; skipped with -short")
	}
	c := redistest.StartCluster(t) // coverage no
	s, err := New(Options{URL: c.URL(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("Warnings with cluster-require-full-coverage no = %q, want none", w)
	}
	if ms := s.Memory(context.Background()); len(ms) != 3 {
		t.Errorf("Memory on a 3-master cluster = %d nodes, want 3: %+v", len(ms), ms)
	}
	s.Close()
	yes := c.Servers[1]
	if _, err := yes.Do("CONFIG", "SET", "cluster-require-full-coverage", "yes"); err != nil {
		t.Fatal(err)
	}
	s, err = New(Options{URL: c.URL(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	defer s.Close()
	w := strings.Join(s.Warnings(), "\n")
	if !strings.Contains(w, "cluster-require-full-coverage yes") || !strings.Contains(w, yes.Addr()) || !strings.Contains(w, "CLUSTERDOWN") ||
		strings.Contains(w, c.Servers[0].Addr()) || strings.Contains(w, c.Servers[2].Addr()) {
		t.Errorf("Warnings = %q, want cluster-require-full-coverage yes on %s alone, with its consequence (CLUSTERDOWN)", w, yes.Addr())
	}
}
