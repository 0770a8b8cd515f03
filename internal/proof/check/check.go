// Package check is the offline checker of Sluice's stated bounds: it reads a
// history of decisions recorded at the clients of a fleet run (what each
// client sent, when, and what it was told) and says whether any documented
// bound was broken. It imports nothing of Sluice: every bound is derived
// from the history and the guarantee the documentation states, never from
// Sluice's own algorithms, so a bug shared by the limiter and the checker
// cannot hide.
//
// Time. A decision is made somewhere between the moment the client sent it
// (Send) and the moment the answer came back (Recv), on the store's clock.
// The checker never guesses where: it only counts admissions that must lie
// inside an interval, so a violation it reports is certain, whatever the
// network did. Clients and store share one clock here (one host), so Send
// and Recv are on the store's time line up to the clock's resolution.
package check

import (
	"fmt"
	"sort"
	"strings"
)

// Verdicts a client can record.
const (
	Allowed = "allowed" // the answer admitted the request
	Denied  = "denied"  // the answer refused it
	Error   = "error"   // the answer was an error (gRPC/HTTP); nothing is known of a charge
	Timeout = "timeout" // no answer within the client's deadline
)

// Degraded modes an answer can carry (Sluice's "failed_open", "failed_closed",
// "local"): how the instance decided when the store could not.
const (
	FailedOpen   = "failed_open"
	FailedClosed = "failed_closed"
	Local        = "local"
)

// Event is one decision as a client saw it.
type Event struct {
	Client   int    `json:"client"`
	Instance int    `json:"instance"`
	Key      string `json:"key"`  // the limited entity (e.g. "user=42"), per rule
	Rule     string `json:"rule"` // names a Rule of the run
	Cost     int64  `json:"cost"`
	Send     int64  `json:"send_us"` // µs on the shared clock
	Recv     int64  `json:"recv_us"` // µs; 0 if the client never got an answer (lost)
	Verdict  string `json:"verdict"`
	Degraded string `json:"degraded,omitempty"`
	// Decided is the decision's own instant, µs on the shared clock: the
	// store's clock reading that decided it, as the answer reported it;
	// 0 when the answer did not say. An instant inside [Send, Recv] places
	// the admission exactly; one outside contradicts the client's clock
	// and is not used (the event is placed by [Send, Recv] alone).
	Decided int64 `json:"decided_us,omitempty"`
	// Use is, for a reservation of a budget rule (Cost is what it
	// reserved), the units the admitted request really used: what it
	// settled, or what it used before its client vanished. 0 otherwise.
	Use int64 `json:"use,omitempty"`
}

// Placement counts how the admissions of window rules were placed in their
// windows, by both methods: by the decision's instant, and (the cross-check)
// by the interval [Send, Recv], which cannot place one that straddles a
// window's edge.
type Placement struct {
	// Admissions is the number of admissions of window rules, answered,
	// not decided locally.
	Admissions int
	// ByInstant were placed by their decision instant; InstantUnplaced
	// could not be (no instant, or one outside [Send, Recv]).
	ByInstant, InstantUnplaced int
	// IntervalUnplaced could not be placed by [Send, Recv] (it straddles a
	// window's edge): invisible to the interval method.
	IntervalUnplaced int
}

// Reset is an operator's reset of one key of a rule, as the client that
// sent it saw it: applied somewhere in [Send, Recv].
type Reset struct {
	Key  string `json:"key"`
	Rule string `json:"rule"`
	Send int64  `json:"send_us"`
	Recv int64  `json:"recv_us"`
}

