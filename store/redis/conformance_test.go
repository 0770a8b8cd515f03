package redis

import (
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

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	storetest.Run(t, func(t *testing.T, c *storetest.Clock) sluice.Store {
		return newTestStore(t, cl.URL(), c)
	})
}
