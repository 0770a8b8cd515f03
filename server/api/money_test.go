package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// TestMoneyBudgetsHTTP: the example money budgets (examples/llm) over
// POST /v1/check, on memory and Redis: concurrent stream-end calls are
// all charged at the example table's prices to the key's and the team's
// budgets, the request path is denied once the key's is spent, a model
// the table does not price is refused (reason unknown_model), and
// usage no counter can take is a 400.
func TestMoneyBudgetsHTTP(t *testing.T) {
	yaml, err := os.ReadFile("../../examples/llm/rules/budgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	prices := "currency: USD\nmodels:\n  gpt-4o: {input: 2500000, cached_read: 1250000, output: 10000000}\n"
	table, err := rules.ParsePrices("prices.yaml", []byte(prices))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := rules.Parse("budgets.yaml", yaml, rules.Options{Prices: table})
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, st sluice.Store) {
		e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(Options{Checker: e})
		if err != nil {
			t.Fatal(err)
		}
		body := func(key, model string, in, out, cached string) string {
			usage := fmt.Sprintf(`{"key":"model","value":%q},{"key":"input_tokens","value":%q},{"key":"output_tokens","value":%q},{"key":"cached_tokens","value":%q}`, model, in, out, cached)
			return fmt.Sprintf(`{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":%q},%s]},{"entries":[{"key":"team","value":"t"},%s]}]}`, key, usage, usage)
		}
		check := func(t *testing.T, b string) (int, CheckResponse) {
			t.Helper()
			code, _, out := do(t, h, "POST", "/v1/check", b)
			var resp CheckResponse
			if code != http.StatusBadRequest {
				if err := json.Unmarshal([]byte(out), &resp); err != nil {
					t.Fatalf("POST /v1/check = %d %s: %v", code, out, err)
				}
			}
			return code, resp
		}

		// 8 concurrent stream ends of 1000 input, 1000 cached and 1000
		// output tokens: 13 750 µ$ each.
		const n = 8
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if code, resp := check(t, body("k1", "gpt-4o", "1000", "1000", "1000")); code != http.StatusOK || !resp.Allowed {
					t.Errorf("stream end: %d %+v", code, resp)
				}
			}()
		}
		wg.Wait()
		code, resp := check(t, body("k1", "gpt-4o", "0", "0", "0"))
		if code != http.StatusOK || resp.Statuses[0].Remaining != 50_000_000-n*13_750 || resp.Statuses[1].Remaining != 2_000_000_000-n*13_750 {
			t.Fatalf("after %d calls: %d %+v; want %d and %d left", n, code, resp, 50_000_000-n*13_750, 2_000_000_000-n*13_750)
		}
		// $50 of output tokens (5M at $10/M): k1 is spent, k2 is not.
		check(t, body("k1", "gpt-4o", "0", "5000000", "0"))
		if code, resp := check(t, body("k1", "gpt-4o", "0", "0", "0")); code != http.StatusOK || resp.Allowed || resp.Reason != "limited" || resp.Statuses[0].Code != "OVER_LIMIT" || resp.Statuses[1].Code != "OK" {
			t.Errorf("k1 spent: %d %+v; want denied by the key (limited), the team OK", code, resp)
		}
		if code, _ := check(t, body("k2", "gpt-4o", "0", "0", "0")); code != http.StatusOK {
			t.Errorf("k2 of the same team: %d, want 200", code)
		}
		// A model the table does not price.
		code, resp = check(t, body("k2", "gpt-9", "0", "0", "0"))
		if code != http.StatusOK || resp.Allowed || resp.Reason != "unknown_model" || resp.Statuses[0].Reason != "unknown_model" {
			t.Errorf("unknown model: %d %+v; want denied, reason unknown_model", code, resp)
		}
		// Token counts that are no whole number, or a cost above what a
		// counter holds: the request is refused as invalid.
		for _, b := range []string{body("k2", "gpt-4o", "ten", "0", "0"), body("k2", "gpt-4o", "0", "9007199254740991", "0")} {
			if code, _ := check(t, b); code != http.StatusBadRequest {
				t.Errorf("bad usage: %d, want 400", code)
			}
		}
		if _, resp := check(t, body("k2", "gpt-4o", "0", "0", "0")); resp.Statuses[0].Remaining != 50_000_000 {
			t.Errorf("k2 after refused calls: %d left, want all of it", resp.Statuses[0].Remaining)
		}
	}
	t.Run("memory", func(t *testing.T) {
		clock := storetest.NewClock()
		st := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		run(t, st)
	})
	t.Run("redis", func(t *testing.T) {
		clock := storetest.NewClock()
		st, err := redis.New(redis.Options{URL: redistest.Start(t).URL(), Now: clock.Now, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		run(t, st)
	})
}
