package storetest

import (
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
)

// Reserve-then-settle (sluice.Op.Lease on a limit other than concurrency):
// step tables of reservations, settles up and down, duplicates, denials
// and expiry, and the batch that a reservation is undone with.

// PairWithin is how long a reservation's record lives in the pair tables.
const PairWithin = 10 * time.Second

// pairTables are the step tables of reserve-then-settle; Tables includes
// them.
func pairTables() []Table {
	return []Table{
		{Name: "fixed_window/pair", Limit: sluice.Limit{Algorithm: sluice.FixedWindow, Quota: 10, Window: time.Minute}, Steps: []Step{
			{At: at(0), Pair: 1, Cost: 4, Want: ok(10, 6, 60*sec)},                    // reserve 4
			{At: at(0), Pair: 2, Reserve: 3, Want: ok(10, 3, 60*sec)},                 // cost 0: reserve the op's Reserve
			{At: at(sec), Pair: 1, Cost: 6, Want: ok(10, 1, 59*sec)},                  // settle up: charge 2
			{At: at(sec), Pair: 1, Cost: 9, Want: ok(10, 1, 59*sec)},                  // a duplicate settle: a look
			{At: at(2 * sec), Pair: 2, Cost: 1, Want: ok(10, 3, 58*sec)},              // settle down: refund 2
			{At: at(2 * sec), Pair: 3, Cost: 5, Want: limited(10, 3, 58*sec, 58*sec)}, // denied: recorded so
			{At: at(3 * sec), Pair: 3, Cost: 5, Want: ok(10, 3, 57*sec)},              // after a denial: a look, nothing charged
			{At: at(3 * sec), Pair: 4, Cost: 3, Want: ok(10, 0, 57*sec)},              // reserve 3
			{At: at(3 * sec), Cost: 1, Want: limited(10, 0, 57*sec, 57*sec)},          // a plain Take sees them
			// The record of 4 expired at 13s: its settle reserves anew (1
			// unit, which does not fit: denied, and recorded so).
			{At: at(14 * sec), Pair: 4, Cost: 1, Want: limited(10, 0, 46*sec, 46*sec)},
			{At: at(14 * sec), Pair: 4, Cost: 1, Want: ok(10, 0, 46*sec)},
			// A new window; the denial of 4 expired at 24s.
			{At: at(61 * sec), Pair: 4, Cost: 2, Want: ok(10, 8, 59*sec)},
			{At: at(61 * sec), Pair: 4, Cost: 2, Want: ok(10, 8, 59*sec)},    // settle of exactly the reservation
			{At: at(61 * sec), Pair: 4, Cost: 0, Want: ok(10, 8, 59*sec)},    // settled: a look
			{At: at(62 * sec), Pair: 5, Cost: 0, Want: ok(10, 8, 58*sec)},    // Reserve 0: a reservation of nothing
			{At: at(62 * sec), Pair: 5, Cost: 3, Want: ok(10, 5, 58*sec)},    // its settle charges all
			{At: at(62 * sec), Pair: 6, Void: true, Want: ok(10, 5, 58*sec)}, // a void of no record: denied
			{At: at(62 * sec), Pair: 6, Cost: 3, Want: ok(10, 5, 58*sec)},    // so a look
			{At: at(62 * sec), Pair: 7, Cost: 2, Want: ok(10, 3, 58*sec)},
			{At: at(62 * sec), Pair: 7, Void: true, Want: ok(10, 3, 58*sec)}, // a void leaves a reservation
			{At: at(62 * sec), Pair: 7, Cost: 1, Want: ok(10, 4, 58*sec)},    // whose settle refunds 1
			// A settle down in the next window: the units were counted in
			// the window that passed, so nothing is refunded in this one
			// (it would free units it never counted).
			{At: at(115 * sec), Pair: 8, Cost: 2, Want: ok(10, 2, 5*sec)},
			{At: at(121 * sec), Cost: 1, Want: ok(10, 9, 59*sec)},
			{At: at(121 * sec), Pair: 8, Cost: 0, Want: ok(10, 9, 59*sec)}, // settled: no refund
			{At: at(121 * sec), Pair: 8, Cost: 0, Want: ok(10, 9, 59*sec)}, // a duplicate
		}},
		{Name: "gcra/pair", Limit: sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: 10 * time.Second}, Steps: []Step{
			// interval 1s, burst 10.
			{At: at(0), Pair: 1, Cost: 4, Want: ok(10, 6, 4*sec)},
			{At: at(0), Pair: 1, Cost: 10, Want: ok(10, 0, 10*sec)}, // settle up: charge 6
			{At: at(0), Pair: 2, Cost: 1, Want: limited(10, 0, 10*sec, sec)},
			{At: at(0), Pair: 1, Cost: 0, Want: ok(10, 0, 10*sec)}, // a duplicate
			{At: at(5 * sec), Pair: 3, Cost: 3, Want: ok(10, 2, 8*sec)},
			{At: at(5 * sec), Pair: 3, Cost: 0, Want: ok(10, 5, 5*sec)}, // settle of 0: refund 3
			{At: at(5 * sec), Pair: 2, Cost: 1, Want: ok(10, 5, 5*sec)}, // denied at 0: a look
		}},
		{Name: "sliding_log/pair", Limit: sluice.Limit{Algorithm: sluice.SlidingLog, Quota: 5, Window: time.Minute}, Steps: []Step{
			{At: at(0), Pair: 1, Cost: 3, Want: ok(5, 2, 60*sec)},
			{At: at(sec), Pair: 1, Cost: 1, Want: ok(5, 4, 59*sec)}, // refund 2 of the 3
			{At: at(sec), Pair: 2, Reserve: 4, Want: ok(5, 0, 60*sec)},
			{At: at(2 * sec), Pair: 2, Cost: 6, Want: ok(5, 0, 60*sec)}, // charge 2: in debt
			{At: at(2 * sec), Pair: 2, Cost: 6, Want: ok(5, 0, 60*sec)}, // a duplicate
		}},
	}
}

