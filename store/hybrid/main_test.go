package hybrid

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// TestMain runs up to two parallel tests per CPU (go test's default is
// one; an explicit -parallel wins): the parallel tests own their fleets,
// keys and fake clocks, and either compute (the bound tests' seeds) or wait
// for a Cluster to form and announcements to arrive, so the waits overlap
// with the computing. The tests that rely on prompt replies under
// sub-second timeouts (TestOneMasterStopped) stay serial and run alone.
func TestMain(m *testing.M) {
	proctest.RaiseParallel(2)
	proctest.Exit(m.Run())
}
