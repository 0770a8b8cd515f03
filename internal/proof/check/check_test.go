package check

import (
	"reflect"
	"strings"
	"testing"
)

const ms = 1000 // µs

// allowed is one admission of cost 1 sent at t and answered 1 ms later.
func allowed(rule, key string, inst int, t int64) Event {
	return Event{Instance: inst, Rule: rule, Key: key, Cost: 1, Send: t, Recv: t + ms, Verdict: Allowed}
}

func times(rule string, n int, start, step int64) []Event {
	var evs []Event
	for i := range n {
		evs = append(evs, allowed(rule, "k", i%3, start+int64(i)*step))
	}
	return evs
}

var rules = []Rule{
	{Name: "win", Kind: "window", Quota: 5, WindowUS: 1000 * ms, LocalShare: 2, FailureMode: "local", PropagationUS: 100 * ms},
	{Name: "log", Kind: "log", Quota: 3, WindowUS: 1000 * ms},
	{Name: "bucket", Kind: "bucket", Quota: 10, WindowUS: 1000 * ms, Burst: 5},
	{Name: "closed", Kind: "window", Quota: 5, WindowUS: 1000 * ms, FailureMode: "closed"},
	{Name: "budget", Kind: "budget", Quota: 100, WindowUS: 1000 * ms, FailureMode: "closed"},
}

// reserved is an admitted reservation of cost units of rule budget, sent at
// t, whose request used use units.
func reserved(cost, use, t int64) Event {
	e := allowed("budget", "k", 0, t)
	e.Cost, e.Use = cost, use
	return e
}

// TestCheckerCatchesOvershootByOne: for every bound the checker holds a
// run to, a history exactly at the bound passes and the same history with
// one admission more fails, naming that bound. A checker that can never
// fail proves nothing.
func TestCheckerCatchesOvershootByOne(t *testing.T) {
	with := func(evs []Event, more ...Event) []Event { return append(append([]Event(nil), evs...), more...) }
	failedClosed := allowed("closed", "k", 0, 10*ms)
	failedClosed.Degraded = FailedClosed
	deniedClosed := failedClosed
	deniedClosed.Verdict = Denied
	localAt := func(inst int, t int64) Event {
		e := allowed("win", "k", inst, t)
		e.Degraded = Local
		return e
	}
	lost := allowed("win", "k", 0, 500*ms)
	lost.Recv, lost.Verdict = 0, ""
	timedOut := lost
	timedOut.Verdict = Timeout
	denied := func(t int64) Event {
		return Event{Rule: "win", Key: "k", Cost: 1, Send: t, Recv: t + ms, Verdict: Denied}
	}
	reset := Reset{Rule: "win", Key: "k", Send: 300 * ms, Recv: 301 * ms}
	atLimit := times("win", 5, 10*ms, 10*ms)
	tests := []struct {
		name   string
		ok     []Event
		over   []Event
		resets []Reset
		bound  string
	}{
		{"fixed window", atLimit, with(atLimit, allowed("win", "k", 1, 900*ms)), nil, "window"},
		{"sliding log", times("log", 3, 0, 100*ms), times("log", 4, 0, 100*ms), nil, "log"},
		// burst 5 at once, then one unit refilled within 100 ms (sent at 99
		// ms, answered at 100 ms); a seventh in that span is one too many.
		{"bucket", with(times("bucket", 5, 0, 0), allowed("bucket", "k", 0, 99*ms)),
			with(times("bucket", 5, 0, 0), allowed("bucket", "k", 0, 99*ms), allowed("bucket", "k", 1, 99*ms)), nil, "bucket"},
		{"local share", []Event{localAt(1, 10*ms), localAt(1, 20*ms)}, []Event{localAt(1, 10*ms), localAt(1, 20*ms), localAt(1, 30*ms)}, nil, "local"},
		{"fail closed", []Event{deniedClosed}, []Event{failedClosed}, nil, "fail-closed"},
		{"lost request", []Event{timedOut}, []Event{lost}, nil, "lost"},
		// After a reset (answered at 301 ms; propagation 100 ms), a denial
		// within the propagation time is allowed;
		// a denial after it, with nothing admitted since, contradicts it.
		{"reset", with(atLimit, denied(350*ms)), with(atLimit, denied(350*ms), denied(600*ms)), []Reset{reset}, "reset"},
		// A budget counts what the admitted requests used, not what they
		// reserved: with reservations never exceeded (max_tokens), at
		// most the quota; an under-estimate raises the bound by its excess.
		{"budget, max_tokens reservations", []Event{reserved(60, 50, 10*ms), reserved(50, 50, 20*ms)},
			[]Event{reserved(60, 50, 10*ms), reserved(50, 50, 20*ms), reserved(10, 1, 30*ms)}, nil, "budget"},
		{"budget, estimates", []Event{reserved(50, 80, 10*ms), reserved(50, 50, 20*ms)},
			[]Event{reserved(50, 80, 10*ms), reserved(50, 50, 20*ms), reserved(1, 1, 30*ms)}, nil, "budget"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if rep := Check(History{Rules: rules, Events: tc.ok, Resets: tc.resets}); !rep.OK() {
				t.Errorf("history at the bound: got violations, want none:\n%s", rep.Summary())
			}
			rep := Check(History{Rules: rules, Events: tc.over, Resets: tc.resets})
			found := false
			for _, v := range rep.Violations {
				found = found || v.Bound == tc.bound
			}
			if !found {
				t.Errorf("history one over the bound: got %v, want a %q violation", rep.Violations, tc.bound)
			}
		})
	}
}

