package httplimit

import (
	"testing"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// TestMain exits without the race runtime's second of sleep (proctest.Exit).
func TestMain(m *testing.M) { proctest.Exit(m.Run()) }