// Rule is the documented contract of one limit in a run.
type Rule struct {
	Name string `json:"name"`
	// Kind is "window" (fixed_window: at most Quota per epoch-aligned
	// window), "log" (sliding_log: at most Quota in any span shorter than
	// Window), "bucket" (token_bucket, gcra: at most Burst + Quota ×
	// span / Window in any span) or "budget" (a fixed-window budget charged
	// by reservations settled later: the units really used by the requests
	// admitted in one window, Σ Use, at most Quota plus their
	// under-estimates, Σ max(0, Use − Cost); with reservations that are
	// never exceeded, such as max_tokens, at most Quota).
	Kind     string `json:"kind"`
	Quota    int64  `json:"quota"`
	WindowUS int64  `json:"window_us"`
	Burst    int64  `json:"burst"` // bucket only; 0 means Quota
	// Held (bucket only) is the units of allotments the fleet may hold
	// outstanding for one key under placement hybrid — tokens taken from
	// the bucket earlier and spent later, grants in flight included — the
	// documented allowance on top of an exact bucket in any span; 0 for
	// placement global.
	Held int64 `json:"held,omitempty"`
	// FailureMode is the rule's failure_mode: "open", "closed" or "local".
	FailureMode string `json:"failure_mode"`
	// LocalShare is what one instance may admit per window on its own in
	// failure mode local (limit ÷ expected replicas, rounded up).
	LocalShare int64 `json:"local_share"`
	// Propagation bounds how long after a reset's answer every instance
	// decides the key afresh (the documented 1 s for resets across a fleet).
	PropagationUS int64 `json:"propagation_us"`
}

// Fault is one fault of the schedule as the operator saw it, from the
// moment it was injected (Start) to the moment it was over (End), in µs on
// the shared clock. Kind says what the documentation allows while it lasts:
//
//   - "loss": the store may forget charges it acknowledged (a Redis without
//     persistence restarted empty; a Sentinel failover promoting a replica
//     that had not received the last writes). Charges made before End may be
//     forgotten once, so a span that overlaps [Start, End] is allowed one
//     more quota (window, log) or one more burst (bucket) per such fault.
//   - "clock": instance Instance's clock reads OffsetUS ahead of the shared
//     clock. Only its in-process decisions read it (failure mode local:
//     its share per window of its own clock); Redis decides on Redis's
//     TIME. Its local admissions are counted in windows of its clock.
//   - anything else ("pause", "latency", "instance", "outage", "reset",
//     "reload"): recorded for the reader; no bound moves. Each failure
//     mode's own bound holds throughout.
type Fault struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Start    int64  `json:"start_us"`
	End      int64  `json:"end_us"`
	Instance int    `json:"instance,omitempty"`  // kind clock
	OffsetUS int64  `json:"offset_us,omitempty"` // kind clock
}

// Change is a rule reload that changed one rule's limit: every instance
// decides with the new limit from some moment in [Send, Recv] on (Send: the
// file was written; Recv: every instance answered with the new limit). A
// changed limit counts under a new store key (docs/rules.md), so while
// instances disagree both counters fill: a span that overlaps [Send, Recv]
// is allowed the old bound plus the new one, a span after Recv the new one.
type Change struct {
	Rule  string `json:"rule"`
	Send  int64  `json:"send_us"`
	Recv  int64  `json:"recv_us"`
	Quota int64  `json:"quota"`
	Burst int64  `json:"burst"` // bucket only; 0 means Quota
}

// History is one run.
type History struct {
	Rules   []Rule   `json:"rules"`
	Events  []Event  `json:"events"`
	Resets  []Reset  `json:"resets"`
	Faults  []Fault  `json:"faults,omitempty"`
	Changes []Change `json:"changes,omitempty"`
}

// Violation is one broken bound.
type Violation struct {
	Bound  string // which bound: "window", "log", "bucket", "local", "fleet", "fail-closed", "lost", "reset", "history"
	Rule   string
	Key    string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: rule %s key %s: %s", v.Bound, v.Rule, v.Key, v.Detail)
}