// TestCheckerCertainOnly: an admission whose answer came back after the
// window ended may belong to either window, so it is held against neither:
// the checker reports only what must have happened.
func TestCheckerCertainOnly(t *testing.T) {
	evs := times("win", 5, 10*ms, 10*ms)
	straddle := allowed("win", "k", 2, 999*ms)
	straddle.Recv = 1002 * ms
	if rep := Check(History{Rules: rules, Events: append(evs, straddle)}); !rep.OK() {
		t.Errorf("got %v, want no violation for an admission that straddles the boundary", rep.Violations)
	}
}

// TestCheckerExemptions: what the documentation allows beyond the limit is
// not a violation: fail-open admissions, and a reset that restarts a count.
func TestCheckerExemptions(t *testing.T) {
	evs := times("win", 5, 10*ms, 10*ms)
	open := allowed("win", "k", 0, 200*ms)
	open.Degraded = FailedOpen
	if rep := Check(History{Rules: rules, Events: append(evs, open, open)}); !rep.OK() {
		t.Errorf("fail-open admissions over the quota: got %v, want none (open admits by design)", rep.Violations)
	}
	after := times("win", 5, 400*ms, 10*ms)
	r := Reset{Rule: "win", Key: "k", Send: 300 * ms, Recv: 301 * ms}
	if rep := Check(History{Rules: rules, Events: append(evs, after...), Resets: []Reset{r}}); !rep.OK() {
		t.Errorf("a full quota on each side of a reset: got %v, want none", rep.Violations)
	}
	if rep := Check(History{Rules: rules, Events: append(evs, append(after, allowed("win", "k", 0, 600*ms))...), Resets: []Reset{r}}); rep.OK() {
		t.Errorf("one over the quota after a reset: got no violation, want one")
	}
}

