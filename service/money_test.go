package service

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
)

// moneyRules: a budget per API key (0.05, 50 000 µ) and one per team
// (0.10), both counted in money from the model and the input and output
// tokens of each call, charged at stream end (settle: after).
const moneyRules = `domain: llm
descriptors:
  - key: key
    descriptors:
      - key: model
        descriptors:
          - key: in
            descriptors:
              - key: out
                rate_limit: {usage: {model: model, input: in, output: out}, budget: "0.05", calendar: month, settle: after}
  - key: team
    descriptors:
      - key: model
        descriptors:
          - key: in
            descriptors:
              - key: out
                rate_limit: {usage: {model: model, input: in, output: out}, budget: "0.10", calendar: month, settle: after}
`

// moneyPrices: m1 costs 1 µ an input token and 2 µ an output token.
const moneyPrices = "currency: USD\nmodels:\n  m1: {input: 1000000, output: 2000000}\n  free: {}\n"

func moneySnap(t *testing.T, prices string) *rules.Snapshot {
	t.Helper()
	return moneySnapOf(t, moneyRules, prices)
}

// moneySnapOf compiles a rule file with a price table.
func moneySnapOf(t testing.TB, yaml, prices string) *rules.Snapshot {
	t.Helper()
	table, err := rules.ParsePrices("prices.yaml", []byte(prices))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := rules.Parse("llm.yaml", []byte(yaml), rules.Options{Prices: table})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// call is the request of one LLM call of key k in team tm: on the
// request path (in and out "0") or at stream end with the tokens used.
func call(k, tm, model string, in, out int64) Request {
	i, o := strconv.FormatInt(in, 10), strconv.FormatInt(out, 10)
	return Request{Domain: "llm", Descriptors: []Descriptor{
		desc("key", k, "model", model, "in", i, "out", o),
		desc("team", tm, "model", model, "in", i, "out", o),
	}}
}

// TestMoneyBudgets: money budgets on memory.
func TestMoneyBudgets(t *testing.T) {
	testMoney(t, newHarnessSnap(t, moneySnap(t, moneyPrices), DefaultConfig(), nil))
}

// TestMoneyBudgetsRedis: the same on a real Redis, single and Cluster.
func TestMoneyBudgetsRedis(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		testMoney(t, newRedisHarnessSnap(t, redistest.Start(t).URL(), moneySnap(t, moneyPrices)))
	})
	t.Run("cluster", func(t *testing.T) {
		testMoney(t, newRedisHarnessSnap(t, redistest.StartCluster(t).URL(), moneySnap(t, moneyPrices)))
	})
}

