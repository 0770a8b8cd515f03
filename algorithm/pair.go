package algorithm

// Reserve-then-settle (sluice.Op.Lease on a limit other than concurrency):
// the record a store keeps per counter and reservation, and the one step
// that decides what a paired op does. store/memory applies it with the
// counter's own Take, Charge and Refund; store/redis/scripts/driver.lua
// mirrors it (pair_step), and store/storetest's pair traces check both.

// The phases of a reservation's record. PairNone is also an expired one.
const (
	PairNone     = 0
	PairReserved = 1 // holds Pair.N units reserved
	PairDenied   = 2 // the reservation was denied by its own limit
	PairSettled  = 3
)

// Pair is the record of one reservation: its phase, the units reserved,
// and when it expires (µs; the record is PairNone from then on).
type Pair struct {
	Phase int8
	N     int64
	Exp   int64
}

// What a paired op does (PairStep).
const (
	// PairTake: reserve, a Take of the n units; the record becomes
	// PairReserved(n) if admitted, PairDenied if denied by its limit.
	PairTake = iota
	// PairCharge: settle, a Charge of n more units; record PairSettled.
	PairCharge
	// PairRefund: settle, a Refund of n units; record PairSettled.
	PairRefund
	// PairLook: a settle of exactly what was reserved, or an op on a
	// denied or settled record: a look; the record is kept (a settle's
	// becomes PairSettled).
	PairLook
)

// PairStep returns what a paired op of cost (the units asked, or at a
// settle the actual usage) does to a record rec at now, and how many
// units: reserve is what a reservation takes when cost is 0, within the
// record's life (µs; the reservation was made at rec.Exp − within).
//
// period is the window of a fixed_window or sliding_window counter (µs; 0
// for the buckets): a settle that would refund units to such a counter
// refunds them only in the epoch-aligned window its reservation was
// counted in. Once that window has passed, the units counted there are
// gone with it, and a refund now would free units of a window that did
// not count them: it would admit more than the limit in the new window.
// The settle is then a look (the reservation stands in its window).
func PairStep(rec Pair, now, cost, reserve, within, period int64) (act int, n int64) {
	phase := rec.Phase
	if rec.Exp <= now {
		phase = PairNone
	}
	switch phase {
	case PairNone:
		if cost == 0 {
			cost = reserve
		}
		return PairTake, cost
	case PairReserved:
		switch {
		case cost > rec.N:
			return PairCharge, cost - rec.N
		case cost < rec.N && (period == 0 || FloorDiv(rec.Exp-within, period) == FloorDiv(now, period)):
			return PairRefund, rec.N - cost
		}
	}
	return PairLook, 0
}

// PairNext returns the record after a paired op that PairStep told to do
// act (n units), admitted or not, at now, and whether it changed: a
// reservation admitted holds n, one denied says so, a settle says
// settled; each lives within µs from now. A look on a denied or settled
// record keeps it as it is (its life is not extended).
func PairNext(rec Pair, now, within int64, act int, n int64, admitted bool) (Pair, bool) {
	switch {
	case act == PairTake && admitted:
		return Pair{Phase: PairReserved, N: n, Exp: now + within}, true
	case act == PairTake:
		return Pair{Phase: PairDenied, Exp: now + within}, true
	case act == PairLook && (rec.Phase != PairReserved || rec.Exp <= now):
		return rec, false
	}
	return Pair{Phase: PairSettled, Exp: now + within}, true
}
