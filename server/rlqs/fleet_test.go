package rlqs

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The simulated Envoy follows the rate_limit_quota filter's documented
// behaviour (the RLQS and filter proto comments of Envoy commit 37b04b2,
// which go-control-plane's envoy module v1.40.0 was generated from, and
// the filter's docs); no real Envoy runs here:
//   - a request matched into a bucket the client does not know creates it,
//     is decided by no_assignment_behavior, and the client sends a usage
//     report for the new bucket at once;
//   - every reporting interval (5 s) it reports every bucket: requests
//     allowed and denied since the last report, and the time elapsed;
//   - a quota assignment with a strategy different from the one in force
//     replaces it (a token bucket starts full); the same strategy only
//     extends the TTL; unset TTL never expires, TTL 0 expires at once;
//   - an expired assignment gives way to expired_assignment_behavior;
//   - abandon_action erases the bucket;
//   - a broken stream keeps every assignment; the client opens a new
//     stream (domain in its first message) at its next report.
// Token buckets refill continuously (tokens_per_fill per fill_interval,
// fractions kept), as Envoy's TokenBucketImpl does. The filter under test
// is configured with no_assignment_behavior and expired_assignment_behavior
// DENY_ALL, the configuration docs/rlqs.md requires for the bound.

const simDomain = "edge"

// simRules nest tenant above route: a bucket's keys sort the other way
// (route < tenant), so matching proves the rule tree's order is followed.
const simRules = `
domain: edge
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: route
        rate_limit: {unit: minute, requests_per_unit: 60000}
  - key: tenant
    value: free
    descriptors:
      - key: route
        rate_limit: {unlimited: true}
`

type simBucket struct {
	id       map[string]string
	strategy *typev3.RateLimitStrategy // nil: no assignment
	expires  time.Time                 // zero: never
	tokens   float64
	fillAt   time.Time
	allowed  uint64 // since the last report
	denied   uint64
	assigned bool // an assignment has arrived
}

type simEnvoy struct {
	name       string
	srv        func() *Server
	sess       *session
	buckets    map[string]*simBucket
	lastReport time.Time
	nextReport time.Time
	stuck      bool // stopped reporting, stream kept open
	abandoned  int
	sent, recv int
	firstReq   map[string]time.Time
	firstAsg   map[string]time.Duration
}

func newSimEnvoy(name string, srv func() *Server, now time.Time) *simEnvoy {
	return &simEnvoy{name: name, srv: srv, buckets: map[string]*simBucket{}, lastReport: now,
		nextReport: now.Add(5 * time.Second), firstReq: map[string]time.Time{}, firstAsg: map[string]time.Duration{}}
}

// request decides one request of bucket id at now.
func (e *simEnvoy) request(t *testing.T, now time.Time, id map[string]string) bool {
	key := canonical(id)
	b := e.buckets[key]
	if b == nil {
		b = &simBucket{id: id}
		e.buckets[key] = b
		if _, ok := e.firstReq[key]; !ok {
			e.firstReq[key] = now
		}
		b.denied++ // no_assignment_behavior: DENY_ALL
		e.report(t, now, []*simBucket{b})
		return false
	}
	ok := b.decide(now)
	if ok {
		b.allowed++
	} else {
		b.denied++
	}
	return ok
}

func (b *simBucket) decide(now time.Time) bool {
	if b.strategy == nil || (!b.expires.IsZero() && !now.Before(b.expires)) {
		return false // no assignment, or expired: DENY_ALL
	}
	switch s := b.strategy.Strategy.(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		return s.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL
	case *typev3.RateLimitStrategy_TokenBucket:
		tb := s.TokenBucket
		rate := float64(tb.GetTokensPerFill().GetValue()) / tb.GetFillInterval().AsDuration().Seconds()
		b.tokens = math.Min(float64(tb.GetMaxTokens()), b.tokens+rate*now.Sub(b.fillAt).Seconds())
		b.fillAt = now
		if b.tokens >= 1 {
			b.tokens--
			return true
		}
		return false
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		return s.RequestsPerTimeUnit.GetRequestsPerTimeUnit() > 0
	}
	return true // unset strategy: allow all
}