// TestCheckerCatchesOvershootByOneUnderFaults: the bounds a fault moves
// (a store that may lose charges; a reload that changes a limit) are held
// as tightly as the others: a history exactly at the moved bound passes,
// one admission more fails, naming the bound. And a bound moves only where
// the fault was: the same history without the fault fails.
func TestCheckerCatchesOvershootByOneUnderFaults(t *testing.T) {
	with := func(evs []Event, more ...Event) []Event { return append(append([]Event(nil), evs...), more...) }
	// A loss (a restart of a Redis without persistence, a failover) from
	// 400 to 450 ms: charges before it may be forgotten once.
	loss := []Fault{{Name: "redis restarted empty", Kind: "loss", Start: 400 * ms, End: 450 * ms}}
	// fw quota 5 → 2, written at 500 ms, on every instance by 520 ms.
	reload := []Change{{Rule: "win", Send: 500 * ms, Recv: 520 * ms, Quota: 2}}
	winLoss := with(times("win", 5, 10*ms, 10*ms), times("win", 5, 460*ms, 10*ms)...) // 2 × quota in one window
	logLoss := with(times("log", 3, 0, 100*ms), times("log", 3, 460*ms, 10*ms)...)    // 2 × quota within 1 s
	// A bucket (burst 5, 10/s): the burst at 0, a unit refilled every
	// 100 ms to 400 ms, then after the loss a full burst again at 460 ms and
	// one unit at 461 ms: 15 in [0, 462] ms = 2 × burst + ⌈4.62⌉.
	bucketLoss := with(times("bucket", 5, 0, 0), times("bucket", 4, 100*ms, 100*ms)...)
	bucketLoss = with(bucketLoss, times("bucket", 5, 460*ms, 0)...)
	bucketLoss = with(bucketLoss, allowed("bucket", "k", 1, 461*ms))
	winReload := with(times("win", 5, 10*ms, 10*ms), times("win", 2, 510*ms, 5*ms)...)     // old + new across the reload
	afterReload := with(times("win", 5, 10*ms, 10*ms), times("win", 2, 1100*ms, 10*ms)...) // the new quota in the next window
	tests := []struct {
		name    string
		ok      []Event
		over    []Event
		faults  []Fault
		changes []Change
		bound   string
	}{
		{"window across a loss", winLoss, with(winLoss, allowed("win", "k", 2, 700*ms)), loss, nil, "window"},
		{"log across a loss", logLoss, with(logLoss, allowed("log", "k", 2, 700*ms)), loss, nil, "log"},
		{"bucket across a loss", bucketLoss, with(bucketLoss, allowed("bucket", "k", 2, 300*ms)), loss, nil, "bucket"},
		{"window across a reload", winReload, with(winReload, allowed("win", "k", 2, 600*ms)), nil, reload, "window"},
		{"window after a reload", afterReload, with(afterReload, allowed("win", "k", 2, 1500*ms)), nil, reload, "window"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := History{Rules: rules, Events: tc.ok, Faults: tc.faults, Changes: tc.changes}
			if rep := Check(h); !rep.OK() {
				t.Errorf("history at the moved bound: got violations, want none:\n%s", rep.Summary())
			} else if m, ok := rep.Moved[tc.ok[0].Rule]; !ok || m.Admitted != m.Bound {
				t.Errorf("worst span across the fault: got %+v (reported %v), want one exactly at its moved bound", m, ok)
			}
			h.Events = tc.over
			rep := Check(h)
			found := false
			for _, v := range rep.Violations {
				found = found || v.Bound == tc.bound
			}
			if !found {
				t.Errorf("history one over the moved bound: got %v, want a %q violation", rep.Violations, tc.bound)
			}
			if len(tc.faults) > 0 {
				if rep := Check(History{Rules: rules, Events: tc.ok}); rep.OK() {
					t.Errorf("the same history without the fault: got no violation, want one (the bound moved where no fault was)")
				}
			}
		})
	}
}

// TestCheckerClockAhead: an instance whose clock runs ahead keeps its
// local share per window of its own clock. Instance 1, 500 ms ahead,
// admits its share of 2 at 300 ms and 2 more at 600 ms (its clock: 800 ms
// and 1.1 s, two windows): within its bound, though one window of the
// shared clock holds 4. A third in its second window is one too many; and
// without the clock fault on record the same history is over (the bound
// follows the fault, not the other way round).
func TestCheckerClockAhead(t *testing.T) {
	localAt := func(ts int64) Event {
		e := allowed("win", "k", 1, ts)
		e.Degraded = Local
		return e
	}
	evs := []Event{localAt(300 * ms), localAt(310 * ms), localAt(600 * ms), localAt(610 * ms)}
	clock := []Fault{{Name: "instance 1 clock +500 ms", Kind: "clock", Instance: 1, OffsetUS: 500 * ms, End: 2000 * ms}}
	if rep := Check(History{Rules: rules, Events: evs, Faults: clock}); !rep.OK() {
		t.Errorf("share per window of its clock: got %v, want none", rep.Violations)
	}
	rep := Check(History{Rules: rules, Events: with1(evs, localAt(620*ms)), Faults: clock})
	if rep.OK() || rep.Violations[0].Bound != "local" {
		t.Errorf("one over its share in its window: got %v, want a local violation", rep.Violations)
	}
	if rep := Check(History{Rules: rules, Events: evs}); rep.OK() {
		t.Errorf("the same history without the clock fault: got no violation, want a local one")
	}
}

