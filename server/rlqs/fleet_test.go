package rlqs

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

// The simulated Envoy follows the rate_limit_quota filter's documented
// behaviour (Envoy v1.32–v1.36 docs and the RLQS proto comments, as
// summarised in PROTOCOLS.md); no real Envoy runs here:
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

// simStore is a Redis store on a fake clock and an engine over it.
func simEngine(t *testing.T, url string, clock *storetest.Clock, yaml string) (*service.Engine, service.RuleSource, *redis.Store) {
	t.Helper()
	st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second, Prefix: fmt.Sprintf("rlqs%d:", time.Now().UnixNano())})
	if err != nil {
		t.Fatalf("redis.New: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	snap, err := rules.Parse("edge.yaml", []byte(yaml), rules.Options{})
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	src := service.StaticRules{Snapshot: snap}
	eng, err := service.New(service.DefaultConfig(), src, st, nil, nil)
	if err != nil {
		t.Fatalf("service.New: %v", err)
	}
	return eng, src, st
}

// TestFleetBound: ten simulated Envoys with skewed traffic (2.5× the
// limit in all) against one fixed-window limit of 60000 a minute, over a
// real redis-server on a fake clock, for ten simulated minutes: two join
// late, the server restarts mid-stream (every stream dropped; Envoys
// reconnect), one Envoy leaves, one stops reporting. Every window's
// admissions, counted at the Envoys, are at most the limit; the server
// abandons the silent Envoy's buckets; a bucket of an unlimited rule is
// allowed, one matching no rule follows Options.Unmatched (deny).
func TestFleetBound(t *testing.T) {
	srvR := redistest.Start(t)
	clock := storetest.NewClock()
	eng, src, st := simEngine(t, srvR.URL(), clock, simRules)
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
		limit   = 60000
		window  = time.Minute
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
	envoys := make([]*simEnvoy, n)
	alive := make([]bool, n)
	for i := range envoys {
		envoys[i] = newSimEnvoy(fmt.Sprintf("envoy%d", i), cur, start)
		alive[i] = i < 8 // 8 and 9 join later
	}
	limited := func(i int) map[string]string { return map[string]string{"route": "api", "tenant": "acme"} }
	owed := make([]float64, n)
	admitted := map[int64]int{} // window index → admissions
	requests := map[int64]int{} // window index → requests
	messages := map[int64]int{} // window index → stream messages
	var unlimitedOK, unmatchedOK, unmatchedN int
	idx := func(t time.Time) int64 { return t.UnixMicro() / window.Microseconds() }

	for now := start; now.Before(start.Add(minutes * window)); now = now.Add(step) {
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
		w := idx(now)
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
		for i, e := range envoys {
			if !alive[i] || e.stuck {
				continue
			}
			owed[i] += total * weights[i] / sum * step.Seconds()
			for ; owed[i] >= 1; owed[i]-- {
				requests[w]++
				if e.request(t, now, limited(i)) {
					admitted[w]++
				}
			}
			if i == 2 && el%time.Second == 0 { // a trickle into other buckets
				if e.request(t, now, map[string]string{"tenant": "free", "route": "x"}) {
					unlimitedOK++
				}
				unmatchedN++
				if e.request(t, now, map[string]string{"tenant": "nobody"}) {
					unmatchedOK++
				}
			}
			if !now.Before(e.nextReport) {
				e.report(t, now, nil)
				e.nextReport = now.Add(5 * time.Second)
			}
		}
		after := 0
		for _, e := range envoys {
			after += e.sent + e.recv
		}
		messages[w] += after - before
	}

	first := idx(start)
	for w := first; w < first+minutes; w++ {
		perReq := float64(messages[w]) / float64(max(requests[w], 1))
		t.Logf("window %d: admitted %d of limit %d (%d requests), %d stream messages, %.4f per request", w-first, admitted[w], limit, requests[w], messages[w], perReq)
		if admitted[w] > limit {
			t.Errorf("window %d: admitted %d, want ≤ %d", w-first, admitted[w], limit)
		}
		if admitted[w] < limit/2 {
			t.Errorf("window %d: admitted %d, want ≥ %d (demand is 1.5–2.5× the limit)", w-first, admitted[w], limit/2)
		}
	}
	for _, i := range []int{8, 9} {
		for k, d := range envoys[i].firstAsg {
			t.Logf("%s: first assignment of %s after %v (simulated)", envoys[i].name, k, d)
			if d != 0 {
				t.Errorf("%s: first assignment after %v, want at the first report (0 simulated time)", envoys[i].name, d)
			}
		}
	}
	if envoys[1].abandoned == 0 {
		t.Errorf("envoy1 (silent from 430 s): %d abandon actions, want ≥ 1", envoys[1].abandoned)
	}
	if unlimitedOK == 0 {
		t.Errorf("unlimited bucket: %d allowed, want some", unlimitedOK)
	}
	if unmatchedOK != 0 {
		t.Errorf("unmatched bucket with Unmatched deny: %d of %d allowed, want 0", unmatchedOK, unmatchedN)
	}
	t.Logf("server after restart: %+v", srv.Stats())
}
