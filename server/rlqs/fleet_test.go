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
	"github.com/sluice-rl/sluice/store/stack"
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
//     allowed and denied since the bucket's last report, and the time
//     elapsed since it;
//   - a quota assignment with a strategy different from the one in force
//     (or arriving when that one has expired, or the first) replaces it (a
//     token bucket starts full) and the client reports the bucket's usage
//     at once ("it must send the current usage report for the bucket");
//     the same strategy only extends the TTL; unset TTL never expires,
//     TTL 0 expires at once;
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
	assigned bool      // an assignment has arrived
	reported time.Time // its last report (zero: never reported)
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
	postSent   int // bucket reports sent as an assignment was applied
	depth      int // report → apply → report nesting
	firstReq   map[string]time.Time
	firstAsg   map[string]time.Duration
}

func newSimEnvoy(name string, srv func() *Server, now time.Time) *simEnvoy {
	return &simEnvoy{name: name, srv: srv, buckets: map[string]*simBucket{}, lastReport: now,
		nextReport: now.Add(5 * time.Second), firstReq: map[string]time.Time{}, firstAsg: map[string]time.Duration{}}
}

// applied sends the usage report of the buckets post, whose assignments
// were applied at now, a millisecond later (a stream's round trip): it
// covers a sliver of time, and often no request.
func (e *simEnvoy) applied(t *testing.T, now time.Time, post []*simBucket) {
	t.Helper()
	if len(post) == 0 {
		return
	}
	if e.depth++; e.depth > 3 {
		t.Fatalf("%s: assignments answering the reports of assignments, %d deep", e.name, e.depth)
	}
	e.postSent += len(post)
	e.report(t, now.Add(time.Millisecond), post)
	e.depth--
}

// request decides one request of bucket id at now.
func (e *simEnvoy) request(t *testing.T, now time.Time, id map[string]string) bool {
	t.Helper()
	return e.requestKey(t, now, id, canonical(id))
}

// requestKey is request with id's canonical key computed by the caller
// (once for a bucket that takes many requests: the simulated fleets send
// millions).
func (e *simEnvoy) requestKey(t *testing.T, now time.Time, id map[string]string, key string) bool {
	b := e.buckets[key]
	if b == nil {
		t.Helper()
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
		var elapsed time.Duration // a new bucket's first report: none
		if !b.reported.IsZero() {
			elapsed = now.Sub(b.reported)
		}
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId:           &rlqspb.BucketId{Bucket: b.id},
			TimeElapsed:        durationpb.New(elapsed),
			NumRequestsAllowed: b.allowed, NumRequestsDenied: b.denied,
		})
		b.allowed, b.denied, b.reported = 0, 0, now
	}
	e.sent++
	resp, err := e.sess.handle(context.Background(), now, m)
	if err != nil {
		t.Fatalf("%s: report: %v", e.name, err)
	}
	e.applied(t, now, e.apply(now, resp))
}

// drop ends the client's stream (the server sees it end at now); its next
// report opens a new one.
func (e *simEnvoy) drop(now time.Time) {
	if e.sess != nil {
		e.sess.srv.endSession(e.sess, now)
		e.sess = nil
	}
}

// tick runs the server's timer of the client's stream, when it is due.
func (e *simEnvoy) tick(t *testing.T, now time.Time) {
	t.Helper()
	if e.sess == nil || e.sess.next().IsZero() || now.Before(e.sess.next()) {
		return
	}
	e.applied(t, now, e.apply(now, e.sess.tick(context.Background(), now)))
}

// apply applies a server response, action by action, and returns the
// buckets whose usage the client reports at once (an assignment applied
// as new).
func (e *simEnvoy) apply(now time.Time, resp *rlqspb.RateLimitQuotaResponse) []*simBucket {
	if resp == nil {
		return nil
	}
	e.recv++
	var post []*simBucket
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
		active := b.strategy != nil && (b.expires.IsZero() || now.Before(b.expires))
		if active && proto.Equal(b.strategy, qa.GetRateLimitStrategy()) {
			b.expires = expires // same strategy: only the TTL
			continue
		}
		b.strategy, b.expires = qa.GetRateLimitStrategy(), expires
		if tb := b.strategy.GetTokenBucket(); tb != nil {
			b.tokens, b.fillAt = float64(tb.GetMaxTokens()), now
		}
		if !slices.Contains(post, b) {
			post = append(post, b)
		}
	}
	return post
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