// TestCheckerTenantReset: a tenant's override is a rule of its own to the
// checker (quota 2 here); after a reset of the tenant, a denial with less
// than that admitted since contradicts it, and the override's window bound
// holds as any other.
func TestCheckerTenantReset(t *testing.T) {
	rs := []Rule{{Name: "acme", Kind: "window", Quota: 2, WindowUS: 1000 * ms, FailureMode: "closed", PropagationUS: 100 * ms}}
	evs := times("acme", 2, 10*ms, 10*ms)
	if rep := Check(History{Rules: rs, Events: evs}); !rep.OK() {
		t.Fatalf("override at its quota: got %v, want none", rep.Violations)
	}
	if rep := Check(History{Rules: rs, Events: with1(evs, allowed("acme", "k", 0, 200*ms))}); rep.OK() {
		t.Errorf("override one over its quota: got no violation, want one")
	}
	reset := []Reset{{Rule: "acme", Key: "k", Send: 300 * ms, Recv: 301 * ms}}
	denied := Event{Rule: "acme", Key: "k", Cost: 1, Send: 600 * ms, Recv: 601 * ms, Verdict: Denied}
	okAfter := with1(evs, times("acme", 2, 450*ms, 10*ms)...)
	if rep := Check(History{Rules: rs, Events: with1(okAfter, denied), Resets: reset}); !rep.OK() {
		t.Errorf("denied after a full quota since the reset: got %v, want none", rep.Violations)
	}
	if rep := Check(History{Rules: rs, Events: with1(evs, allowed("acme", "k", 0, 450*ms), denied), Resets: reset}); rep.OK() {
		t.Errorf("denied with one admitted since the reset (quota 2): got no violation, want a reset violation")
	}
}

// TestCheckerResetInFlight: a call in flight while a reset ran (its
// interval ends after the reset was sent) may have been charged after the
// reset, and so may a call sent while the denial itself was in flight; a
// call that timed out or was answered degraded may have run in the store
// too. A denial is held against the reset only when fewer than the quota
// could have been charged since: a limiter that denies with such a count
// still fails, one whose count may include the calls in flight passes.
func TestCheckerResetInFlight(t *testing.T) {
	span := func(e Event, send, recv int64) Event {
		e.Send, e.Recv = send, recv
		return e
	}
	reset := []Reset{{Rule: "win", Key: "k", Send: 300 * ms, Recv: 301 * ms}}
	denial := Event{Rule: "win", Key: "k", Cost: 1, Send: 600 * ms, Recv: 610 * ms, Verdict: Denied}
	timedOut := Event{Rule: "win", Key: "k", Cost: 1, Send: 295 * ms, Verdict: Timeout}
	failedClosed := span(allowed("win", "k", 2, 0), 299*ms, 1200*ms)
	failedClosed.Verdict, failedClosed.Degraded = Denied, FailedClosed
	storeDenied := span(allowed("win", "k", 1, 0), 290*ms, 320*ms)
	storeDenied.Verdict = Denied
	before := times("win", 5, 10*ms, 10*ms) // the quota spent before the reset
	// Quota 5 may have been charged after the reset was sent: two
	// admissions answered after it (sent before), a timeout and a
	// fail-closed answer in flight across it, one admission sent while the
	// denial was in flight.
	inFlight := []Event{
		span(allowed("win", "k", 0, 0), 290*ms, 305*ms),
		span(allowed("win", "k", 1, 0), 299*ms, 300*ms+1),
		timedOut, failedClosed,
		span(allowed("win", "k", 2, 0), 605*ms, 606*ms),
		storeDenied, // charged nothing
	}
	tests := []struct {
		name string
		evs  []Event
		want bool // a reset violation
	}{
		{"quota may follow the reset", with1(before, append(with1(inFlight), denial)...), false},
		// The same, but the first admission was answered before the
		// reset was sent: only 4 may follow it.
		{"one answered before the reset", with1(before, append(with1(inFlight[1:], span(allowed("win", "k", 0, 0), 290*ms, 299*ms)), denial)...), true},
		// The same, but the last admission was sent after the denial was
		// answered: it cannot have preceded the denial.
		{"one sent after the denial", with1(before, append(with1(inFlight[:4], inFlight[5], span(allowed("win", "k", 2, 0), 611*ms, 612*ms)), denial)...), true},
		// Nothing in flight: the denial contradicts the reset outright.
		{"nothing in flight", with1(before, denial), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(History{Rules: rules, Events: tc.evs, Resets: reset})
			got := false
			for _, v := range rep.Violations {
				if v.Bound != "reset" {
					t.Errorf("unexpected violation %v", v)
				}
				got = got || v.Bound == "reset"
			}
			if got != tc.want {
				t.Errorf("reset violation: got %v (%v), want %v", got, rep.Violations, tc.want)
			}
		})
	}
}