// Report is what Check found: the worst case of each rule against its bound
// and every violation.
type Report struct {
	// Worst is, per rule, the largest admitted count a bound was checked
	// against and that bound (the tightest ratio seen).
	Worst map[string]Worst
	// Moved is, per rule, the worst span whose bound a fault moved (a loss,
	// a reload): absent when no fault moved the rule's bound.
	Moved map[string]Worst
	// Local is, per rule in failure mode local, the most one instance
	// admitted on its own in one window of its clock, and its share.
	Local map[string]Worst
	// Fleet is, per rule in failure mode local, the most the whole fleet
	// admitted in one window of the shared clock — through the store and
	// on the instances' own — against what the documentation allows there:
	// the quota plus each admitting instance's share for every window of
	// its own clock that overlaps it (one, or two for a skewed clock).
	// Local admissions are counted only where [Send, Recv] lies in the
	// window, so the figure is certain, never more than what happened.
	Fleet      map[string]Worst
	Violations []Violation
	Events     int
	// Placement is how the window rules' admissions were placed.
	Placement Placement
}

// Worst is the most admissions seen in one checked span and the bound that
// span was allowed.
type Worst struct {
	Admitted, Bound int64
}

// worse reports whether w is a worse case than c: a larger share of its
// bound, or the same share of a larger bound (a bound a fault moved).
func (w Worst) worse(c Worst) bool {
	if c.Bound == 0 {
		return w.Bound > 0
	}
	l, r := w.Admitted*c.Bound, c.Admitted*w.Bound
	return l > r || l == r && w.Bound > c.Bound
}

// OK reports whether no bound was broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Check checks h against the bounds of its rules.
func Check(h History) Report {
	rep := Report{Worst: map[string]Worst{}, Moved: map[string]Worst{}, Local: map[string]Worst{}, Fleet: map[string]Worst{}, Events: len(h.Events)}
	rules := map[string]Rule{}
	for _, r := range h.Rules {
		rules[r.Name] = r
	}
	type series struct{ rule, key string }
	byKey := map[series][]Event{}
	for _, e := range h.Events {
		if e.Recv == 0 && e.Verdict != Timeout {
			rep.Violations = append(rep.Violations, Violation{"lost", e.Rule, e.Key,
				fmt.Sprintf("client %d sent at %d µs and recorded neither an answer nor a timeout", e.Client, e.Send)})
		}
		if e.Degraded == FailedClosed && e.Verdict == Allowed {
			rep.Violations = append(rep.Violations, Violation{"fail-closed", e.Rule, e.Key,
				fmt.Sprintf("instance %d admitted at %d µs while failing closed", e.Instance, e.Send)})
		}
		byKey[series{e.Rule, e.Key}] = append(byKey[series{e.Rule, e.Key}], e)
	}
	resets := map[series][]Reset{}
	for _, r := range h.Resets {
		resets[series{r.Rule, r.Key}] = append(resets[series{r.Rule, r.Key}], r)
	}
	changes := map[string][]Change{}
	for _, c := range h.Changes {
		changes[c.Rule] = append(changes[c.Rule], c)
	}
	var losses []Fault
	offsets := map[int]int64{}
	for _, f := range h.Faults {
		switch f.Kind {
		case "loss":
			losses = append(losses, f)
		case "clock":
			offsets[f.Instance] = f.OffsetUS
		}
	}
	keys := make([]series, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].rule+"\x00"+keys[i].key < keys[j].rule+"\x00"+keys[j].key })
	for _, k := range keys {
		r, ok := rules[k.rule]
		if !ok {
			rep.Violations = append(rep.Violations, Violation{"history", k.rule, k.key, "events of a rule the history does not describe"})
			continue
		}
		b := bounds{r: r, changes: changes[r.Name], losses: losses, offsets: offsets}
		sort.Slice(b.changes, func(i, j int) bool { return b.changes[i].Send < b.changes[j].Send })
		evs := byKey[k]
		sort.Slice(evs, func(i, j int) bool { return evs[i].Send < evs[j].Send })
		var vs []Violation
		var w, mw Worst
		switch r.Kind {
		case "window", "budget":
			var lw, fw Worst
			vs, w, mw, lw, fw = checkWindow(b, k.key, evs, resets[k], &rep.Placement)
			if lw.Bound > 0 && lw.Admitted >= rep.Local[r.Name].Admitted {
				rep.Local[r.Name] = lw
			}
			if fw.Bound > 0 && fw.worse(rep.Fleet[r.Name]) {
				rep.Fleet[r.Name] = fw
			}
		case "log":
			vs, w, mw = checkSpan(b, k.key, evs, resets[k], func(from, to int64) (int64, bool) {
				return b.quota(from, to), to-from < r.WindowUS
			})
		case "bucket":
			vs, w, mw = checkSpan(b, k.key, evs, resets[k], func(from, to int64) (int64, bool) {
				return b.bucket(from, to), true // every span length, however long
			})
		default:
			vs = []Violation{{"history", r.Name, k.key, fmt.Sprintf("unknown rule kind %q", r.Kind)}}
		}
		rep.Violations = append(rep.Violations, vs...)
		if w.worse(rep.Worst[r.Name]) {
			rep.Worst[r.Name] = w
		}
		if mw.worse(rep.Moved[r.Name]) {
			rep.Moved[r.Name] = mw
		}
		rep.Violations = append(rep.Violations, checkResets(b, k.key, evs, resets[k])...)
	}
	return rep
}

