package check

import (
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

func TestSummaryNamesViolations(t *testing.T) {
	rep := Check(History{Rules: rules, Events: times("log", 4, 0, 100*ms)})
	if s := rep.Summary(); !strings.Contains(s, "VIOLATION log") || !strings.Contains(s, "1 violations") {
		t.Errorf("summary:\n%s\nwant the log violation named", s)
	}
}
