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

// slotRules: at most 3 streams in flight per API key, paired by the
// request id entry; a lost stream's slot is freed after 10 minutes.
const slotRules = `domain: llm
descriptors:
  - key: api_key
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, window: 10m, requests_per_unit: 3, pair_by: request_id}
`

// TestStreamSlotsHTTP: paired stream slots over HTTP, on memory and
// Redis: POST /v1/check acquires; the slot is released by POST
// /v1/release with lease 0 (the request id names it) or by POST /json
// with is_negative_hits, as Envoy's stream-done call; duplicates free
// nothing; a lost slot expires after the rule's window.
func TestStreamSlotsHTTP(t *testing.T) {
	run := func(t *testing.T, st sluice.Store, clock *storetest.Clock) {
		snap, err := rules.Parse("llm.yaml", []byte(slotRules), rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, st, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		h, err := New(Options{Checker: e})
		if err != nil {
			t.Fatal(err)
		}
		body := func(id string) string {
			return fmt.Sprintf(`{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"k"},{"key":"request_id","value":%q}]}]}`, id)
		}
		check := func(t *testing.T, id string) bool {
			t.Helper()
			code, _, out := do(t, h, "POST", "/v1/check", body(id))
			var resp CheckResponse
			if err := json.Unmarshal([]byte(out), &resp); err != nil || (code != http.StatusOK && code != http.StatusTooManyRequests) {
				t.Fatalf("POST /v1/check %s = %d %s (%v), want 200 or 429", id, code, out, err)
			}
			return resp.Allowed
		}
		expect := func(t *testing.T, what, id string, want bool) {
			t.Helper()
			if got := check(t, id); got != want {
				t.Errorf("%s: allowed = %v, want %v", what, got, want)
			}
		}
		release := func(t *testing.T, id string) {
			t.Helper()
			b := body(id)
			b = b[:len(b)-1] + `,"leases":[0]}`
			if code, _, out := do(t, h, "POST", "/v1/release", b); code != http.StatusNoContent {
				t.Fatalf("POST /v1/release %s = %d %s, want 204", id, code, out)
			}
		}
		streamDone := func(t *testing.T, id string) {
			t.Helper()
			b := fmt.Sprintf(`{"domain":"llm","descriptors":[{"entries":[{"key":"api_key","value":"k"},{"key":"request_id","value":%q}],"isNegativeHits":true}]}`, id)
			if code, _, out := do(t, h, "POST", "/json", b); code != http.StatusOK {
				t.Fatalf("POST /json (stream done) %s = %d %s, want 200", id, code, out)
			}
		}

		const n = 10
		var mu sync.Mutex
		var in []string
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprint("s", i)
				if check(t, id) {
					mu.Lock()
					in = append(in, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if len(in) != 3 {
			t.Fatalf("%d concurrent checks: %d admitted, want 3", n, len(in))
		}
		expect(t, "a fourth stream", "x1", false)
		release(t, in[0])
		expect(t, "a stream after POST /v1/release", "x2", true)
		release(t, in[0])
		expect(t, "a stream after a duplicate release", "x3", false)
		streamDone(t, in[1])
		expect(t, "a stream after the stream-done call on /json", "x4", true)
		streamDone(t, in[1])
		expect(t, "a stream after a duplicate stream-done call", "x5", false)
		clock.Advance(10*time.Minute + time.Second)
		for i := range 3 {
			expect(t, fmt.Sprintf("stream %d after the lost slots expired", i), fmt.Sprint("y", i), true)
		}
		expect(t, "a fourth stream after", "y3", false)
	}
	t.Run("memory", func(t *testing.T) {
		clock := storetest.NewClock()
		st := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		run(t, st, clock)
	})
	t.Run("redis", func(t *testing.T) {
		url := redistest.Start(t).URL()
		clock := storetest.NewClock()
		st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		run(t, st, clock)
	})
}