// bounds is what the documentation allows one rule in a span, given the
// reloads that changed its limit and the faults that may lose charges.
type bounds struct {
	r       Rule
	changes []Change // by Send
	losses  []Fault
	offsets map[int]int64 // instance → how far its clock runs ahead, µs
}

// limit is one limit a rule had: its quota and burst (0: the quota).
type limit struct{ quota, burst int64 }

// inForce returns the limits that may decide some of [from, to]: the
// rule's own until the first change is certainly everywhere (its Recv),
// each change's from its Send until the next is certainly everywhere.
func (b bounds) inForce(from, to int64) []limit {
	var out []limit
	cur := limit{b.r.Quota, b.r.Burst}
	var since int64 = -1 << 62
	for _, c := range b.changes {
		if from < c.Recv && to >= since {
			out = append(out, cur)
		}
		cur, since = limit{c.Quota, c.Burst}, c.Send
	}
	if to >= since {
		out = append(out, cur)
	}
	return out
}

// moved reports whether a fault moves the bound of [from, to]: more than
// one limit may be in force, or another than the rule's own, or charges
// may have been lost.
func (b bounds) moved(from, to int64) bool {
	in := b.inForce(from, to)
	return len(in) != 1 || in[0] != limit{b.r.Quota, b.r.Burst} || b.lossesIn(from, to) > 0
}

// lossesIn counts the faults that may have lost charges within [from, to].
func (b bounds) lossesIn(from, to int64) int64 {
	var n int64
	for _, f := range b.losses {
		if f.Start <= to && f.End >= from {
			n++
		}
	}
	return n
}

// quota bounds a window or a log span: the quota of every limit that may be
// in force (each has its own counter), and one more of the largest for
// each fault that may have lost charges.
func (b bounds) quota(from, to int64) int64 {
	var sum, top int64
	for _, l := range b.inForce(from, to) {
		sum += l.quota
		top = max(top, l.quota)
	}
	return sum + b.lossesIn(from, to)*top + b.r.Held
}

// smallest is the smallest quota that may be in force within [from, to]:
// fewer admissions than that can never justify a denial.
func (b bounds) smallest(from, to int64) int64 {
	var q int64 = -1
	for _, l := range b.inForce(from, to) {
		if q < 0 || l.quota < q {
			q = l.quota
		}
	}
	return q
}

// bucket bounds a bucket span: per limit in force, its burst plus what
// refills in the span, rounded up (integer µs refills are never finer than
// one unit); and one more burst of the largest per fault that may have
// lost charges (a bucket that forgets is full again).
func (b bounds) bucket(from, to int64) int64 {
	var sum, top int64
	for _, l := range b.inForce(from, to) {
		burst := l.burst
		if burst == 0 {
			burst = l.quota
		}
		sum += burst + ceilDiv(l.quota*(to-from), b.r.WindowUS)
		top = max(top, burst)
	}
	return sum + b.lossesIn(from, to)*top + b.r.Held
}