// report sends a usage report of bs (every bucket when nil).
func (e *simEnvoy) report(t *testing.T, now time.Time, bs []*simBucket) {
	t.Helper()
	elapsed := max(now.Sub(e.lastReport), 0)
	if bs == nil {
		keys := make([]string, 0, len(e.buckets))
		for k := range e.buckets {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			bs = append(bs, e.buckets[k])
		}
		e.lastReport = now
	}
	if len(bs) == 0 {
		return
	}
	m := &rlqspb.RateLimitQuotaUsageReports{}
	if e.sess == nil { // (re)connect: a new stream carries the domain
		e.sess = e.srv().newSession()
		m.Domain = simDomain
	}
	for _, b := range bs {
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: b.id},
			TimeElapsed:        durationpb.New(elapsed),
			NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
		})
		b.allowed, b.denied = 0, 0
	}
	e.sent++
	resp, err := e.sess.handle(context.Background(), now, m)
	if err != nil {
		t.Fatalf("%s: report: %v", e.name, err)
	}
	e.apply(now, resp)
}

// apply applies a server response, action by action.
func (e *simEnvoy) apply(now time.Time, resp *rlqspb.RateLimitQuotaResponse) {
	if resp == nil {
		return
	}
	e.recv++
	for _, a := range resp.GetBucketAction() {
		key := canonical(a.GetBucketId().GetBucket())
		if a.GetAbandonAction() != nil {
			delete(e.buckets, key)
			e.abandoned++
			continue
		}
		qa := a.GetQuotaAssignmentAction()
		b := e.buckets[key]
		if b == nil || qa == nil {
			continue // an assignment for a bucket the client erased
		}
		if _, ok := e.firstAsg[key]; !ok {
			e.firstAsg[key] = now.Sub(e.firstReq[key])
		}
		var expires time.Time
		if ttl := qa.GetAssignmentTimeToLive(); ttl != nil {
			expires = now.Add(ttl.AsDuration())
		}
		b.assigned = true
		if b.strategy != nil && proto.Equal(b.strategy, qa.GetRateLimitStrategy()) {
			b.expires = expires // same strategy: only the TTL
			continue
		}
		b.strategy, b.expires = qa.GetRateLimitStrategy(), expires
		if tb := b.strategy.GetTokenBucket(); tb != nil {
			b.tokens, b.fillAt = float64(tb.GetMaxTokens()), now
		}
	}
}

// simStores are the stores every stream test runs over: the in-process
// store and a real redis-server, each on the test's fake clock.
var simStores = []string{"memory", "redis"}

// eachStore runs f as one subtest per store of simStores.
func eachStore(t *testing.T, f func(t *testing.T, kind string)) {
	t.Helper()
	for _, k := range simStores {
		t.Run(k, func(t *testing.T) { f(t, k) })
	}
}

// newSimStore returns a fresh store of kind ("memory" or "redis") whose
// time is now (nil: the real clock).
func newSimStore(t testing.TB, kind string, now func() time.Time) sluice.Allotter {
	t.Helper()
	if kind == "memory" {
		s := memory.New(memory.Options{Now: now})
		t.Cleanup(func() { s.Close() })
		return s
	}
	return newRedisStore(t, redistest.Start(t).URL(), now)
}

