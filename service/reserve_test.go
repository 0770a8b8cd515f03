package service

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// reserveRules: a budget of 1000 tokens an hour per key and per team,
// reserved on the request path (100 when the call carries no hits) and
// settled at stream end, paired by request_id; a reservation waits 10m
// for its settle.
const reserveRules = `domain: llm
descriptors:
  - key: key
    descriptors:
      - key: request_id
        rate_limit: {unit: hour, requests_per_unit: 1000, settle: reserve, pair_by: request_id, reserve: 100, settle_within: 10m}
  - key: team
    descriptors:
      - key: request_id
        rate_limit: {algorithm: gcra, unit: hour, requests_per_unit: 3000, settle: reserve, pair_by: request_id, settle_within: 10m}
`

// llmCall is the descriptor Envoy sends for request id of key k, with
// hits (nil: none given), on the request path and again at stream end.
func llmCall(k, id string, hits *uint64) Request {
	d := desc("key", k, "request_id", id)
	d.Hits = hits
	return Request{Domain: "llm", Descriptors: []Descriptor{d}}
}

// TestReserveSettle: reserve-then-settle on memory.
func TestReserveSettle(t *testing.T) {
	h := newHarness(t, reserveRules, DefaultConfig())
	testReserveSettle(t, h.eng, h.eng, h.clock)
}

// TestReserveSettleRedis: the same on a real Redis, single and Cluster,
// with two engines (two instances of the service) sharing it: each
// request is reserved through one and settled through the other.
func TestReserveSettleRedis(t *testing.T) {
	t.Run("single", func(t *testing.T) {
		a, b, clock := twoRedisEngines(t, redistest.Start(t).URL(), reserveRules)
		testReserveSettle(t, a, b, clock)
	})
	t.Run("cluster", func(t *testing.T) {
		a, b, clock := twoRedisEngines(t, redistest.StartCluster(t).URL(), reserveRules)
		testReserveSettle(t, a, b, clock)
	})
}

// twoRedisEngines returns two engines, each with its own Redis store on
// url under one key prefix (two instances of a fleet), and their clock.
func twoRedisEngines(t *testing.T, url, yaml string) (a, b *Engine, clock *storetest.Clock) {
	t.Helper()
	clock = storetest.NewClock()
	prefix := fmt.Sprintf("t%d:", time.Now().UnixNano())
	snap, err := rules.Parse("a.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	engine := func() *Engine {
		st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second, Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		h := newHarnessSnap(t, snap, DefaultConfig(), st)
		h.eng.cfg.Now = clock.Now
		return h.eng
	}
	return engine(), engine(), clock
}