// counted reports whether an admission counts against the shared bound: not
// those a failure mode let through on its own (open: unbounded by design;
// local: bounded per instance, checked apart).
func counted(e Event) bool {
	return e.Verdict == Allowed && e.Degraded != FailedOpen && e.Degraded != Local
}

// afterReset returns the events that are certainly after the last reset that
// certainly happened before span [from, to) started, so a counter restarted
// by a reset is held only to what came after it.
func afterReset(evs []Event, rs []Reset, from int64) []Event {
	var cut int64 = -1
	for _, r := range rs {
		if r.Recv <= from && r.Recv > cut {
			cut = r.Recv
		}
	}
	if cut < 0 {
		return evs
	}
	var out []Event
	for _, e := range evs {
		if e.Send >= cut {
			out = append(out, e)
		}
	}
	return out
}

// hasReset reports whether a reset may have happened within [from, to].
func hasReset(rs []Reset, from, to int64) bool {
	for _, r := range rs {
		if r.Recv >= from && r.Send <= to {
			return true
		}
	}
	return false
}

// checkWindow: per epoch-aligned window, the admissions certainly inside it
// (sent and answered within it) are at most Quota; per instance, the local
// admissions certainly inside one window of that instance's clock at most
// LocalShare.
//
// An admission is placed in its window by its decision instant when the
// answer reported one inside [Send, Recv], and otherwise only when [Send,
// Recv] lies in one window (then both agree: the instant lies inside).
//
// For a rule in failure mode local it also returns fleet: the worst window
// of the shared clock for everything the fleet admitted (see Report.Fleet),
// and reports a window over that bound as a violation ("fleet").
func checkWindow(b bounds, key string, evs []Event, rs []Reset, pl *Placement) (vs []Violation, worst, moved, lw, fleet Worst) {
	r := b.r
	admitted := map[int64][]Event{}
	local := map[[2]int64]int64{}
	// shared window → instance → local admissions certainly inside it
	localShared := map[int64]map[int]int64{}
	for _, e := range evs {
		if e.Verdict != Allowed || e.Recv == 0 {
			continue
		}
		if e.Degraded == Local {
			// Decided in process, on the instance's clock.
			o := b.offsets[e.Instance]
			ls, lr := (e.Send+o)/r.WindowUS, (e.Recv-1+o)/r.WindowUS
			if ls == lr {
				local[[2]int64{ls, int64(e.Instance)}] += e.Cost
			}
			if w := e.Send / r.WindowUS; w == (e.Recv-1)/r.WindowUS {
				if localShared[w] == nil {
					localShared[w] = map[int]int64{}
				}
				localShared[w][e.Instance] += e.Cost
			}
			continue
		}
		pl.Admissions++
		ws, wr := e.Send/r.WindowUS, (e.Recv-1)/r.WindowUS
		byInterval := ws == wr
		if !byInterval {
			pl.IntervalUnplaced++
		}
		if e.Decided != 0 && e.Decided >= e.Send && e.Decided <= e.Recv {
			pl.ByInstant++
			ws, byInterval = e.Decided/r.WindowUS, true
		} else {
			pl.InstantUnplaced++
		}
		if !byInterval {
			continue // may be in either window: certain of neither
		}
		if counted(e) {
			admitted[ws] = append(admitted[ws], e)
		}
	}
	wins := make([]int64, 0, len(admitted))
	for w := range admitted {
		wins = append(wins, w)
	}
	sort.Slice(wins, func(i, j int) bool { return wins[i] < wins[j] })
	for _, w := range wins {
		from, to := w*r.WindowUS, (w+1)*r.WindowUS
		in := admitted[w]
		if hasReset(rs, from, to) {
			// A reset inside the window restarts the count: hold each side
			// apart (only the part certainly after the reset is checked).
			in = afterReset(in, rs, to)
		}
		var n, under int64
		for _, e := range in {
			n += e.Cost
			if r.Kind == "budget" { // what it used, beyond what it reserved
				n += e.Use - e.Cost
				under += max(0, e.Use-e.Cost)
			}
		}
		q := b.quota(from, to-1) + under
		if w := (Worst{n, q}); w.worse(worst) {
			worst = w
		}
		if w := (Worst{n, q}); b.moved(from, to-1) && w.worse(moved) {
			moved = w
		}
		if n > q {
			vs = append(vs, Violation{r.Kind, r.Name, key,
				fmt.Sprintf("window [%d, %d) µs admitted %d > bound %d", from, to, n, q)})
		}
	}
	if r.LocalShare > 0 {
		var vf []Violation
		vf, fleet = checkFleet(b, key, admitted, localShared, rs)
		vs = append(vs, vf...)
	}
	for c, n := range local {
		if r.LocalShare > 0 && n >= lw.Admitted {
			lw = Worst{n, r.LocalShare}
		}
		if r.LocalShare > 0 && n > r.LocalShare {
			vs = append(vs, Violation{"local", r.Name, key,
				fmt.Sprintf("instance %d admitted %d on its own in window %d > its share %d", c[1], n, c[0], r.LocalShare)})
		}
	}
	return vs, worst, moved, lw, fleet
}