// newRedisStore is a Redis store at url with a fresh prefix, on now.
func newRedisStore(t testing.TB, url string, now func() time.Time) *redis.Store {
	t.Helper()
	st, err := redis.New(redis.Options{URL: url, Now: now, Timeout: 5 * time.Second, Prefix: fmt.Sprintf("rlqs%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// simEngineOn is an engine deciding with the rules yaml over st.
func simEngineOn(t testing.TB, st sluice.Store, yaml string) (*service.Engine, service.RuleSource) {
	t.Helper()
	snap, err := rules.Parse("edge.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	src := service.StaticRules{Snapshot: snap}
	eng, err := service.New(service.DefaultConfig(), src, st, nil, nil)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	return eng, src
}

// simEngine is a Redis store at url on a fake clock and an engine over it.
func simEngine(t *testing.T, url string, clock *storetest.Clock, yaml string) (*service.Engine, service.RuleSource, *redis.Store) {
	t.Helper()
	st := newRedisStore(t, url, clock.Now)
	eng, src := simEngineOn(t, st, yaml)
	return eng, src, st
}

// fleet is what a simulated fleet's run counted.
type fleet struct {
	start    time.Time
	step     time.Duration
	admitted []int         // admissions of the limited bucket, per step
	requests map[int64]int // window index → requests of the limited bucket
	messages map[int64]int // window index → stream messages
	envoys   []*simEnvoy
	srv      *Server // the server after the restart
	// the trickle into other buckets: an unlimited rule's, and one
	// matching no rule
	unlimitedOK, unmatchedOK, unmatchedN int
}

// runFleet runs ten simulated Envoys with skewed traffic (2 500 requests
// a second in all) against the bucket {tenant: acme, route: api} of rules
// yaml, over a fresh store of kind on a fake clock, for ten simulated
// minutes: two join late, the server restarts mid-stream (every stream
// dropped; Envoys reconnect), one Envoy leaves, one stops reporting.
func runFleet(t *testing.T, kind, yaml string) *fleet {
	t.Helper()
	clock := storetest.NewClock()
	st := newSimStore(t, kind, clock.Now)
	eng, src := simEngineOn(t, st, yaml)
	newSrv := func() *Server {
		s, err := New(eng, src, Options{Unmatched: DenyUnmatched, Now: clock.Now, Allotter: st})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return s
	}
	srv := newSrv()
	cur := func() *Server { return srv }

	const (
		step    = 20 * time.Millisecond
		total   = 2500.0 // requests a second, fleet-wide
		minutes = 10
		n       = 10
	)
	weights := make([]float64, n)
	sum := 0.0
	for i := range weights {
		weights[i] = math.Pow(float64(i+1), 1.5) // skewed
		sum += weights[i]
	}
	start := clock.Now()
	f := &fleet{start: start, step: step, requests: map[int64]int{}, messages: map[int64]int{}, envoys: make([]*simEnvoy, n)}
	envoys := f.envoys
	alive := make([]bool, n)
	for i := range envoys {
		envoys[i] = newSimEnvoy(fmt.Sprintf("envoy%d", i), cur, start)
		alive[i] = i < 8 // 8 and 9 join later
	}
	limited := map[string]string{"route": "api", "tenant": "acme"}
	owed := make([]float64, n)

	for now := start; now.Before(start.Add(minutes * time.Minute)); now = now.Add(step) {
		clock.Set(now)
		el := now.Sub(start)
		switch el {
		case 150 * time.Second:
			for i := 8; i < n; i++ {
				alive[i] = true
				envoys[i].lastReport, envoys[i].nextReport = now, now.Add(5*time.Second)
			}
		case 270 * time.Second: // restart: every stream is gone
			srv = newSrv()
			for _, e := range envoys {
				e.sess = nil
			}
		case 400 * time.Second:
			alive[0] = false // leaves: closes its stream
			envoys[0].sess = nil
		case 430 * time.Second:
			envoys[1].stuck = true
		}
		w := windowIndex(now)
		before := 0
		for _, e := range envoys {
			before += e.sent + e.recv
		}
		// The server's timers.
		for i, e := range envoys {
			if alive[i] && e.sess != nil && !e.sess.next().IsZero() && !now.Before(e.sess.next()) {
				e.apply(now, e.sess.tick(context.Background(), now))
			}
		}
		admitted := 0
		for i, e := range envoys {
			if !alive[i] || e.stuck {
				continue
			}
			owed[i] += total * weights[i] / sum * step.Seconds()
			for ; owed[i] >= 1; owed[i]-- {
				f.requests[w]++
				if e.request(t, now, limited) {
					admitted++
				}
			}
			if i == 2 && el%time.Second == 0 { // a trickle into other buckets
				if e.request(t, now, map[string]string{"tenant": "free", "route": "x"}) {
					f.unlimitedOK++
				}
				f.unmatchedN++
				if e.request(t, now, map[string]string{"tenant": "nobody"}) {
					f.unmatchedOK++
				}
			}
			if !now.Before(e.nextReport) {
				e.report(t, now, nil)
				e.nextReport = now.Add(5 * time.Second)
			}
		}
		f.admitted = append(f.admitted, admitted)
		after := 0
		for _, e := range envoys {
			after += e.sent + e.recv
		}
		f.messages[w] += after - before
	}
	f.srv = srv
	return f
}

// windowIndex is the index of the one-minute window holding t.
func windowIndex(t time.Time) int64 { return t.UnixMicro() / time.Minute.Microseconds() }

// perWindow sums f.admitted by one-minute window.
func (f *fleet) perWindow() map[int64]int {
	m := map[int64]int{}
	for i, a := range f.admitted {
		m[windowIndex(f.start.Add(time.Duration(i)*f.step))] += a
	}
	return m
}

// checkCommon checks what every run must show: the joiners' first
// assignment at their first report, the silent Envoy's bucket abandoned,
// the unlimited bucket allowed, the unmatched one denied.
func (f *fleet) checkCommon(t *testing.T) {
	t.Helper()
	for _, i := range []int{8, 9} {
		for k, d := range f.envoys[i].firstAsg {
			t.Logf("%s: first assignment of %s after %v (simulated)", f.envoys[i].name, k, d)
			if d != 0 {
				t.Errorf("%s: first assignment after %v, want at the first report (0 simulated time)", f.envoys[i].name, d)
			}
		}
	}
	if f.envoys[1].abandoned == 0 {
		t.Errorf("envoy1 (silent from 430 s): %d abandon actions, want ≥ 1", f.envoys[1].abandoned)
	}
	if f.unlimitedOK == 0 {
		t.Errorf("unlimited bucket: %d allowed, want some", f.unlimitedOK)
	}
	if f.unmatchedOK != 0 {
		t.Errorf("unmatched bucket with Unmatched deny: %d of %d allowed, want 0", f.unmatchedOK, f.unmatchedN)
	}
	t.Logf("server after restart: %+v", f.srv.Stats())
}

// logWindow logs one window's figures and returns its messages per request.
func (f *fleet) logWindow(t *testing.T, w int64, admitted, limit int) {
	t.Helper()
	first := windowIndex(f.start)
	perReq := float64(f.messages[w]) / float64(max(f.requests[w], 1))
	t.Logf("window %d: admitted %d of limit %d (%d requests), %d stream messages, %.4f per request", w-first, admitted, limit, f.requests[w], f.messages[w], perReq)
}

// TestFleetBound: the simulated fleet (runFleet) against one fixed-window
// limit of 60000 a minute, on the memory store and on Redis. Every
// window's admissions, counted at the Envoys, are at most the limit; the
// server abandons the silent Envoy's buckets; a bucket of an unlimited
// rule is allowed, one matching no rule follows Options.Unmatched (deny).
func TestFleetBound(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		const limit = 60000
		f := runFleet(t, kind, simRules)
		first := windowIndex(f.start)
		adm := f.perWindow()
		for w := first; w < first+10; w++ {
			f.logWindow(t, w, adm[w], limit)
			if adm[w] > limit {
				t.Errorf("window %d: admitted %d, want ≤ %d", w-first, adm[w], limit)
			}
			if adm[w] < limit/2 {
				t.Errorf("window %d: admitted %d, want ≥ %d (demand is 1.5–2.5× the limit)", w-first, adm[w], limit/2)
			}
		}
		f.checkCommon(t)
	})
}

// algRules is simRules with the limited rule's algorithm (and extra
// fields) set.
func algRules(alg, extra string) string {
	return strings.Replace(simRules, "rate_limit: {unit: minute, requests_per_unit: 60000}",
		"rate_limit: {unit: minute, requests_per_unit: 60000, algorithm: "+alg+extra+"}", 1)
}

// TestFleetTokenBucket: the same fleet against a token_bucket limit of
// 60000 a minute, burst 6000 (leased by Takes on Check's counter, as gcra
// would be). Tokens are taken from the bucket before they are spent, so
// the admissions from the start to any instant t are at most what the
// bucket could give by then, burst + t × rate; and in any span of d, at
// most burst + (d + lease) × rate (a grant taken before the span may be
// spent in it; the lease is one window).
func TestFleetTokenBucket(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		const (
			burst = 6000
			rate  = 1000.0 // tokens a second
		)
		f := runFleet(t, kind, algRules("token_bucket", ", burst: 6000"))
		sum, span, last := 0, 0, 0 // last: admitted in the 60 s up to this step
		perSpan := int(time.Minute / f.step)
		for i, a := range f.admitted {
			sum += a
			el := time.Duration(i+1) * f.step
			if bound := burst + int(rate*el.Seconds()); sum > bound {
				t.Fatalf("admitted %d by %v, want ≤ burst + elapsed × rate = %d", sum, el, bound)
			}
			last += a
			if i >= perSpan {
				last -= f.admitted[i-perSpan]
			}
			span = max(span, last)
		}
		t.Logf("most admitted in any 60 s span: %d (burst + 60 s × rate: %d)", span, burst+int(rate*60))
		first := windowIndex(f.start)
		adm := f.perWindow()
		for w := first; w < first+10; w++ {
			f.logWindow(t, w, adm[w], 60000)
			if bound := burst + int(rate*120); adm[w] > bound {
				t.Errorf("window %d: admitted %d, want ≤ burst + (window + lease) × rate = %d", w-first, adm[w], bound)
			}
			if adm[w] < 30000 {
				t.Errorf("window %d: admitted %d, want ≥ 30000 (demand is 1.5–2.5× the rate)", w-first, adm[w])
			}
		}
		t.Logf("admitted %d in %v: %.0f a second (the bucket's rate: %.0f)", sum, 10*time.Minute, float64(sum)/600, rate)
		f.checkCommon(t)
	})
}

// TestFleetSlidingWindow: the same fleet against a sliding_window limit of
// 60000 a minute (leased by Takes on Check's counter, each grant living to
// the end of the window that counts it). The admissions counted at the
// Envoys keep the algorithm's own invariant at every step: ⌈admitted in
// the previous window × the part of it still in the sliding window⌉ +
// admitted in this window ≤ the limit.
func TestFleetSlidingWindow(t *testing.T) {
	eachStore(t, func(t *testing.T, kind string) {
		const limit = 60000
		f := runFleet(t, kind, algRules("sliding_window", ""))
		adm := map[int64]int{}
		worst := 0
		for i, a := range f.admitted {
			now := f.start.Add(time.Duration(i) * f.step)
			w := windowIndex(now)
			adm[w] += a
			e := now.Sub(time.UnixMicro(w*time.Minute.Microseconds())).Seconds() / 60
			est := int(math.Ceil(float64(adm[w-1])*(1-e))) + adm[w]
			if est > limit {
				t.Fatalf("at %v: estimate %d (previous window %d, this one %d), want ≤ %d", now.Sub(f.start), est, adm[w-1], adm[w], limit)
			}
			worst = max(worst, est)
		}
		t.Logf("highest estimate of admissions in a sliding minute: %d of %d", worst, limit)
		first := windowIndex(f.start)
		for w := first; w < first+10; w++ {
			f.logWindow(t, w, adm[w], limit)
			if adm[w] < limit/4 {
				t.Errorf("window %d: admitted %d, want ≥ %d", w-first, adm[w], limit/4)
			}
		}
		f.checkCommon(t)
	})
}
