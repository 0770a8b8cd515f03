package service

import (
	"context"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
)

// envoyRules exercise Envoy's 2024–26 additions: settle-after costs,
// refunds, quota mode.
const envoyRules = `domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000, settle: after}
  - key: bucket
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token_bucket, settle: after}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: conn
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}
  - key: daily
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: monthly
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
`

// ai checks descriptors in domain ai.
func (h *harness) ai(t *testing.T, ds ...Descriptor) Response {
	t.Helper()
	return h.check(t, Request{Domain: "ai", Descriptors: ds})
}

// hits sets a descriptor's hits.
func hits(d Descriptor, n uint64) Descriptor {
	d.Hits = u64(n)
	return d
}

// refund makes a descriptor give n hits back.
func refund(d Descriptor, n uint64) Descriptor {
	d.Hits, d.Refund = u64(n), true
	return d
}

// TestSettleAfter: on a settle-after rule, hits are charged whatever is
// left (the counter goes into debt), and a look is denied, with the exact
// wait for one unit, until the debt is paid off.
func TestSettleAfter(t *testing.T) {
	testSettleAfter(t, newHarness(t, envoyRules, DefaultConfig()))
}

func testSettleAfter(t *testing.T, h *harness) {
	t.Run("fixed_window", func(t *testing.T) {
		d := desc("tenant", "acme")
		steps := []struct {
			name          string
			d             Descriptor
			want          Code
			wantRemaining int64
		}{
			{"look at a fresh counter", hits(d, 0), CodeOK, 1000},
			{"900 tokens used", hits(d, 900), CodeOK, 100},
			{"look with 100 left", hits(d, 0), CodeOK, 100},
			{"300 tokens with 100 left: charged", hits(d, 300), CodeOK, 0},
			{"another 300 in debt: charged", hits(d, 300), CodeOK, 0},
		}
		for i, st := range steps {
			resp := h.ai(t, st.d)
			if got := resp.Statuses[0]; resp.OverallCode != st.want || got.Result.Remaining != st.wantRemaining {
				t.Fatalf("step %d (%s): %v, remaining %d; want %v, %d", i, st.name, resp.OverallCode, got.Result.Remaining, st.want, st.wantRemaining)
			}
		}
		// 1500 of 1000 used in this minute: denied until it ends.
		resp := h.ai(t, hits(d, 0))
		wait := time.Minute - time.Duration(h.clock.Now().UnixNano())%time.Minute
		if got := resp.Statuses[0].Result.RetryAfter; resp.OverallCode != CodeOverLimit || got != wait {
			t.Fatalf("look in debt: %v, RetryAfter %v; want OVER_LIMIT, %v", resp.OverallCode, got, wait)
		}
		h.clock.Advance(wait - time.Microsecond)
		if got := h.ai(t, hits(d, 0)).OverallCode; got != CodeOverLimit {
			t.Fatalf("look 1µs before the window ends: %v, want OVER_LIMIT", got)
		}
		h.clock.Advance(time.Microsecond)
		if st := h.ai(t, hits(d, 0)).Statuses[0]; st.Code != CodeOK || st.Result.Remaining != 1000 {
			t.Fatalf("look in the next window: %v, remaining %d; want OK, 1000 (a look charges nothing)", st.Code, st.Result.Remaining)
		}
	})
	t.Run("token_bucket", func(t *testing.T) {
		d := desc("bucket", "acme")
		h.ai(t, hits(d, 900))
		h.ai(t, hits(d, 300)) // 200 in debt
		resp := h.ai(t, hits(d, 0))
		// One unit is back after 201 units' refill, 60ms each.
		want := 201 * 60 * time.Millisecond
		if got := resp.Statuses[0].Result.RetryAfter; resp.OverallCode != CodeOverLimit || got != want {
			t.Fatalf("look 200 in debt: %v, RetryAfter %v; want OVER_LIMIT, %v", resp.OverallCode, got, want)
		}
		h.clock.Advance(want - time.Microsecond)
		if got := h.ai(t, hits(d, 0)).OverallCode; got != CodeOverLimit {
			t.Fatalf("1µs before paid off: %v, want OVER_LIMIT", got)
		}
		h.clock.Advance(time.Microsecond)
		if st := h.ai(t, hits(d, 0)).Statuses[0]; st.Code != CodeOK || st.Result.Remaining != 1 {
			t.Fatalf("paid off: %v, remaining %d; want OK, 1", st.Code, st.Result.Remaining)
		}
	})
}

