package service

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
)

// pairRules: at most 3 streams in flight per key, each slot paired with
// its release by the request_id entry, lost slots expiring after 10m.
const pairRules = `domain: llm
descriptors:
  - key: key
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, window: 10m, requests_per_unit: 3, pair_by: request_id}
`

// stream is the descriptor an Envoy sends for request id of key k, on the
// request path (done false) or at stream end with is_negative_hits.
func stream(k, id string, done bool) Request {
	d := desc("key", k, "request_id", id)
	d.Refund = done
	return Request{Domain: "llm", Descriptors: []Descriptor{d}}
}

// TestPairedSlots: stream slots paired by request id, on memory.
func TestPairedSlots(t *testing.T) {
	testPairedSlots(t, newHarness(t, pairRules, DefaultConfig()))
}

// TestPairedSlotsRedis: the same on a real Redis, single and Cluster.
func TestPairedSlotsRedis(t *testing.T) {
	t.Parallel() // its own servers
	t.Run("single", func(t *testing.T) {
		t.Parallel() // a server of its own
		testPairedSlots(t, newRedisHarness(t, redistest.Start(t).URL(), pairRules))
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel() // a Cluster of its own
		testPairedSlots(t, newRedisHarness(t, redistest.StartCluster(t).URL(), pairRules))
	})
}

func testPairedSlots(t *testing.T, h *harness) {
	ctx := context.Background()
	allowed := func(t *testing.T, req Request) bool {
		t.Helper()
		resp, err := h.eng.Check(ctx, req)
		if err != nil {
			t.Fatalf("Check(%v): %v", req.Descriptors[0].Entries, err)
		}
		return resp.OverallCode == CodeOK
	}
	expect := func(t *testing.T, what string, req Request, want bool) {
		t.Helper()
		if got := allowed(t, req); got != want {
			t.Errorf("%s: allowed = %v, want %v", what, got, want)
		}
	}

	// N concurrent streams: exactly the limit admitted.
	const n = 16
	var mu sync.Mutex
	var admitted []string
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("r%d", i)
			resp, err := h.eng.Check(ctx, stream("k1", id, false))
			if err != nil {
				t.Errorf("Check(%s): %v", id, err)
				return
			}
			if resp.OverallCode == CodeOK {
				if resp.Statuses[0].Lease != pairLease(id) {
					t.Errorf("stream %s: lease %d, want %d (its request id, hashed)", id, resp.Statuses[0].Lease, pairLease(id))
				}
				mu.Lock()
				admitted = append(admitted, id)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(admitted) != 3 {
		t.Fatalf("%d concurrent streams: %d admitted (%v), want 3", n, len(admitted), admitted)
	}
	var denied string
	for i := range n {
		if id := fmt.Sprintf("r%d", i); !slices.Contains(admitted, id) {
			denied = id
			break
		}
	}
	expect(t, "a fourth stream while 3 are in flight", stream("k1", "new-1", false), false)
	expect(t, "another key's stream (its own counter)", stream("k2", "r0", false), true)
	expect(t, "a retried request-path check of a stream in flight (no second slot)", stream("k1", admitted[0], false), true)
	expect(t, "a fourth stream after the retry", stream("k1", "new-2", false), false)

	// The stream-done call of a stream that was denied frees nothing.
	expect(t, "stream done of a denied stream", stream("k1", denied, true), true)
	expect(t, "a fourth stream after a denied stream's end", stream("k1", "new-3", false), false)

	// A stream's end frees its slot, once.
	expect(t, "stream done", stream("k1", admitted[0], true), true)
	expect(t, "a stream after one ended", stream("k1", "new-4", false), true)
	expect(t, "a duplicate stream done", stream("k1", admitted[0], true), true)
	expect(t, "a stream after a duplicate stream done (nothing freed)", stream("k1", "new-5", false), false)

	// HTTP's POST /v1/release: the slot named by the request id, whatever lease is sent.
	req := stream("k1", admitted[1], false)
	if err := h.eng.ReleaseLeases(ctx, req, []uint64{0}); err != nil {
		t.Fatalf("ReleaseLeases: %v", err)
	}
	expect(t, "a stream after ReleaseLeases", stream("k1", "new-6", false), true)
	expect(t, "a stream after that", stream("k1", "new-7", false), false)

	// Lost streams: held until the window (10m) passes, then free.
	h.clock.Advance(10*time.Minute - time.Second)
	expect(t, "a stream 1s before lost slots expire", stream("k1", "new-8", false), false)
	h.clock.Advance(2 * time.Second)
	for i := range 3 {
		expect(t, fmt.Sprintf("stream %d after the lost slots expired", i), stream("k1", fmt.Sprintf("late-%d", i), false), true)
	}
	expect(t, "a fourth stream after", stream("k1", "late-3", false), false)
	// A stream whose slot expired ends late: it frees nothing of the new ones.
	expect(t, "the late end of an expired stream", stream("k1", admitted[2], true), true)
	expect(t, "a stream after a late end", stream("k1", "late-4", false), false)
}

// TestPairedKey: every request id of a key shares one counter key, which
// carries no request id.
func TestPairedKey(t *testing.T) {
	snap, err := rules.Parse("test.yaml", []byte(pairRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := snap.Match("llm", []rules.Entry{{Key: "key", Value: "k"}, {Key: "request_id", Value: "abc"}})
	a := string(appendRuleKey(nil, "llm", []rules.Entry{{Key: "key", Value: "k"}, {Key: "request_id", Value: "abc"}}, r, ruleMiddle(r), 0, nil))
	b := string(appendRuleKey(nil, "llm", []rules.Entry{{Key: "key", Value: "k"}, {Key: "request_id", Value: "xyz"}}, r, ruleMiddle(r), 0, nil))
	if a != b {
		t.Errorf("keys of two request ids differ: %q and %q, want one counter", a, b)
	}
	if pairLease("abc") == pairLease("xyz") || pairLease("") == 0 {
		t.Errorf("pairLease: abc %d xyz %d empty %d; want distinct, nonzero", pairLease("abc"), pairLease("xyz"), pairLease(""))
	}
}