// runPairBatch checks reservations in batches: one that a batch admitted
// is undone when another op denies it (no record is left: the next op of
// its lease reserves again), one denied by its own limit stays denied
// (its next op is a look), and a settle is undone with a denied batch.
func runPairBatch(t *testing.T, newStore NewStore) {
	clock := NewClock()
	s := newStore(t, clock)
	// Not fixed windows: store/redis with native fixed windows refuses
	// reservations on them (redis.ErrNativePaired).
	fw := sluice.Limit{Algorithm: sluice.GCRA, Quota: 10, Window: time.Minute} // interval 6s
	one := sluice.Limit{Algorithm: sluice.GCRA, Quota: 1, Window: time.Minute}
	pair := func(key string, lease uint64, cost int64) sluice.Op {
		return sluice.Op{Key: "pairbatch:" + key, Limit: fw, Cost: cost, Lease: lease, Reserve: 2, SettleWithin: PairWithin}
	}
	b := sluice.Op{Key: "pairbatch:b", Limit: one, Cost: 1}
	runBatchSteps(t, s, []batchStep{
		{"b full", []sluice.Op{b}, []sluice.Result{ok(1, 0, 60*sec)}},
		{"reservation 1 admitted, b denies the batch", []sluice.Op{pair("a", 1, 4), b},
			[]sluice.Result{ok(10, 10, 0), limited(1, 0, 60*sec, 60*sec)}},
		{"no record of 1: it reserves again", []sluice.Op{pair("a", 1, 4)},
			[]sluice.Result{ok(10, 6, 24*sec)}},
		{"settle of 1 in a denied batch: undone", []sluice.Op{pair("a", 1, 8), b},
			[]sluice.Result{ok(10, 6, 24*sec), limited(1, 0, 60*sec, 60*sec)}},
		{"the settle of 1 alone", []sluice.Op{pair("a", 1, 8)},
			[]sluice.Result{ok(10, 2, 48*sec)}},
		{"reservation 2 admitted, 3 denied by its own limit", []sluice.Op{pair("a", 2, 0), pair("a", 3, 11)},
			[]sluice.Result{ok(10, 2, 48*sec), tooHigh(10, 0, 60*sec)}},
		{"2 reserves again (the batch undid it); 3 was denied: a look", []sluice.Op{pair("a", 2, 0), pair("a", 3, 1)},
			[]sluice.Result{ok(10, 0, 60*sec), ok(10, 0, 60*sec)}},
	})
}
