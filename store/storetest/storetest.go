// Package storetest is the conformance suite every sluice.Store must pass:
// step tables for every algorithm and action (take, charge, refund, reset),
// all-or-nothing batches, differential traces, concurrency counts, fuzzable
// invariants and, for stores that list keys, sluice.KeyLister, replayed
// against a controllable clock.
package storetest

import (
	"testing"

	"github.com/sluice-rl/sluice"
)

// NewStore returns a new, empty store whose time is read from clock.Now on
// every Take. It registers its own cleanup with t.Cleanup. Two calls must
// return stores that share no state.
type NewStore func(t *testing.T, clock *Clock) sluice.Store

// Run runs the whole conformance suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	t.Helper()
	t.Run("Steps", func(t *testing.T) { runSteps(t, newStore) })
	t.Run("Batch", func(t *testing.T) { runBatch(t, newStore) })
	t.Run("Errors", func(t *testing.T) { runErrors(t, newStore) })
	t.Run("RetryAfter", func(t *testing.T) { runRetryAfter(t, newStore) })
	t.Run("RetryAfterSettle", func(t *testing.T) { runRetryAfterSettle(t, newStore) })
	t.Run("RetryAfterLarge", func(t *testing.T) { runRetryAfterLarge(t, newStore) })
	t.Run("Concurrency", func(t *testing.T) { runConcurrency(t, newStore) })
	t.Run("BatchConcurrency", func(t *testing.T) { runBatchConcurrency(t, newStore) })
	t.Run("Differential", func(t *testing.T) { runDifferential(t, newStore) })
	t.Run("BoundaryBurst", func(t *testing.T) { runBoundaryBurst(t, newStore) })
	t.Run("BucketsAgree", func(t *testing.T) { runBucketsAgree(t, newStore) })
	t.Run("ActionBatch", func(t *testing.T) { runActionBatch(t, newStore) })
	t.Run("SettleConcurrency", func(t *testing.T) { runSettleConcurrency(t, newStore) })
	t.Run("Keys", func(t *testing.T) { runKeys(t, newStore) })
}
