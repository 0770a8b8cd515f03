package service

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCrossedLevels: the arithmetic of a crossing, level by level: a
// level L of limit N is reached at ceil(L% × N) units used, and an op
// taking the use from before to after crosses it when before < that ≤
// after.
func TestCrossedLevels(t *testing.T) {
	std := []uint8{50, 80, 100}
	for _, tc := range []struct {
		levels               []uint8
		limit, before, after int64
		want                 []uint8
	}{
		{std, 10, 0, 1, nil},
		{std, 10, 4, 5, []uint8{50}},
		{std, 10, 5, 6, nil}, // 50 % reached already
		{std, 10, 4, 8, []uint8{50, 80}},
		{std, 10, 0, 10, []uint8{50, 80, 100}},
		{std, 10, 9, 10, []uint8{100}},
		{std, 10, 10, 10, nil}, // nothing used (a look)
		{std, 10, 7, 7, nil},
		{std, 3, 1, 2, []uint8{50}},      // ceil(1.5) = 2
		{std, 3, 2, 3, []uint8{80, 100}}, // ceil(2.4) = 3
		{std, 1, 0, 1, []uint8{50, 80, 100}},
		{std, 0, 0, 1, nil}, // a limit of 0 admits nothing
		{std, 100, -20, 49, nil},
		{std, 100, 79, 80, []uint8{80}},
		{std, 100, 80, 99, nil},
		{std, 100, 99, 100, []uint8{100}},
		{[]uint8{1}, 1_000_000, 9_999, 10_000, []uint8{1}},
		{[]uint8{1}, 1_000_000, 10_000, 10_001, nil},
		{[]uint8{33, 66, 99}, 1 << 40, 0, (1 << 40) * 66 / 100, []uint8{33}},   // 66% rounds down: below ceil
		{[]uint8{33, 66, 99}, 1 << 40, 0, (1<<40)*66/100 + 1, []uint8{33, 66}}, // …and one more reaches it
	} {
		from, to := crossedLevels(tc.levels, tc.limit, tc.before, tc.after)
		got := tc.levels[from:to]
		if fmt.Sprint(got) != fmt.Sprint(tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			t.Errorf("crossedLevels(%v, limit %d, %d → %d) = %v, want %v", tc.levels, tc.limit, tc.before, tc.after, got, tc.want)
		}
	}
}

// crossingLog is a Notifier that keeps what it hears.
type crossingLog struct {
	mu  sync.Mutex
	all []Crossing
}

func (l *crossingLog) Crossed(c Crossing) {
	l.mu.Lock()
	l.all = append(l.all, c)
	l.mu.Unlock()
}

// take returns what was heard since the last call, as "key@level".
func (l *crossingLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.all {
		out = append(out, fmt.Sprintf("%s@%d", c.Key, c.Level))
	}
	l.all = nil
	return out
}

const notifyRules = `
domain: llm
descriptors:
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 10, notify_at: [50, 80, 100]}
  - key: spend
    rate_limit: {unit: hour, requests_per_unit: 100, settle: after, notify_at: [50, 100]}
  - key: tight
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 10}
`

// The engine reports a crossing for each op that charged a notify_at
// counter across a level: admitted checks, settle-after charges in a
// check, and Engine.Charge; never a denied check, a look, a check the
// request's other limit denied, nor a rule without notify_at.
func TestNotifyCrossings(t *testing.T) {
	log := &crossingLog{}
	cfg := DefaultConfig()
	cfg.Notify = log
	h := newHarness(t, notifyRules, cfg)
	ctx := context.Background()
	check := func(hits uint64, ds ...Descriptor) Response {
		t.Helper()
		return h.check(t, Request{Domain: "llm", Descriptors: ds, Hits: hits})
	}
	var got []string
	for range 10 {
		check(1, desc("team", "a"))
		got = append(got, log.take()...)
	}
	if want := "[team=a@50 team=a@80 team=a@100]"; fmt.Sprint(got) != want {
		t.Errorf("ten checks of one unit on a limit of 10 heard %v, want %v", got, want)
	}
	if r := check(1, desc("team", "a")); r.OverallCode != CodeOverLimit || len(log.take()) != 0 {
		t.Errorf("a denied check: %v, heard a crossing (or was not denied)", r.OverallCode)
	}
	// One check crossing two levels tells both.
	check(8, desc("team", "b"))
	if got := log.take(); fmt.Sprint(got) != "[team=b@50 team=b@80]" {
		t.Errorf("a check of 8 of 10 heard %v, want 50 and 80", got)
	}
	// A check another limit denies charged nothing: no crossing.
	check(1, desc("tight", "x"))
	if r := check(5, desc("team", "c"), desc("tight", "x")); r.OverallCode != CodeOverLimit {
		t.Fatalf("check with a spent limit: %v, want denied", r.OverallCode)
	}
	if got := log.take(); len(got) != 0 {
		t.Errorf("a denied request heard %v", got)
	}
	// A look (hits 0) charges nothing.
	check(0, desc("team", "b"))
	check(5, desc("plain", "p"))
	if got := log.take(); len(got) != 0 {
		t.Errorf("a look and a rule without notify_at heard %v", got)
	}
	// Settle-after charges in a check, into debt too: a counter in debt
	// says Remaining 0, not how deep, so the engine reports every level
	// above use − cost again (50 here); the claim makes it once.
	check(60, desc("spend", "s"))
	check(70, desc("spend", "s"))
	if got := log.take(); fmt.Sprint(got) != "[spend=s@50 spend=s@50 spend=s@100]" {
		t.Errorf("settle-after charges of 60 then 70 of 100 heard %v, want 50, then 50 and 100", got)
	}
	// Engine.Charge.
	if _, err := h.eng.Charge(ctx, ChargeRequest{Domain: "llm", Descriptors: []ChargeDescriptor{{Entries: desc("team", "d").Entries, Cost: 9}}}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); fmt.Sprint(got) != "[team=d@50 team=d@80]" {
		t.Errorf("Charge of 9 of 10 heard %v, want 50 and 80", got)
	}
}

