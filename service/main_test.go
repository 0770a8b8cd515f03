package service

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// TestMain runs up to four parallel tests per CPU (go test's default is
// one; an explicit -parallel wins): the parallel tests own their engines,
// stores and Redis servers, and mostly wait (for held replies, store
// timeouts, a Cluster to form), so the waits overlap.
func TestMain(m *testing.M) {
	proctest.RaiseParallel(4)
	proctest.Exit(m.Run())
}