// TestSettleAfterDeniedRequest: a settle-after charge in a request another
// limit denies is still charged (the units were spent).
func TestSettleAfterDeniedRequest(t *testing.T) {
	testSettleAfterDeniedRequest(t, newHarness(t, envoyRules, DefaultConfig()))
}

func testSettleAfterDeniedRequest(t *testing.T, h *harness) {
	user := desc("user", "bob")
	h.ai(t, hits(user, 10))
	resp := h.ai(t, hits(desc("tenant", "acme"), 300), user)
	if resp.OverallCode != CodeOverLimit || resp.Statuses[0].Code != CodeOK || resp.Statuses[1].Code != CodeOverLimit {
		t.Fatalf("charge + user over: %v %v %v, want OVER_LIMIT (OK, OVER_LIMIT)", resp.OverallCode, resp.Statuses[0].Code, resp.Statuses[1].Code)
	}
	if got := h.ai(t, hits(desc("tenant", "acme"), 0)).Statuses[0].Result.Remaining; got != 700 {
		t.Errorf("tenant after the denied request: remaining %d, want 700", got)
	}
	// A look beside a plain limit: admitted, the look charges nothing and
	// the other limit is charged; denied when the plain limit is over.
	carol := desc("user", "carol")
	resp = h.ai(t, hits(desc("tenant", "acme"), 0), carol)
	if resp.OverallCode != CodeOK || resp.Statuses[0].Result.Remaining != 700 || resp.Statuses[1].Result.Remaining != 9 {
		t.Fatalf("look beside a plain limit: %v, remaining %d and %d; want OK, 700, 9", resp.OverallCode, resp.Statuses[0].Result.Remaining, resp.Statuses[1].Result.Remaining)
	}
	if resp = h.ai(t, hits(desc("tenant", "acme"), 0), user); resp.OverallCode != CodeOverLimit {
		t.Fatalf("look beside an exhausted limit: %v, want OVER_LIMIT", resp.OverallCode)
	}
	if got := h.ai(t, hits(desc("tenant", "acme"), 0)).Statuses[0].Result.Remaining; got != 700 {
		t.Errorf("tenant after looks: remaining %d, want 700 (a look charges nothing)", got)
	}
}

// TestRefund: is_negative_hits gives units back, never past a fresh
// counter, even in a request another limit denies; a concurrency rule is
// left alone.
func TestRefund(t *testing.T) {
	testRefund(t, newHarness(t, envoyRules, DefaultConfig()))
}