func testReserveSettle(t *testing.T, a, b *Engine, clock *storetest.Clock) {
	ctx := context.Background()
	call := func(t *testing.T, e *Engine, req Request) Status {
		t.Helper()
		resp, err := e.Check(ctx, req)
		if err != nil {
			t.Fatalf("Check(%v): %v", req.Descriptors[0].Entries, err)
		}
		if resp.Statuses[0].Code == CodeOK && resp.OverallCode != CodeOK {
			t.Fatalf("Check(%v): status OK, overall %v", req.Descriptors[0].Entries, resp.OverallCode)
		}
		return resp.Statuses[0]
	}
	expect := func(t *testing.T, what string, e *Engine, req Request, allowed bool, remaining int64) {
		t.Helper()
		st := call(t, e, req)
		if got := st.Code == CodeOK; got != allowed || st.Result.Remaining != remaining {
			t.Errorf("%s: allowed %v, remaining %d; want %v, %d", what, got, st.Result.Remaining, allowed, remaining)
		}
	}

	// N concurrent requests, each reserving max_tokens = 70 of a budget
	// of 1000, half through each instance: 14 fit (980), never more.
	const n, maxTokens = 40, 70
	var admitted []string
	var mu sync.Mutex
	var sum atomic.Int64
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, id := a, fmt.Sprintf("r%d", i)
			if i%2 == 1 {
				e = b
			}
			resp, err := e.Check(ctx, llmCall("k1", id, u64(maxTokens)))
			if err != nil {
				t.Errorf("Check(%s): %v", id, err)
				return
			}
			if resp.OverallCode == CodeOK {
				sum.Add(maxTokens)
				mu.Lock()
				admitted = append(admitted, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(admitted) != 1000/maxTokens || sum.Load() > 1000 {
		t.Fatalf("%d concurrent reservations of %d: %d admitted, %d reserved; want %d, at most 1000", n, maxTokens, len(admitted), sum.Load(), 1000/maxTokens)
	}
	var denied string
	for i := range n {
		if id := fmt.Sprintf("r%d", i); !slices.Contains(admitted, id) {
			denied = id
			break
		}
	}
	expect(t, "a new request when 20 are left (reserves 70)", a, llmCall("k1", "x1", u64(maxTokens)), false, 20)

	// Settles, each through the instance the request did not reserve on.
	expect(t, "settle larger than reserved (100: charges 30, into debt)", b, llmCall("k1", admitted[0], u64(100)), true, 0)
	expect(t, "settle smaller than reserved (20: refunds 50)", a, llmCall("k1", admitted[1], u64(20)), true, 40)
	expect(t, "a duplicate settle (ignored)", b, llmCall("k1", admitted[1], u64(20)), true, 40)
	expect(t, "settle of a denied request (ignored, nothing charged)", a, llmCall("k1", denied, u64(500)), true, 40)
	expect(t, "a denied request's retried call (ignored: its id is spent)", b, llmCall("k1", "x1", u64(1)), true, 40)
	expect(t, "settle of the usage reserved (no change)", b, llmCall("k1", admitted[2], u64(maxTokens)), true, 40)
	expect(t, "settle of no usage (refunds all 70)", a, llmCall("k1", admitted[3], u64(0)), true, 110)
	expect(t, "a call without hits reserves the rule's reserve (100)", a, llmCall("k1", "y1", nil), true, 10)
	expect(t, "its settle without hits is a usage of 0 (refunds 100)", b, llmCall("k1", "y1", nil), true, 110)
	expect(t, "a reservation of 110", b, llmCall("k1", "y2", u64(110)), true, 0)

	// The rest never settle: their reservations stand. 10m later the
	// records are gone: a late settle is a new reservation (here denied,
	// charging nothing).
	clock.Advance(10*time.Minute + time.Second)
	expect(t, "a settle after its record expired (a new reservation, denied)", a, llmCall("k1", admitted[4], u64(10)), false, 0)
	// Another key's budget is its own.
	expect(t, "another key", b, llmCall("k2", admitted[4], u64(10)), true, 990)
	// The next hour: the budget is back.
	clock.Advance(time.Hour)
	expect(t, "the next hour", a, llmCall("k1", "z1", u64(300)), true, 700)

	// Hierarchy: key and team in one request, all-or-nothing (key k3's
	// 1000 binds below team t's 3000). A request denied by one of them
	// reserves nothing on the other, and its later calls are ignored on
	// both.
	two := func(k, id string, hits uint64) Request {
		d1, d2 := desc("key", k, "request_id", id), desc("team", "t", "request_id", id)
		d1.Hits, d2.Hits = u64(hits), u64(hits)
		return Request{Domain: "llm", Descriptors: []Descriptor{d1, d2}}
	}
	both := func(t *testing.T, what string, e *Engine, req Request, allowed bool, remKey, remTeam int64) {
		t.Helper()
		resp, err := e.Check(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := resp.OverallCode == CodeOK; got != allowed || resp.Statuses[0].Result.Remaining != remKey || resp.Statuses[1].Result.Remaining != remTeam {
			t.Errorf("%s: allowed %v, remaining %d and %d; want %v, %d and %d", what, got,
				resp.Statuses[0].Result.Remaining, resp.Statuses[1].Result.Remaining, allowed, remKey, remTeam)
		}
	}
	both(t, "key and team reserve 900", a, two("k3", "h1", 900), true, 100, 2100)
	both(t, "200 more: key denies, team not charged", b, two("k3", "h2", 200), false, 100, 2100)
	both(t, "h1 settles 950 on both", b, two("k3", "h1", 950), true, 50, 2050)
	both(t, "h1 again: ignored on both", a, two("k3", "h1", 950), true, 50, 2050)
	// h2's team reservation was undone with the request and voided (its
	// record says denied): its next call (its settle at stream end) is
	// ignored on both, charging nothing.
	both(t, "h2's stream done, usage 0: ignored on both", b, two("k3", "h2", 0), true, 50, 2050)
}
