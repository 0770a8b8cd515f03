// Package storetest is the conformance suite every sluice.Store must pass:
// step tables for every algorithm and action (take, charge, refund, reset),
// all-or-nothing batches, differential traces, concurrency counts, fuzzable
// invariants and, for stores that list keys, stack.KeyLister, replayed
// against a controllable clock; and RunAllot, the suite of stores that
// lease allotments (stack.Allotter).
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
	RunWith(t, newStore, Options{})
}

// Options adjust the suite for a store that cannot honour every property
// it checks (a composition deciding from local allotments, say).
type Options struct {
	// Skip maps the name of a part of the suite ("Steps", "Differential",
	// or one step table, "Steps/gcra") to why the store cannot honour it;
	// that part is skipped with the reason, so the gap shows in every run
	// (go test -v). A name that is no part of the suite fails the test.
	Skip map[string]string
}

// parts are the parts of the suite, in order.
var parts = []struct {
	name string
	run  func(*testing.T, NewStore, Options)
}{
	{"Steps", runSteps},
	{"Batch", plain(runBatch)},
	{"Errors", plain(runErrors)},
	{"RetryAfter", plain(runRetryAfter)},
	{"RetryAfterSettle", plain(runRetryAfterSettle)},
	{"RetryAfterLarge", plain(runRetryAfterLarge)},
	{"Concurrency", plain(runConcurrency)},
	{"BatchConcurrency", plain(runBatchConcurrency)},
	{"Differential", plain(runDifferential)},
	{"BoundaryBurst", plain(runBoundaryBurst)},
	{"BucketsAgree", plain(runBucketsAgree)},
	{"ActionBatch", plain(runActionBatch)},
	{"SettleConcurrency", plain(runSettleConcurrency)},
	{"Keys", plain(runKeys)},
	{"DecisionInstant", plain(runDecisionInstant)},
	{"PairBatch", plain(runPairBatch)},
}

func plain(f func(*testing.T, NewStore)) func(*testing.T, NewStore, Options) {
	return func(t *testing.T, n NewStore, _ Options) { f(t, n) }
}

// RunWith runs the suite as Run does, skipping the parts opts.Skip names.
func RunWith(t *testing.T, newStore NewStore, opts Options) {
	t.Helper()
	known := map[string]bool{}
	for _, p := range parts {
		known[p.name] = true
	}
	for _, tb := range Tables() {
		known["Steps/"+tb.Name] = true
	}
	for name, why := range opts.Skip {
		if !known[name] {
			t.Errorf("storetest: Options.Skip names %q, which is no part of the suite", name)
		}
		if why == "" {
			t.Errorf("storetest: Options.Skip[%q] gives no reason", name)
		}
	}
	for _, p := range parts {
		t.Run(p.name, func(t *testing.T) {
			if why, ok := opts.Skip[p.name]; ok {
				t.Skipf("not honoured by this store: %s", why)
			}
			p.run(t, newStore, opts)
		})
	}
}