func testRefund(t *testing.T, h *harness) {
	user := desc("user", "bob")
	steps := []struct {
		name          string
		d             Descriptor
		wantRemaining int64
	}{
		{"take 7", hits(user, 7), 3},
		{"give 3 back", refund(user, 3), 6},
		{"give 20 back: never past fresh", refund(user, 20), 10},
		{"take 10", hits(user, 10), 0},
	}
	for i, st := range steps {
		resp := h.ai(t, st.d)
		if got := resp.Statuses[0]; resp.OverallCode != CodeOK || got.Result.Remaining != st.wantRemaining {
			t.Fatalf("step %d (%s): %v, remaining %d; want OK, %d", i, st.name, resp.OverallCode, got.Result.Remaining, st.wantRemaining)
		}
	}
	// user is at 0: a refund of 4 on it beside a denied descriptor lands.
	other := desc("user", "carol")
	h.ai(t, hits(other, 10))
	resp := h.ai(t, refund(user, 4), other)
	if resp.OverallCode != CodeOverLimit || resp.Statuses[0].Code != CodeOK {
		t.Fatalf("refund beside a denial: %v (%+v), want OVER_LIMIT (refund OK)", resp.OverallCode, resp.Statuses)
	}
	if got := h.ai(t, hits(user, 0)).Statuses[0].Result.Remaining; got != 4 {
		t.Errorf("after the refund beside a denial: remaining %d, want 4", got)
	}
	// The window passes: units of the past window are not given back.
	h.clock.Advance(time.Minute)
	if got := h.ai(t, refund(user, 4)).Statuses[0].Result.Remaining; got != 10 {
		t.Errorf("refund in a fresh window: remaining %d, want 10", got)
	}
	if got := h.ai(t, hits(user, 3)).Statuses[0].Result.Remaining; got != 7 {
		t.Errorf("take 3 after: remaining %d, want 7", got)
	}
	conn := desc("conn", "c1")
	if resp := h.ai(t, refund(conn, 1)); resp.OverallCode != CodeOK || resp.Statuses[0].Result.Limit != 0 {
		t.Errorf("refund on a concurrency rule: %v %+v, want OK and no store op", resp.OverallCode, resp.Statuses[0].Result)
	}
}

// TestQuotaMode: quota-mode limits deny a request only when all of them
// are over; the others of an admitted request are charged, the over ones
// not; global quota mode; global shadow mode.
func TestQuotaMode(t *testing.T) {
	h := newHarness(t, envoyRules, DefaultConfig())
	daily, monthly, user := desc("daily", "a"), desc("monthly", "a"), desc("user", "a")
	codes := func(r Response) []Code {
		out := []Code{r.OverallCode}
		for _, st := range r.Statuses {
			out = append(out, st.Code)
		}
		return out
	}
	steps := []struct {
		name string
		ds   []Descriptor
		want []Code // overall, then each status
	}{
		{"both fresh", []Descriptor{daily, monthly, user}, []Code{CodeOK, CodeOK, CodeOK, CodeOK}},
		{"daily over, monthly not", []Descriptor{daily, monthly, user}, []Code{CodeOK, CodeOverLimit, CodeOK, CodeOK}},
		{"both over", []Descriptor{daily, monthly, user}, []Code{CodeOverLimit, CodeOverLimit, CodeOverLimit, CodeOK}},
		{"daily over alone", []Descriptor{daily}, []Code{CodeOverLimit, CodeOverLimit}},
		{"daily over beside a plain limit: every quota-mode limit is over", []Descriptor{daily, user}, []Code{CodeOverLimit, CodeOverLimit, CodeOK}},
	}
	for i, st := range steps {
		if got := codes(h.ai(t, st.ds...)); !equalCodes(got, st.want) {
			t.Fatalf("step %d (%s): %v, want %v", i, st.name, got, st.want)
		}
	}
	// user was charged by steps 0 and 1 (admitted), not 2 or 4.
	if got := h.ai(t, hits(user, 0)).Statuses[0].Result.Remaining; got != 8 {
		t.Errorf("user: remaining %d, want 8", got)
	}
	if got := h.decisions("ai", "daily", OutcomeQuotaDenied); got != 4 {
		t.Errorf("daily quota_denied = %v, want 4", got)
	}

	cfg := DefaultConfig()
	cfg.QuotaMode = true
	g := newHarness(t, envoyRules, cfg)
	g.ai(t, hits(user, 10))
	if got := codes(g.ai(t, user)); !equalCodes(got, []Code{CodeOverLimit, CodeOverLimit}) {
		t.Errorf("global quota mode, the only limit over: %v, want OVER_LIMIT", got)
	}
	if got := codes(g.ai(t, user, desc("nothing", "x"))); !equalCodes(got, []Code{CodeOK, CodeOverLimit, CodeOK}) {
		t.Errorf("global quota mode, beside a descriptor without a limit: %v, want OK (as envoyproxy/ratelimit)", got)
	}

}