func testMoney(t *testing.T, h *harness) {
	ctx := context.Background()
	// look checks the request path of k in tm and returns each budget's
	// remaining micro-units, and whether the call is admitted.
	look := func(t *testing.T, k, tm string) (key, team int64, ok bool) {
		t.Helper()
		resp := h.check(t, call(k, tm, "m1", 0, 0))
		return resp.Statuses[0].Result.Remaining, resp.Statuses[1].Result.Remaining, resp.OverallCode == CodeOK
	}
	done := func(t *testing.T, k, tm string, in, out int64) {
		t.Helper()
		resp := h.check(t, call(k, tm, "m1", in, out))
		if resp.OverallCode != CodeOK {
			t.Fatalf("stream end of %s: %v; a charge is never denied", k, resp.Statuses)
		}
	}

	// A look charges nothing; the stream end charges the tokens' price to
	// the key and the team: 10 000 in + 5 000 out = 20 000 µ.
	if k, tm, ok := look(t, "k1", "t1"); !ok || k != 50_000 || tm != 100_000 {
		t.Fatalf("first look: key %d, team %d, ok %v; want 50000, 100000, true", k, tm, ok)
	}
	done(t, "k1", "t1", 10_000, 5_000)
	if k, tm, ok := look(t, "k1", "t1"); !ok || k != 30_000 || tm != 80_000 {
		t.Fatalf("after one call: key %d, team %d, ok %v; want 30000, 80000, true", k, tm, ok)
	}

	// The lowest budget binds: k2 spends 20 000 of its 50 000 (the team
	// has 60 000 left), then k1 spends 60 000 (its own 30 000 and more:
	// a charge goes into debt) and the team's last: k2 still has 30 000
	// of its own, and is denied by the team's.
	done(t, "k2", "t1", 10_000, 5_000)
	done(t, "k1", "t1", 0, 30_000)
	resp := h.check(t, call("k2", "t1", "m1", 0, 0))
	if resp.OverallCode != CodeOverLimit || resp.Statuses[0].Code != CodeOK || resp.Statuses[0].Result.Remaining != 30_000 ||
		resp.Statuses[1].Code != CodeOverLimit {
		t.Errorf("k2 after the team is spent: %+v; want denied by the team alone, its key at 30000", resp.Statuses)
	}
	if _, _, ok := look(t, "k3", "t1"); ok {
		t.Error("a fresh key of a spent team was admitted")
	}
	if k, _, ok := look(t, "k4", "t2"); !ok || k != 50_000 {
		t.Errorf("a key of another team: %d, %v; want 50000, admitted", k, ok)
	}

	// Concurrent stream ends on one key and team: every charge counts,
	// exactly (never denied, the budget goes into debt).
	const n = 24
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := h.eng.Check(ctx, call("k5", "t3", "m1", int64(100+i), 0))
			if err != nil || resp.OverallCode != CodeOK {
				t.Errorf("charge %d: %v, %v", i, resp.Statuses, err)
			}
		}()
	}
	wg.Wait()
	want := int64(50_000)
	for i := range n {
		want -= int64(100 + i)
	}
	if k, tm, ok := look(t, "k5", "t3"); !ok || k != want || tm != 50_000+want {
		t.Errorf("after %d concurrent charges: key %d, team %d, ok %v; want %d, %d", n, k, tm, ok, want, 50_000+want)
	}
	resp = h.check(t, call("k6", "t4", "m1", 60_000, 0)) // one call over the key's whole budget: charged in full
	if resp.OverallCode != CodeOK {
		t.Errorf("a charge over the budget was denied: %+v", resp.Statuses)
	}
	if _, tm, ok := look(t, "k6", "t4"); ok || tm != 40_000 {
		t.Errorf("after a charge over the key's budget: team %d, admitted %v; want 40000, denied", tm, ok)
	}

	// A model the table does not price: refused (unknown_model), and
	// nothing counted, on either budget.
	resp = h.check(t, call("k4", "t2", "gpt-9", 0, 0))
	if resp.OverallCode != CodeOverLimit || resp.Statuses[0].Result.Reason != ReasonUnknownModel || resp.Statuses[0].Code != CodeOverLimit {
		t.Errorf("unknown model: %+v; want OVER_LIMIT with reason unknown_model", resp.Statuses)
	}
	resp = h.check(t, call("k4", "t2", "gpt-9", 5_000, 5_000))
	if resp.Statuses[0].Result.Reason != ReasonUnknownModel {
		t.Errorf("unknown model at stream end: %+v", resp.Statuses)
	}
	if k, tm, ok := look(t, "k4", "t2"); !ok || k != 50_000 || tm != 100_000 {
		t.Errorf("after calls of an unknown model: key %d, team %d; want nothing counted", k, tm)
	}
	// A free model costs nothing, whatever it uses.
	if resp := h.check(t, call("k4", "t2", "free", 1_000_000, 1_000_000)); resp.OverallCode != CodeOK {
		t.Errorf("free model: %+v", resp.Statuses)
	}

	// Usage no counter can take: an error, not a wrap and not a denial.
	for _, tc := range []struct{ in, out string }{{"abc", "0"}, {"-1", "0"}, {"0", "9007199254740991"}, {"", "0"}} {
		req := call("k4", "t2", "m1", 0, 0)
		req.Descriptors[0].Entries[2].Value, req.Descriptors[0].Entries[3].Value = tc.in, tc.out
		if _, err := h.eng.Check(ctx, req); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("in %q out %q: error %v, want ErrInvalidRequest", tc.in, tc.out, err)
		}
	}
	if k, tm, _ := look(t, "k4", "t2"); k != 50_000 || tm != 100_000 {
		t.Errorf("after refused usage: key %d, team %d; want nothing counted", k, tm)
	}
}

