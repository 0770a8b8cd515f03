package algorithm

// Entry is one element of a sliding_log or concurrency state: N units at At.
// For sliding_log, At is when the units were admitted; for concurrency, At is
// when the lease expires and ID names the lease.
type Entry struct {
	At int64
	N  int64
	ID uint64
}

// ExactRetryUnits bounds the search behind the RetryAfter of sliding_log and
// concurrency. A denial that needs at most this many units to leave the log
// (used + cost − Quota ≤ ExactRetryUnits) gets the exact instant they leave;
// one that needs more gets ResetAfter, the instant the whole log has expired,
// which is late but never early. The bound keeps the Redis store's cost per
// op independent of the quota: it reads at most this many entries to answer.
const ExactRetryUnits = 64

// SlidingLog is the exact sliding window: it keeps the admitted entries of
// the last Window (at most Quota units, so at most Quota entries; up to
// 2 × Quota after charges, see ChargeSlidingLog) and admits a
// cost while the units admitted in (now − Window, now] plus the cost stay
// within Quota. RetryAfter is exact within ExactRetryUnits (see there).
//
// log must be sorted by At. SlidingLog returns the log with expired entries
// dropped and, when allowed with cost > 0, the new entry inserted in order
// (merged into an entry with the same At). It reuses log's backing array, so
// the caller must keep only the returned slice. A denied step only drops
// expired entries, which changes no later decision.
func SlidingLog(log []Entry, now, cost int64, p Params) ([]Entry, Decision) {
	return entryStep(log, now, cost, p, p.Window, Entry{At: now, N: cost})
}

// Concurrency limits units in flight. An acquire (cost > 0) is admitted while
// the units held by unexpired leases plus the cost stay within Quota, and adds
// a lease {ID: id, N: cost, At: now + Window}; a lease whose holder never
// releases it expires at At. leases must be sorted by At. RetryAfter is exact
// within ExactRetryUnits (see there).
//
// As with SlidingLog, the returned slice replaces leases.
func Concurrency(leases []Entry, now, cost int64, id uint64, p Params) ([]Entry, Decision) {
	return entryStep(leases, now, cost, p, 0, Entry{At: now + p.Window, N: cost, ID: id})
}

// entryStep is the step SlidingLog and Concurrency share: an entry counts
// until At + life (life is Window for a log of admissions, 0 for leases
// that carry their own expiry), and a cost is admitted, as add, while the
// counted units plus the cost stay within Quota.
func entryStep(es []Entry, now, cost int64, p Params, life int64, add Entry) ([]Entry, Decision) {
	es = dropThrough(es, now-life)
	used := sum(es)
	d := Decision{Limit: p.Quota}
	switch {
	case cost > p.Quota:
		d.Reason = CostTooHigh
	case cost > 0 && used+cost > p.Quota: // a look is allowed, even in debt
		d.Reason = Limited
		d.RetryAfter = freeAt(es, used+cost-p.Quota) + life - now
	case cost > 0:
		es = insert(es, add)
		used += cost
	}
	d.Remaining = max(p.Quota-used, 0) // a charge may have put used above Quota
	if n := len(es); n > 0 {
		d.ResetAfter = max(es[n-1].At+life-now, 0)
	}
	return es, d
}

// Held reports whether leases hold an unexpired lease named id at now
// (id 0 names none).
func Held(leases []Entry, now int64, id uint64) bool {
	if id == 0 {
		return false
	}
	for i := range leases {
		if leases[i].ID == id && leases[i].At > now {
			return true
		}
	}
	return false
}

// Release frees the lease named id, if it is still held, and reports the
// state afterward as an allowed look. Releasing an unknown or expired lease is
// not an error: its units are already free.
func Release(leases []Entry, now int64, id uint64, p Params) ([]Entry, Decision) {
	for i := range leases {
		if leases[i].ID == id {
			leases = append(leases[:i], leases[i+1:]...)
			break
		}
	}
	return Concurrency(leases, now, 0, 0, p)
}

// dropThrough removes the leading entries with At ≤ t, shifting the rest down
// so the backing array is reused.
func dropThrough(log []Entry, t int64) []Entry {
	i := 0
	for i < len(log) && log[i].At <= t {
		i++
	}
	if i == 0 {
		return log
	}
	n := copy(log, log[i:])
	return log[:n]
}

func sum(log []Entry) int64 {
	var s int64
	for _, e := range log {
		s += e.N
	}
	return s
}

// freeAt returns the At of the entry whose passing frees at least need units,
// oldest first; when need exceeds ExactRetryUnits, the At of the newest entry
// (log is not empty when need ≥ 1, and need ≤ sum(log)).
func freeAt(log []Entry, need int64) int64 {
	if need > ExactRetryUnits {
		return log[len(log)-1].At
	}
	var freed int64
	for _, e := range log {
		freed += e.N
		if freed >= need {
			return e.At
		}
	}
	return 0 // unreachable when need ≤ sum(log)
}

// insert adds e keeping log sorted by At; a sliding_log entry with the same At
// (and no ID) is merged.
func insert(log []Entry, e Entry) []Entry {
	i := len(log)
	for i > 0 && log[i-1].At > e.At {
		i--
	}
	if e.ID == 0 && i > 0 && log[i-1].At == e.At && log[i-1].ID == 0 {
		log[i-1].N += e.N
		return log
	}
	log = append(log, Entry{})
	copy(log[i+1:], log[i:])
	log[i] = e
	return log
}