// eachStoreSideBySide is eachStore with the subtests run in parallel, for
// the fleet simulations: each subtest has its own store (and
// redis-server), server and fake clock, and asserts only counts at
// simulated instants, so the two run side by side (the in-process one
// keeps a core busy, the Redis one mostly waits on its round trips). The
// test returns when both have ended.
func eachStoreSideBySide(t *testing.T, f func(t *testing.T, kind string)) {
	t.Helper()
	for _, k := range simStores {
		t.Run(k, func(t *testing.T) {
			t.Parallel()
			f(t, k)
		})
	}
}

// newSimStore returns a fresh store of kind ("memory" or "redis") whose
// time is now (nil: the real clock).
func newSimStore(t testing.TB, kind string, now func() time.Time) stack.Allotter {
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

// fleetPlan is what happens to a simulated fleet (runFleet).
type fleetPlan struct {
	// total is the fleet's demand on the limited bucket, requests a
	// second.
	total float64
	// restart: the server restarts at 270 s (a new Server: every stream
	// and its state gone), envoy0 leaves at 400 s, envoy1 stops
	// reporting at 430 s.
	restart bool
	// reconnect: every stream ends at once at these offsets (the same
	// Server: a load balancer draining, a max stream age, a blip); each
	// Envoy reconnects at its next report.
	reconnect []time.Duration
	// grace is Options.ReconnectGrace (0: the default).
	grace time.Duration
}

// churnPlan is the fleet of TestFleetBound: demand 1.5–2.5 × the limit,
// a restart, a leaver, a silent Envoy.
var churnPlan = fleetPlan{total: 2500, restart: true}

// runFleet runs ten simulated Envoys with skewed traffic (plan.total
// requests a second in all) against the bucket {tenant: acme, route: api}
// of rules yaml, over a fresh store of kind on a fake clock, for ten
// simulated minutes: two join late at 150 s; the rest follows plan. Each
// Envoy reports on its own phase of the 5 s interval, as Envoys started
// at different times do.
func runFleet(t *testing.T, kind, yaml string, plan fleetPlan) *fleet {
	t.Helper()
	clock := storetest.NewClock()
	st := newSimStore(t, kind, clock.Now)
	eng, src := simEngineOn(t, st, yaml)
	newSrv := func() *Server {
		s, err := New(eng, src, Options{Unmatched: DenyUnmatched, Now: clock.Now, Allotter: st, ReconnectGrace: plan.grace})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		t.Cleanup(s.Shutdown)
		return s
	}
	srv := newSrv()
	cur := func() *Server { return srv }

	const (
		step    = 20 * time.Millisecond
		minutes = 10
		n       = 10
	)
	total := plan.total
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
		envoys[i].nextReport = start.Add(5*time.Second + time.Duration(i)*500*time.Millisecond)
		alive[i] = i < 8 // 8 and 9 join later
	}
	limited := map[string]string{"route": "api", "tenant": "acme"}
	limitedKey := canonical(limited)
	owed := make([]float64, n)

	for now := start; now.Before(start.Add(minutes * time.Minute)); now = now.Add(step) {
		clock.Set(now)
		el := now.Sub(start)
		switch {
		case el == 150*time.Second:
			for i := 8; i < n; i++ {
				alive[i] = true
				// phases between the others' (250 ms, 750 ms)
				envoys[i].lastReport = now
				envoys[i].nextReport = now.Add(5*time.Second + time.Duration(i-8)*500*time.Millisecond + 250*time.Millisecond)
			}
		case plan.restart && el == 270*time.Second: // restart: every stream is gone
			srv = newSrv()
			for _, e := range envoys {
				e.sess = nil
			}
		case plan.restart && el == 400*time.Second:
			alive[0] = false // leaves: closes its stream
			envoys[0].drop(now)
		case plan.restart && el == 430*time.Second:
			envoys[1].stuck = true
		case slices.Contains(plan.reconnect, el):
			for _, e := range envoys {
				e.drop(now)
			}
		}
		srv.reap(context.Background(), now)
		w := windowIndex(now)
		before := 0
		for _, e := range envoys {
			before += e.sent + e.recv
		}
		// The server's timers.
		for i, e := range envoys {
			if alive[i] {
				e.tick(t, now)
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
				if e.requestKey(t, now, limited, limitedKey) {
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
	eachStoreSideBySide(t, func(t *testing.T, kind string) {
		const limit = 60000
		f := runFleet(t, kind, simRules, churnPlan)
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
	eachStoreSideBySide(t, func(t *testing.T, kind string) {
		const (
			burst = 6000
			rate  = 1000.0 // tokens a second
		)
		f := runFleet(t, kind, algRules("token_bucket", ", burst: 6000"), churnPlan)
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
	eachStoreSideBySide(t, func(t *testing.T, kind string) {
		const limit = 60000
		f := runFleet(t, kind, algRules("sliding_window", ""), churnPlan)
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

// calmPlan holds the fleet's demand at 800 a second (48 000 a minute, 80 %
// of the limit of simRules) and ends every stream at once twice, in the
// middle of a window (270 s) and just after one begins (361 s).
var calmPlan = fleetPlan{total: 800, reconnect: []time.Duration{270 * time.Second, 361 * time.Second}}

// TestFleetReconnect: below the limit, the fleet is admitted at least 95 %
// of its demand in every window — the first, the joiners', and the two
// whose streams all end at once — and never more than the limit, on the
// memory store and on Redis. The simulated Envoys send every report
// rlqs.proto asks for, the one as an assignment is applied included; the
// server recognises those, and hands each reconnecting Envoy its own
// buckets back.
func TestFleetReconnect(t *testing.T) {
	eachStoreSideBySide(t, func(t *testing.T, kind string) {
		const limit = 60000
		f := runFleet(t, kind, simRules, calmPlan)
		first := windowIndex(f.start)
		adm := f.perWindow()
		for w := first; w < first+10; w++ {
			f.logWindow(t, w, adm[w], limit)
			if adm[w] > limit {
				t.Errorf("window %d: admitted %d, want ≤ %d", w-first, adm[w], limit)
			}
			if want := int(math.Ceil(0.95 * float64(f.requests[w]))); adm[w] < want {
				t.Errorf("window %d: admitted %d of %d requests (%.1f %%), want ≥ %d (95 %%)", w-first, adm[w], f.requests[w], 100*float64(adm[w])/float64(f.requests[w]), want)
			}
		}
		st := f.srv.Stats()
		t.Logf("server: %+v", st)
		post := 0
		for _, e := range f.envoys {
			post += e.postSent
		}
		// Every Envoy reconnects twice with its limited bucket (and envoy2
		// with two more).
		if want := uint64(2 * (len(f.envoys) + 2)); st.HandedBack < want {
			t.Errorf("buckets handed back %d, want ≥ %d (every reconnecting Envoy's)", st.HandedBack, want)
		}
		if st.Ambiguous != 0 {
			t.Errorf("ambiguous reconnects %d, want 0 (the Envoys report on distinct phases)", st.Ambiguous)
		}
		if post == 0 || st.PostAssignmentReports == 0 {
			t.Errorf("reports sent as assignments were applied: %d, recognised %d; want both > 0", post, st.PostAssignmentReports)
		}
		if st.PostAssignmentReports > uint64(post) {
			t.Errorf("reports recognised as post-assignment %d, more than were sent (%d)", st.PostAssignmentReports, post)
		}
	})
}

// TestFleetReconnectNoGrace: the same fleet with the grace period off
// (ReconnectGrace < 0) loses what the Envoys held when their streams end
// mid-window, so the 95 % of TestFleetReconnect is the grace period's
// doing, not the scenario's ease. Memory store only (the logic under test
// is the server's).
func TestFleetReconnectNoGrace(t *testing.T) {
	plan := calmPlan
	plan.grace = -1
	f := runFleet(t, "memory", simRules, plan)
	w := windowIndex(f.start.Add(270 * time.Second))
	adm := f.perWindow()
	f.logWindow(t, w, adm[w], 60000)
	if got, at := adm[w], int(0.95*float64(f.requests[w])); got >= at {
		t.Errorf("window of the mid-window reconnect without grace: admitted %d of %d, want < %d (95 %%): the scenario would not show a lost grant", got, f.requests[w], at)
	}
	if st := f.srv.Stats(); st.HandedBack != 0 || st.Parked != 0 {
		t.Errorf("grace off: parked %d, handed back %d; want 0, 0", st.Parked, st.HandedBack)
	}
}
