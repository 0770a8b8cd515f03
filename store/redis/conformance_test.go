package redis

import (
	"maps"
	"os"
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The conformance suite, against a real single node and a real 3-master
// cluster; each store gets a fresh random prefix. Each test owns its
// servers and its clock (storetest.Clock: nothing depends on real time), so
// they run in parallel, beside the tests that mostly wait: about a core's
// worth each (the Go side and redis-server take turns).

func TestConformanceSingle(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, c *storetest.Clock) sluice.Store {
		return newTestStore(t, srv.URL(), c)
	})
}

// oneKeyParts are the parts of the conformance suite whose every Take is one
// op on one key: long single-key traces, most of the suite's CPU. On a
// cluster such a Take goes to its key's node as the same script call, with
// the same arguments, that a single node runs, so the decisions are the
// single node's: the cluster runs of these parts prove nothing that
// TestConformanceSingle (and TestNativeConformanceSingle) do not, beyond
// routing one key to its node, which every cluster test does. Random
// single-key traces on a cluster are still compared with the memory store,
// Result by Result, by TestDifferentialCluster, TestDifferentialLargeQuota
// and TestDifferentialActions. The parts that put several keys in one
// batch (cross-slot: Batch, BatchConcurrency, ActionBatch, Keys, Errors),
// hammer from many goroutines (Concurrency, SettleConcurrency), step
// through every table (Steps) or are cheap (BoundaryBurst) run on the
// cluster as well.
var oneKeyParts = map[string]string{
	"Differential":     "covered, not a gap: one key per Take, the single node's script call (see oneKeyParts)",
	"BucketsAgree":     "covered, not a gap: one key per Take, the single node's script call (see oneKeyParts)",
	"RetryAfter":       "covered, not a gap: one key per Take, the single node's script call (see oneKeyParts)",
	"RetryAfterSettle": "covered, not a gap: one key per Take, the single node's script call (see oneKeyParts)",
	"RetryAfterLarge":  "covered, not a gap: one key per Take, the single node's script call (see oneKeyParts)",
}

// clusterSkips are the parts the cluster conformance runs leave to the
// single node (oneKeyParts), plus extra; SLUICE_FULL_CONFORMANCE=1 runs
// every part on the cluster too.
func clusterSkips(t *testing.T, extra map[string]string) map[string]string {
	t.Helper()
	skips := maps.Clone(extra)
	if fullConformance() {
		return skips
	}
	if skips == nil {
		skips = map[string]string{}
	}
	maps.Copy(skips, oneKeyParts)
	return skips
}

// fullConformance reports whether SLUICE_FULL_CONFORMANCE=1 asks for every
// part of the suite on every store, the repetitions included.
func fullConformance() bool { return os.Getenv("SLUICE_FULL_CONFORMANCE") == "1" }

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	storetest.RunWith(t, func(t *testing.T, c *storetest.Clock) sluice.Store {
		return newTestStore(t, cl.URL(), c)
	}, storetest.Options{Skip: clusterSkips(t, nil)})
}
