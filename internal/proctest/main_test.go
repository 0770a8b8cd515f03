package proctest

import "testing"

// TestMain exits without the race runtime's second of sleep (Exit).
func TestMain(m *testing.M) { Exit(m.Run()) }