// A crossing says what it crossed: the limit in force, the use after the
// op, when the period ends (the window's end), and a claim name in the
// counter's hash slot, one per level.
func TestNotifyCrossingFields(t *testing.T) {
	log := &crossingLog{}
	cfg := DefaultConfig()
	cfg.Notify = log
	h := newHarness(t, notifyRules, cfg)
	h.clock.Advance(20 * time.Minute) // into the hour
	h.check(t, Request{Domain: "llm", Descriptors: []Descriptor{desc("team", "z")}, Hits: 5})
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.all) != 1 {
		t.Fatalf("heard %d crossings, want 1", len(log.all))
	}
	c := log.all[0]
	if c.Domain != "llm" || c.Rule != "team" || c.Key != "team=z" || c.Level != 50 || c.Limit != 10 || c.Used != 5 {
		t.Errorf("crossing = %+v", c)
	}
	if !c.At.Equal(h.clock.Now()) {
		t.Errorf("At = %v, want the store's clock %v", c.At, h.clock.Now())
	}
	if want := h.clock.Now().Truncate(time.Hour).Add(time.Hour); !c.PeriodEnd.Equal(want) {
		t.Errorf("PeriodEnd = %v, want the window's end %v", c.PeriodEnd, want)
	}
	if !strings.HasSuffix(c.Claim, "|n50") || !strings.HasPrefix(c.Claim, "{llm|team=z") {
		t.Errorf("Claim = %q, want the counter's key (its hash tag) with |n50", c.Claim)
	}
}

// A calendar quota's crossing ends with its calendar period (midnight of
// the month's end in the rule's zone), not the store window's longer one.
func TestNotifyCalendarPeriodEnd(t *testing.T) {
	log := &crossingLog{}
	cfg := DefaultConfig()
	cfg.Notify = log
	h := newHarness(t, `
domain: llm
descriptors:
  - key: team
    rate_limit: {calendar: month, requests_per_unit: 100, notify_at: [80]}
`, cfg)
	h.eng.cfg.Now = h.clock.Now
	h.clock.Set(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC))
	h.check(t, Request{Domain: "llm", Descriptors: []Descriptor{desc("team", "t")}, Hits: 80})
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.all) != 1 {
		t.Fatalf("heard %d crossings, want 1", len(log.all))
	}
	if c, want := log.all[0], time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC); !c.PeriodEnd.Equal(want) || c.Level != 80 {
		t.Errorf("crossing %+v; want level 80 ending %v", c, want)
	}
}

// Looking for crossings costs a check that crosses nothing no
// allocation (and Check calls nothing else for a Notifier).
func TestNotifyNoAllocsWithoutCrossing(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters allocate")
	}
	log := &crossingLog{}
	cfg := DefaultConfig()
	cfg.Notify = log
	h := newHarness(t, `
domain: llm
descriptors:
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 1000000000, notify_at: [50, 80, 100]}
`, cfg)
	e := h.eng
	req := Request{Domain: "llm", Descriptors: []Descriptor{desc("team", "a")}}
	sc := new(scratch)
	if err := validate(&req, e.cfg.RequestBounds, sc); err != nil {
		t.Fatal(err)
	}
	resp := e.plan(e.policy(), sc, &req, nil)
	if err := e.decide(context.Background(), sc, &resp); err != nil {
		t.Fatal(err)
	}
	e.record(sc, &req, &resp)
	now := time.Now()
	if n := testing.AllocsPerRun(100, func() { e.notify(sc, &req, &resp, now) }); n != 0 {
		t.Errorf("notify allocates %v times for a check that crosses nothing, want 0", n)
	}
	if len(log.take()) != 0 {
		t.Error("a crossing was heard")
	}
}

// BenchmarkCheckNotify is BenchmarkCheck's serial loop on a notify_at
// rule that no check crosses, with and without a Notifier: what looking
// for crossings costs a check.
func BenchmarkCheckNotify(b *testing.B) {
	const rules = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000000000, notify_at: [50, 80, 100]}
`
	for _, tc := range []struct {
		name string
		n    Notifier
	}{{"without", nil}, {"with", &crossingLog{}}} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Notify = tc.n
			h := newHarness(b, rules, cfg)
			reqs := benchRequests()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := h.eng.Check(ctx, reqs[i%benchKeys]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
