package memory_test

import (
	"testing"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

func newStore(t *testing.T, clock *storetest.Clock) sluice.Store {
	s := memory.New(memory.Options{Now: clock.Now})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, newStore) }