func with1(evs []Event, more ...Event) []Event { return append(append([]Event(nil), evs...), more...) }

// TestJSONLRoundTrip: a history written as JSON lines reads back equal,
// and a line holding two things is an error naming the line.
func TestJSONLRoundTrip(t *testing.T) {
	h := History{Rules: rules, Events: times("win", 3, 0, ms),
		Resets:  []Reset{{Rule: "win", Key: "k", Send: 1, Recv: 2}},
		Faults:  []Fault{{Name: "x", Kind: "loss", Start: 3, End: 4}},
		Changes: []Change{{Rule: "win", Send: 5, Recv: 6, Quota: 7}}}
	var b strings.Builder
	if err := WriteJSONL(&b, h); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJSONL(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, h) {
		t.Errorf("read back:\n%+v\nwant\n%+v", got, h)
	}
	bad := b.String() + `{"rule":{"name":"a"},"reset":{"key":"b"}}` + "\n"
	if _, err := ReadJSONL(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "line") {
		t.Errorf("two things on a line: got %v, want an error naming the line", err)
	}
}

func TestSummaryNamesViolations(t *testing.T) {
	rep := Check(History{Rules: rules, Events: times("log", 4, 0, 100*ms)})
	if s := rep.Summary(); !strings.Contains(s, "VIOLATION log") || !strings.Contains(s, "1 violations") {
		t.Errorf("summary:\n%s\nwant the log violation named", s)
	}
}

// TestCheckerPlacesByInstant: an admission that straddles a window's edge
// is invisible to the interval placement, and placed exactly by its
// decision instant: a sixth admission decided inside a full window is a
// violation, the same one decided in the next window is not; an instant
// outside [Send, Recv] is not trusted (the interval places the event). Placement counts what each method placed.
func TestCheckerPlacesByInstant(t *testing.T) {
	straddle := func(decided int64) Event {
		e := allowed("win", "k", 2, 999*ms)
		e.Recv, e.Decided = 1002*ms, decided
		return e
	}
	contradicts := allowed("win", "k", 1, 500*ms) // interval in window 0
	contradicts.Decided = 1500 * ms               // outside [Send, Recv]: not used
	for _, tc := range []struct {
		name      string
		extra     Event
		violation string // the bound named, "" for none
		want      Placement
	}{
		{"decided in the full window", straddle(999*ms + 500), "window", Placement{Admissions: 6, ByInstant: 1, InstantUnplaced: 5, IntervalUnplaced: 1}},
		{"decided in the next window", straddle(1000 * ms), "", Placement{Admissions: 6, ByInstant: 1, InstantUnplaced: 5, IntervalUnplaced: 1}},
		{"no instant", straddle(0), "", Placement{Admissions: 6, InstantUnplaced: 6, IntervalUnplaced: 1}},
		{"instant outside the interval", contradicts, "window", Placement{Admissions: 6, InstantUnplaced: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			evs := append(times("win", 5, 10*ms, 10*ms), tc.extra)
			rep := Check(History{Rules: rules, Events: evs})
			got := ""
			if len(rep.Violations) > 0 {
				got = rep.Violations[0].Bound
			}
			if got != tc.violation || len(rep.Violations) > 1 {
				t.Errorf("violations %v, want one of bound %q (none if empty)", rep.Violations, tc.violation)
			}
			if rep.Placement != tc.want {
				t.Errorf("placement %+v, want %+v", rep.Placement, tc.want)
			}
			if !strings.Contains(rep.Summary(), "placed by their decision instant") {
				t.Errorf("summary %q does not say how many were placed by their decision instant", rep.Summary())
			}
		})
	}
}

