package redis

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// TestMain runs up to four parallel tests per CPU (go test's default is
// one; an explicit -parallel wins): most of this package's parallel tests
// wait, for a Cluster to form or fail over, for a store timeout, a breaker
// or a late reply, and each owns its servers, keys and clock, so the waits
// overlap with each other and with the conformance suites' computing. The
// tests that rely on prompt replies with sub-second timeouts (the
// breaker's open and half-open timing, above all) stay serial and run
// alone, before the parallel ones.
func TestMain(m *testing.M) {
	proctest.RaiseParallel(4)
	proctest.Exit(m.Run())
}