// TestMoneyUnknownModelKeepsCharges: a request refused for an unknown
// model takes nothing, but a charge of another descriptor (spent) stands.
func TestMoneyUnknownModelKeepsCharges(t *testing.T) {
	yaml := moneyRules + `  - key: tokens
    rate_limit: {unit: day, requests_per_unit: 1000, settle: after}
`
	h := newHarnessSnap(t, moneySnapOf(t, yaml, moneyPrices), DefaultConfig(), nil)
	tokens := desc("tokens", "k")
	tokens.Hits = u64(300)
	req := call("k", "t", "gpt-9", 10, 10)
	req.Descriptors = append(req.Descriptors, tokens)
	resp := h.check(t, req)
	if resp.OverallCode != CodeOverLimit || resp.Statuses[0].Result.Reason != ReasonUnknownModel || resp.Statuses[2].Code != CodeOK {
		t.Fatalf("statuses %+v", resp.Statuses)
	}
	look := desc("tokens", "k")
	look.Hits = u64(0)
	if st := h.check(t, Request{Domain: "llm", Descriptors: []Descriptor{look}}).Statuses[0]; st.Result.Remaining != 700 {
		t.Errorf("token counter remaining %d, want 700: the charge stands", st.Result.Remaining)
	}
	if got := h.decisions("llm", "key.model.in.out", OutcomeDenied); got != 1 {
		t.Errorf("denied decisions of the key's rule: %v, want 1", got)
	}
}

// TestMoneyDefaultModel: with default_model, a model not in the table
// pays that model's prices.
func TestMoneyDefaultModel(t *testing.T) {
	h := newHarnessSnap(t, moneySnap(t, "currency: EUR\ndefault_model: m1\nmodels:\n  m1: {input: 1000000, output: 2000000}\n"), DefaultConfig(), nil)
	h.check(t, call("k", "t", "gpt-9", 100, 100))
	if st := h.check(t, call("k", "t", "gpt-9", 0, 0)).Statuses[0]; st.Code != CodeOK || st.Result.Remaining != 50_000-300 {
		t.Errorf("after a call of an unlisted model: %+v; want 49700 left", st)
	}
}

// TestMoneyReloadPrices: a new snapshot with a new price table is the
// one the next check prices by.
func TestMoneyReloadPrices(t *testing.T) {
	src := &swapRules{}
	src.p.Store(moneySnap(t, moneyPrices))
	h := newHarnessSnap(t, src.Current(), DefaultConfig(), nil)
	eng, err := New(DefaultConfig(), src, h.store, h.m, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.eng = eng
	h.check(t, call("k", "t", "m1", 100, 0)) // 100 µ
	src.p.Store(moneySnap(t, "currency: USD\nmodels:\n  m1: {input: 5000000}\n"))
	h.check(t, call("k", "t", "m1", 100, 0)) // 500 µ
	if st := h.check(t, call("k", "t", "m1", 0, 0)).Statuses[0]; st.Result.Remaining != 50_000-600 {
		t.Errorf("remaining %d, want %d", st.Result.Remaining, 50_000-600)
	}
}

// TestMoneyUnknownModelShadow: a money rule in shadow mode that cannot
// price the model reports it, and the request is admitted and charged
// elsewhere, as for any shadow-mode denial.
func TestMoneyUnknownModelShadow(t *testing.T) {
	yaml := `domain: llm
descriptors:
  - key: key
    descriptors:
      - key: model
        descriptors:
          - key: in
            shadow_mode: true
            rate_limit: {usage: {model: model, input: in}, budget: "1", unit: day, settle: after}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
`
	h := newHarnessSnap(t, moneySnapOf(t, yaml, moneyPrices), DefaultConfig(), nil)
	req := Request{Domain: "llm", Descriptors: []Descriptor{desc("key", "k", "model", "gpt-9", "in", "0"), desc("user", "u")}}
	resp := h.check(t, req)
	if resp.OverallCode != CodeOK || !resp.Statuses[0].Shadowed || resp.Statuses[0].Result.Reason != ReasonUnknownModel || resp.Statuses[1].Result.Remaining != 4 {
		t.Errorf("statuses %+v; want admitted, the money rule shadowed (unknown_model), the user charged", resp.Statuses)
	}
	if got := h.decisions("llm", "key.model.in", OutcomeShadowDenied); got != 1 {
		t.Errorf("shadow-denied decisions %v, want 1", got)
	}
}
