package redis

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
)

// TestClusterFailoverCoverage measures what cluster-require-full-coverage
// costs a rate limiter. A master of a three-master cluster with one
// replica each is killed; its replica takes over after cluster-node-timeout
// (1s here) and an election. Meanwhile Takes of a key on a healthy master
// are counted: with yes (Redis's default) the healthy masters refuse them
// too (CLUSTERDOWN), so every limit goes to its failure mode for the
// failover's length; with no they answer throughout, and only the failed
// master's keys fail. The durations are logged, not asserted (a loaded
// host stretches them). The two clusters are separate processes on
// separate ports and the test mostly waits for the failover, so the two
// settings run side by side.
func TestClusterFailoverCoverage(t *testing.T) {
	t.Parallel() // its own Clusters; it mostly waits for the failovers
	if testing.Short() {
		t.Skip("starts two six-node Redis Clusters and fails a master over in each; skipped with -short")
	}
	for _, yes := range []bool{true, false} {
		t.Run("require-full-coverage="+strconv.FormatBool(yes), func(t *testing.T) {
			t.Parallel()
			c := redistest.StartClusterWith(t, redistest.ClusterOptions{Replicas: 1, RequireFullCoverage: yes, NodeTimeout: time.Second})
			s, err := New(Options{URL: c.URL(), Timeout: 500 * time.Millisecond, Prefix: "cov:"})
			if err != nil {
				t.Fatalf("New = %v", err)
			}
			defer s.Close()
			warned := strings.Contains(strings.Join(s.Warnings(), "\n"), "cluster-require-full-coverage yes")
			if warned != yes {
				t.Errorf("Warnings = %q: warned about full coverage %v, want %v", s.Warnings(), warned, yes)
			}
			dead, healthy := c.Servers[0], c.Servers[1]
			keyOn := func(addr string) string {
				t.Helper()
				for i := range 100000 {
					k := "k" + strconv.Itoa(i)
					if n := s.nodeFor(slotOf(redisKey(s.prefix, sluice.FixedWindow, k))); n.addr.Load() != nil && *n.addr.Load() == addr {
						return k
					}
				}
				t.Fatalf("no key on %s", addr)
				return ""
			}
			onHealthy, onDead := keyOn(healthy.Addr()), keyOn(dead.Addr())
			l := sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 1 << 30, Window: time.Hour}
			take := func(key string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				return s.Take(ctx, []sluice.Op{{Key: key, Limit: l, Cost: 1}}, make([]sluice.Result, 1))
			}
			for _, k := range []string{onHealthy, onDead} {
				if err := take(k); err != nil {
					t.Fatalf("Take %s before the failover: %v", k, err)
				}
			}

			killed := time.Now()
			dead.Kill()
			var (
				healthyFailed, deadFailed int
				firstFail, lastFail       time.Time
				promoted                  time.Time
				clusterDown               bool
			)
			deadline := killed.Add(60 * time.Second)
			for time.Now().Before(deadline) {
				if err := take(onHealthy); err != nil {
					healthyFailed++
					if firstFail.IsZero() {
						firstFail = time.Now()
					}
					lastFail = time.Now()
					clusterDown = clusterDown || strings.Contains(err.Error(), "CLUSTERDOWN")
				}
				if take(onDead) != nil {
					deadFailed++
				}
				if promoted.IsZero() {
					for _, r := range c.Replicas {
						if v, err := r.Do("ROLE"); err == nil && v.([]any)[0] == "master" {
							promoted = time.Now()
						}
					}
				}
				// Done once a replica took over, every surviving master
				// sees the cluster whole again (so no more CLUSTERDOWN is
				// to come), and both keys answer (the client followed the
				// new master): a state, not a time.
				if !promoted.IsZero() && clusterOK(c.Servers[1:]) && take(onHealthy) == nil && take(onDead) == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if promoted.IsZero() {
				t.Fatalf("no replica took over within 60s of killing %s", dead.Addr())
			}
			healthyLog := "never"
			if !firstFail.IsZero() {
				healthyLog = "from +" + firstFail.Sub(killed).Round(time.Millisecond).String() + " for " + lastFail.Sub(firstFail).Round(time.Millisecond).String()
			}
			t.Logf("replica promoted %v after the kill; Takes on a healthy master failed %d times (%s; CLUSTERDOWN seen: %v); on the dead master's slot %d times",
				promoted.Sub(killed).Round(time.Millisecond), healthyFailed, healthyLog, clusterDown, deadFailed)
			if deadFailed == 0 {
				t.Errorf("no Take on the killed master's slot failed: the failover was not observed")
			}
			switch {
			case yes && (healthyFailed == 0 || !clusterDown):
				t.Errorf("with cluster-require-full-coverage yes: %d failures on a healthy master (CLUSTERDOWN seen: %v), want some with CLUSTERDOWN", healthyFailed, clusterDown)
			case !yes && healthyFailed != 0:
				t.Errorf("with cluster-require-full-coverage no: %d failures on a healthy master, want none", healthyFailed)
			}
		})
	}
}

// clusterOK reports whether every one of nodes answers CLUSTER INFO with
// cluster_state:ok.
func clusterOK(nodes []*redistest.Server) bool {
	for _, n := range nodes {
		v, err := n.Do("CLUSTER", "INFO")
		if info, _ := v.(string); err != nil || !strings.Contains(info, "cluster_state:ok") {
			return false
		}
	}
	return true
}