// TestCheckerFleetTotal: for a rule in failure mode local the report says
// what the whole fleet admitted in one window of the shared clock — the
// store's admissions and every instance's own — against the quota plus each
// admitting instance's share (two shares for an instance whose clock is
// skewed: two windows of its clock overlap each shared one).
func TestCheckerFleetTotal(t *testing.T) {
	localAt := func(inst int, ts int64) Event {
		e := allowed("win", "k", inst, ts)
		e.Degraded = Local
		return e
	}
	shared := times("win", 5, 10*ms, 10*ms) // the quota, through the store
	tests := []struct {
		name   string
		evs    []Event
		faults []Fault
		want   Worst
	}{
		{"store only: no fleet figure", shared, nil, Worst{}},
		{"two instances at their shares", append(append([]Event(nil), shared...),
			localAt(1, 300*ms), localAt(1, 310*ms), localAt(2, 400*ms), localAt(2, 410*ms)), nil, Worst{9, 9}},
		{"one instance, one local", append(append([]Event(nil), shared...), localAt(1, 300*ms)), nil, Worst{6, 7}},
		// Instance 1 runs 500 ms ahead: its own windows [.5, 1.5) and
		// [1.5, 2.5) of the shared clock each allow 2, and both overlap
		// the shared window [1, 2), which may so hold 5 + 4.
		{"skewed instance", append(times("win", 5, 1010*ms, 10*ms),
			localAt(1, 1100*ms), localAt(1, 1200*ms), localAt(1, 1600*ms), localAt(1, 1700*ms)),
			[]Fault{{Kind: "clock", Instance: 1, OffsetUS: 500 * ms}}, Worst{9, 9}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(History{Rules: rules, Events: tc.evs, Faults: tc.faults})
			if !rep.OK() {
				t.Fatalf("violations: %v; want none", rep.Violations)
			}
			if got := rep.Fleet["win"]; got != tc.want {
				t.Errorf("Fleet[win] = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestCheckerBucketLongSpans: bucket spans are checked at every length and
// placed by the decisions' instants, so a refill rate 2 % too fast fails
// over a long span although every span of up to four windows passes, and
// the same history at the documented rate passes.
func TestCheckerBucketLongSpans(t *testing.T) {
	// bucket: 10 per 1 s, burst 5. The burst at once, then one admission
	// every gap, each decided at its instant (answer 1 ms either side).
	run := func(gap int64, n int) []Event {
		var evs []Event
		at := func(ts int64) Event {
			e := Event{Rule: "bucket", Key: "k", Cost: 1, Send: ts - ms, Recv: ts + ms, Verdict: Allowed, Decided: ts}
			return e
		}
		for range 5 {
			evs = append(evs, at(10*ms))
		}
		for i := 1; i <= n; i++ {
			evs = append(evs, at(10*ms+int64(i)*gap))
		}
		return evs
	}
	tests := []struct {
		name string
		evs  []Event
		ok   bool
	}{
		{"the documented rate", run(100*ms, 300), true},
		// 10.2 per second: 5 + 306 in 30 s where 5 + 300 are allowed. No
		// span of four windows or less is over (4 s hold 5 + 40 of a bound
		// of 5 + 40): only the long spans see it.
		{"2 % too fast", run(98*ms, 306), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(History{Rules: rules, Events: tc.evs})
			if rep.OK() != tc.ok {
				t.Fatalf("OK = %v, want %v; violations %v", rep.OK(), tc.ok, rep.Violations)
			}
			if !tc.ok && rep.Violations[0].Bound != "bucket" {
				t.Errorf("violation %v, want a bucket one", rep.Violations[0])
			}
		})
	}
}
