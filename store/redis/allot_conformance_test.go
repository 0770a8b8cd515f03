package redis

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The allotment conformance suite (the same one the memory store runs),
// against a real single node and a real 3-master cluster.

func TestAllotConformanceSingle(t *testing.T) {
	t.Parallel() // its own server and a fake clock, as TestConformanceSingle
	srv := redistest.Start(t)
	storetest.RunAllot(t, func(t *testing.T, c *storetest.Clock) stack.Allotter {
		return newTestStore(t, srv.URL(), c)
	})
}

func TestAllotConformanceCluster(t *testing.T) {
	t.Parallel() // its own Cluster and a fake clock, as TestConformanceCluster
	cl := redistest.StartCluster(t)
	storetest.RunAllot(t, func(t *testing.T, c *storetest.Clock) stack.Allotter {
		return newTestStore(t, cl.URL(), c)
	})
}