// checkFleet holds each window of the shared clock to the fleet's bound for
// a rule in failure mode local: the store-decided admissions placed in it
// (shared) plus every instance's local admissions certainly inside it
// (local) at most the quota in force plus, per instance that admitted on its
// own there, its share times the windows of its own clock overlapping it.
func checkFleet(b bounds, key string, shared map[int64][]Event, local map[int64]map[int]int64, rs []Reset) (vs []Violation, worst Worst) {
	r := b.r
	wins := map[int64]bool{}
	for w := range shared {
		wins[w] = true
	}
	for w := range local {
		wins[w] = true
	}
	order := make([]int64, 0, len(wins))
	for w := range wins {
		order = append(order, w)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	for _, w := range order {
		from, to := w*r.WindowUS, (w+1)*r.WindowUS
		in := shared[w]
		if hasReset(rs, from, to) {
			in = afterReset(in, rs, to)
		}
		var n int64
		for _, e := range in {
			n += e.Cost
		}
		bound := b.quota(from, to-1)
		for inst, c := range local[w] {
			n += c
			overlap := int64(1)
			if b.offsets[inst]%r.WindowUS != 0 {
				overlap = 2 // a skewed clock's windows straddle this one
			}
			bound += overlap * r.LocalShare
		}
		if len(local[w]) == 0 {
			continue // no local admissions: the shared bound says it all
		}
		if c := (Worst{n, bound}); c.worse(worst) {
			worst = c
		}
		if n > bound {
			vs = append(vs, Violation{"fleet", r.Name, key,
				fmt.Sprintf("window [%d, %d) µs: the fleet admitted %d (store and local) > bound %d", from, to, n, bound)})
		}
	}
	return vs, worst
}

// checkSpan: for every pair of counted admissions a ≤ b, the admissions
// certainly inside [a, b] are at most bound(from, to), where the pair is
// checked only when bound says the span applies (a log: spans shorter than
// its window; a bucket: every span, however long, so that a refill rate off
// by a little shows over a long enough span). An admission is placed by its
// decision instant when its answer gave one, else by [Send, Recv].
func checkSpan(bs bounds, key string, evs []Event, rs []Reset, bound func(from, to int64) (int64, bool)) (vs []Violation, worst, moved Worst) {
	r := bs.r
	// Each admission lies in [lo, hi]: its decision instant when the answer
	// reported one inside [Send, Recv] (lo = hi: placed exactly, the
	// answer's latency is not in the span), else [Send, Recv].
	type placed struct{ lo, hi, cost int64 }
	var adm []placed
	for _, e := range evs {
		if !counted(e) || e.Recv == 0 {
			continue
		}
		p := placed{e.Send, e.Recv, e.Cost}
		if e.Decided != 0 && e.Decided >= e.Send && e.Decided <= e.Recv {
			p.lo, p.hi = e.Decided, e.Decided
		}
		adm = append(adm, p)
	}
	sort.Slice(adm, func(i, j int) bool { return adm[i].lo < adm[j].lo })
	// For each start (an admission's lo), the admissions certainly inside
	// [from, to] are those from it on (by lo) whose hi is at most to: taken
	// in order of hi, the k-th one's hi is the shortest span holding k of
	// them, so every span length the bound applies to is checked at its
	// tightest.
	ends := make([]placed, 0, len(adm))
	for i := range adm {
		from := adm[i].lo
		ends = append(ends[:0], adm[i:]...)
		sort.Slice(ends, func(a, b int) bool { return ends[a].hi < ends[b].hi })
		var n int64
		for k, e := range ends {
			n += e.cost
			to := e.hi
			if k+1 < len(ends) && ends[k+1].hi == to {
				continue // count every admission ending at to first
			}
			b, ok := bound(from, to)
			if !ok {
				break
			}
			if hasReset(rs, from, to) {
				continue
			}
			if w := (Worst{n, b}); w.worse(worst) {
				worst = w
			}
			if w := (Worst{n, b}); bs.moved(from, to) && w.worse(moved) {
				moved = w
			}
			if n > b {
				vs = append(vs, Violation{r.Kind, r.Name, key,
					fmt.Sprintf("[%d, %d] µs (%d µs) admitted %d > bound %d", from, to, to-from, n, b)})
				return vs, worst, moved // one witness per key is enough
			}
		}
	}
	return vs, worst, moved
}

// checkResets: after a reset has been answered and the documented
// propagation time has passed, a denial that says the key is over its limit
// contradicts the reset unless the fleet may have charged a full quota
// since. The reset took effect somewhere in [Send, Recv] of its call, and
// the denial was decided somewhere in [Send, Recv] of its own; a charge may
// lie between the two whenever its call's interval ends after the reset's
// Send and begins before the denial's Recv (a call in flight while the
// reset ran may have reached the store after it). Every such call counts,
// not only admissions: a call that timed out, failed or was answered in a
// degraded mode may still have run in the store. Only a denial decided by
// the store (not degraded) is known to have charged nothing. So the checker
// reports a denial only when fewer than the quota could have been charged
// after the reset: certain, whatever the order inside the intervals.
func checkResets(b bounds, key string, evs []Event, rs []Reset) []Violation {
	r := b.r
	var vs []Violation
	for _, rst := range rs {
		settle := rst.Recv + r.PropagationUS
		for i, e := range evs {
			if e.Send < settle || e.Verdict != Denied || e.Degraded != "" {
				continue
			}
			if r.Kind == "window" && e.Send/r.WindowUS != rst.Recv/r.WindowUS {
				break // a new window: the reset no longer decides (evs are sorted by Send)
			}
			since := chargedBetween(evs, i, rst.Send, e.Recv)
			if since+e.Cost <= b.smallest(rst.Send, e.Recv) {
				vs = append(vs, Violation{"reset", r.Name, key,
					fmt.Sprintf("denied at %d µs, %d µs after a reset was answered, with at most %d charged since the reset was sent (quota %d)", e.Send, e.Send-rst.Recv, since, r.Quota)})
				break
			}
		}
	}
	return vs
}

// chargedBetween is the most the events other than evs[skip] may have
// charged within (from, to): the cost of every call that may have charged
// (all but the store's own denials) whose interval overlaps it. A call
// never answered (Recv 0) may have charged at any time after its Send.
func chargedBetween(evs []Event, skip int, from, to int64) int64 {
	var n int64
	for i, x := range evs {
		if i == skip || x.Verdict == Denied && x.Degraded == "" {
			continue
		}
		if x.Send < to && (x.Recv == 0 || x.Recv > from) {
			n += x.Cost
		}
	}
	return n
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// Summary renders a report in a few lines.
func (r Report) Summary() string {
	var b strings.Builder
	names := make([]string, 0, len(r.Worst))
	for n := range r.Worst {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "%d events, %d violations\n", r.Events, len(r.Violations))
	if p := r.Placement; p.Admissions > 0 {
		fmt.Fprintf(&b, "  window admissions: %d; placed by their decision instant %d (unplaced %d); by [send, recv] unplaced %d\n",
			p.Admissions, p.ByInstant, p.InstantUnplaced, p.IntervalUnplaced)
	}
	for _, n := range names {
		w := r.Worst[n]
		fmt.Fprintf(&b, "  %-24s worst %d of bound %d", n, w.Admitted, w.Bound)
		if m, ok := r.Moved[n]; ok {
			fmt.Fprintf(&b, "; across a fault %d of bound %d", m.Admitted, m.Bound)
		}
		if l, ok := r.Local[n]; ok {
			fmt.Fprintf(&b, "; on its own %d of share %d", l.Admitted, l.Bound)
		}
		if f, ok := r.Fleet[n]; ok {
			fmt.Fprintf(&b, "; the fleet %d of bound %d", f.Admitted, f.Bound)
		}
		b.WriteString("\n")
	}
	for i, v := range r.Violations {
		if i == 20 {
			fmt.Fprintf(&b, "  … %d more\n", len(r.Violations)-20)
			break
		}
		fmt.Fprintf(&b, "  VIOLATION %s\n", v)
	}
	return b.String()
}

// WindowCount is one epoch-aligned window of a rule as the checker counts
// it: the admissions certainly inside it that count against the shared
// bound, and that bound.
type WindowCount struct {
	From, To        int64 // µs
	Admitted, Bound int64
}

// Windows returns, for one rule and key of h, every window from the first
// recorded decision to the last (for a plot; window rules are checked this
// way, log and bucket rules by spans). Windows with a reset count only what
// came after it, as the check does. Unknown rules give nil.
func Windows(h History, rule, key string) []WindowCount {
	var r Rule
	found := false
	for _, x := range h.Rules {
		if x.Name == rule {
			r, found = x, true
		}
	}
	if !found || r.WindowUS <= 0 {
		return nil
	}
	b := bounds{r: r}
	for _, c := range h.Changes {
		if c.Rule == rule {
			b.changes = append(b.changes, c)
		}
	}
	sort.Slice(b.changes, func(i, j int) bool { return b.changes[i].Send < b.changes[j].Send })
	for _, f := range h.Faults {
		if f.Kind == "loss" {
			b.losses = append(b.losses, f)
		}
	}
	var rs []Reset
	for _, x := range h.Resets {
		if x.Rule == rule && x.Key == key {
			rs = append(rs, x)
		}
	}
	var evs []Event
	var first, last int64 = -1, -1
	for _, e := range h.Events {
		if e.Rule != rule || e.Key != key {
			continue
		}
		evs = append(evs, e)
		if first < 0 || e.Send < first {
			first = e.Send
		}
		last = max(last, e.Send)
	}
	if first < 0 {
		return nil
	}
	counts := map[int64][]Event{}
	for _, e := range evs {
		if !counted(e) || e.Recv == 0 {
			continue
		}
		if e.Decided != 0 && e.Decided >= e.Send && e.Decided <= e.Recv {
			counts[e.Decided/r.WindowUS] = append(counts[e.Decided/r.WindowUS], e)
		} else if e.Send/r.WindowUS == (e.Recv-1)/r.WindowUS {
			counts[e.Send/r.WindowUS] = append(counts[e.Send/r.WindowUS], e)
		}
	}
	var out []WindowCount
	for w := first / r.WindowUS; w <= last/r.WindowUS; w++ {
		from, to := w*r.WindowUS, (w+1)*r.WindowUS
		in := counts[w]
		if hasReset(rs, from, to) {
			in = afterReset(in, rs, to)
		}
		var n int64
		for _, e := range in {
			n += e.Cost
		}
		out = append(out, WindowCount{From: from, To: to, Admitted: n, Bound: b.quota(from, to-1)})
	}
	return out
}
