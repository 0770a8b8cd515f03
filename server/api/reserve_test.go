package api

import (
	"encoding/json"
	"fmt"
	"net/http"
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

// reserveRules: a budget of 1000 tokens an hour per API key, reserved on
// the request path (100 when the call carries no hits) and settled at
// stream end, paired by the request id entry; a reservation waits 10m for
// its settle.
const reserveRules = `domain: llm
descriptors:
  - key: api_key
    descriptors:
      - key: request_id
        rate_limit: {unit: hour, requests_per_unit: 1000, settle: reserve, pair_by: request_id, reserve: 100, settle_within: 10m}
`

// TestReserveSettleHTTP: reserve-then-settle over HTTP, on memory, Redis
// and a Redis Cluster, with two handlers (two instances) on one store:
// POST /v1/check reserves on one; the settle comes through the other, on
// /v1/check or on /json as Envoy's stream-done call (hitsAddend). N
// concurrent reservations of max_tokens admit no more than the budget;
// settles larger, smaller, duplicate, of a denied request, and after the
// record expired.
func TestReserveSettleHTTP(t *testing.T) {
	run := func(t *testing.T, st sluice.Store, clock *storetest.Clock) {
		snap, err := rules.Parse("llm.yaml", []byte(reserveRules), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		handler := func() http.Handler {
			e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			h, err := New(Options{Checker: e})
			if err != nil {
				t.Fatal(err)
			}
			return h
		}
		one, two := handler(), handler()
		// v1 is /v1/check for id with hits on the descriptor ("" for none).
		v1 := func(t *testing.T, h http.Handler, id, hits string) (bool, int64) {
			t.Helper()
			h1 := ""
			if hits != "" {
				h1 = `,"hits":` + hits
			}
			body := fmt.Sprintf(`{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"k"},{"key":"request_id","value":%q}]%s}]}`, id, h1)
			code, _, out := do(t, h, "POST", "/v1/check", body)
			var resp CheckResponse
			if err := json.Unmarshal([]byte(out), &resp); err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
				t.Fatalf("POST /v1/check %s = %d %s (%v), want 200 or 429", id, code, out, err)
			}
			return resp.Allowed, resp.Statuses[0].Remaining
		}
		// envoy is /json, Envoy's protojson, for id with hitsAddend on
		// the request.
		envoy := func(t *testing.T, h http.Handler, id string, hits int) (bool, int64) {
			t.Helper()
			body := fmt.Sprintf(`{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"k"},{"key":"request_id","value":%q}]}],"hitsAddend":%d}`, id, hits)
			code, _, out := do(t, h, "POST", "/json", body)
			var resp struct {
				OverallCode string `json:"overallCode"`
				Statuses    []struct {
					LimitRemaining int64 `json:"limitRemaining"`
				} `json:"statuses"`
			}
			if err := json.Unmarshal([]byte(out), &resp); err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
				t.Fatalf("POST /json %s = %d %s (%v), want 200 or 429", id, code, out, err)
			}
			return resp.OverallCode == "OK", resp.Statuses[0].LimitRemaining
		}
		expect := func(t *testing.T, what string, ok bool, rem int64, wantOK bool, wantRem int64) {
			t.Helper()
			if ok != wantOK || rem != wantRem {
				t.Errorf("%s: allowed %v, remaining %d; want %v, %d", what, ok, rem, wantOK, wantRem)
			}
		}

		const n, maxTokens = 30, 70
		var mu sync.Mutex
		var in []string
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprint("r", i)
				if ok, _ := v1(t, one, id, fmt.Sprint(maxTokens)); ok {
					mu.Lock()
					in = append(in, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(in) != 1000/maxTokens || len(in)*maxTokens > 1000 {
			t.Fatalf("%d concurrent reservations of %d: %d admitted; want %d (at most 1000 reserved)", n, maxTokens, len(in), 1000/maxTokens)
		}
		ok, rem := v1(t, one, "d1", "")
		expect(t, "a check without hits reserves the rule's 100: denied", ok, rem, false, 20)
		ok, rem = envoy(t, two, in[0], 100)
		expect(t, "stream done on /json, usage 100: charges 30", ok, rem, true, 0)
		ok, rem = v1(t, two, in[1], "20")
		expect(t, "settle on /v1/check, usage 20: refunds 50", ok, rem, true, 40)
		ok, rem = envoy(t, two, in[1], 20)
		expect(t, "a duplicate settle: ignored", ok, rem, true, 40)
		ok, rem = envoy(t, two, "d1", 0)
		expect(t, "stream done of the denied request: ignored", ok, rem, true, 40)
		clock.Advance(10*time.Minute + time.Second)
		ok, rem = envoy(t, two, in[2], 30)
		expect(t, "a stream done after its record expired: reserves 30", ok, rem, true, 10)
	}
	t.Run("memory", func(t *testing.T) {
		clock := storetest.NewClock()
		st := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		run(t, st, clock)
	})
	for _, mode := range []string{"redis", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			url := ""
			if mode == "redis" {
				url = redistest.Start(t).URL()
			} else {
				url = redistest.StartCluster(t).URL()
			}
			clock := storetest.NewClock()
			st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			run(t, st, clock)
		})
	}
}