// TestGlobalShadowMode: with Config.ShadowMode (the peer's SHADOW_MODE) a
// descriptor over its limit keeps the status OVER_LIMIT and only the
// overall code is OK, as envoyproxy/ratelimit answers; ShadowStatusOK
// brings back the OK status; a rule's own shadow_mode reports OK either
// way. Every row counts shadow_denied and charges the limit.
func TestGlobalShadowMode(t *testing.T) {
	const yaml = envoyRules + `  - key: ruleshadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	for _, tc := range []struct {
		name             string
		global, statusOK bool
		d                Descriptor
		limitKey         string
		want             Code
	}{
		{"global: status kept", true, false, desc("user", "bob"), "user", CodeOverLimit},
		{"global with status OK", true, true, desc("user", "bob"), "user", CodeOK},
		{"rule shadow_mode", false, false, desc("ruleshadow", "x"), "ruleshadow", CodeOK},
		{"rule shadow_mode under global", true, false, desc("ruleshadow", "x"), "ruleshadow", CodeOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ShadowMode, cfg.ShadowStatusOK = tc.global, tc.statusOK
			h := newHarness(t, yaml, cfg)
			for range 20 { // well past either limit
				h.ai(t, tc.d)
			}
			resp := h.ai(t, tc.d)
			st := resp.Statuses[0]
			if resp.OverallCode != CodeOK || st.Code != tc.want || !st.Shadowed {
				t.Errorf("over the limit: overall %v, status %v, shadowed %v; want OK, %v, true", resp.OverallCode, st.Code, st.Shadowed, tc.want)
			}
			if st.Result.Remaining != 0 {
				t.Errorf("remaining %d, want 0 (the shadowed limit is charged)", st.Result.Remaining)
			}
			if got := h.decisions("ai", tc.limitKey, OutcomeShadowDenied); got == 0 {
				t.Errorf("shadow_denied = %v, want > 0", got)
			}
		})
	}
}

func equalCodes(a, b []Code) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestUnmatchableDescriptors: a descriptor with no entries or an empty key
// is answered OK without a limit, and the request's other descriptors are
// enforced (envoyproxy/ratelimit's behaviour).
func TestUnmatchableDescriptors(t *testing.T) {
	h := newHarness(t, envoyRules, DefaultConfig())
	user := desc("user", "bob")
	h.ai(t, hits(user, 10))
	resp := h.ai(t, Descriptor{}, desc("user", "bob", "", "x"), user)
	for i := range 2 {
		if st := resp.Statuses[i]; st.Code != CodeOK || st.CurrentLimit != nil {
			t.Errorf("status %d: %v, limit %v; want OK without a limit", i, st.Code, st.CurrentLimit)
		}
	}
	if resp.OverallCode != CodeOverLimit || resp.Statuses[2].Code != CodeOverLimit {
		t.Errorf("the enforced descriptor: %v (%v), want OVER_LIMIT", resp.OverallCode, resp.Statuses[2].Code)
	}
	c, err := h.eng.Charge(context.Background(), ChargeRequest{Domain: "ai", Descriptors: []ChargeDescriptor{{Entries: []rules.Entry{{Value: "x"}}, Cost: 3}}})
	if err != nil || c.Statuses[0].Skipped != SkipNoLimit {
		t.Errorf("Charge of an empty key = %+v, %v; want skipped (no_limit)", c.Statuses, err)
	}
}

// TestEnvoyRedis: settle-after charges and refunds decide on real Redis,
// single and Cluster, as on the memory store.
func TestEnvoyRedis(t *testing.T) {
	t.Parallel() // its own servers
	for _, mode := range []string{"single", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel() // a server or Cluster of its own
			var url string
			if mode == "single" {
				url = redistest.Start(t).URL()
			} else {
				url = redistest.StartCluster(t).URL()
			}
			t.Run("settle", func(t *testing.T) { testSettleAfter(t, newRedisHarness(t, url, envoyRules)) })
			t.Run("refund", func(t *testing.T) { testRefund(t, newRedisHarness(t, url, envoyRules)) })
			t.Run("denied", func(t *testing.T) { testSettleAfterDeniedRequest(t, newRedisHarness(t, url, envoyRules)) })
		})
	}
}
