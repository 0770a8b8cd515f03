package rlqs

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/stack"
)

// kind is how a bucket is served.
type kind uint8

const (
	kindAllow kind = iota + 1 // blanket ALLOW_ALL, renewed
	kindDeny                  // blanket DENY_ALL, renewed
	kindLease                 // token buckets sized from allotments
)

// lease is how a bucket's counter is leased.
type lease uint8

const (
	leaseNone  lease = iota // it cannot be: the bucket is denied
	leaseAllot              // stack.Allotter.Allot (fixed_window, gcra)
	leaseTake               // Takes of the units on Check's op (see takeLease)
)

// bucket is the server's state for one bucket of one stream.
type bucket struct {
	id      *rlqspb.BucketId
	entries []rules.Entry
	kind    kind
	lease   lease           // kindLease only
	quota   service.Quota   // kindLease only
	snap    *rules.Snapshot // the rules it was matched with

	lastReport time.Time
	periodic   time.Time // the last report neither a bucket's first nor one as an assignment was applied
	// The demand estimate (see observe): rate is requests per second
	// (allowed + denied); reported says a span of reports long enough has
	// set it; pendN and pendEl are the reports not folded in yet.
	rate     float64
	reported bool
	pendN    float64
	pendEl   time.Duration
	// sentAt: when the last assignment the client applies as new was sent
	// (it then reports at once: see handle); postReport says that report
	// is still expected.
	sentAt     time.Time
	postReport bool
	// spent counts the requests the client reported allowed since the grant
	// in force was sent (for the give-back of a parked grant).
	spent int64
	epoch int64  // the Allotment.Epoch of the grant in force
	seq   uint64 // the session seq of the token bucket in force

	// sent: an assignment is in force at the client (as far as the server
	// knows) until expires; for kindLease, expires is also when the next
	// allotment is due (end of the grant, or retry after a failure).
	sent    bool
	expires time.Time
	granted int64     // units of the grant in force (0: DENY_ALL until refill)
	grantAt time.Time // when it was sent
	winEnd  time.Time // the end of the grant's period

	leasing bool // its lease waits in the session's batch
}

// session is one stream's state. It is not safe for concurrent use: the
// stream's goroutine owns it. Every method takes the time now (the server's
// clock) so that tests drive it on a fake clock.
type session struct {
	srv     *Server
	domain  string
	buckets map[string]*bucket
	idBytes int    // at least the bytes of the buckets' ids (see room)
	seq     uint64 // assignments sent, to make each token bucket distinct
	snap    *rules.Snapshot
	orders  *keyOrders
	bt      batch // the actions of the message (or tick) being answered
	// scratch of leaseAll's Allot calls
	areqs []stack.AllotRequest
	aout  []stack.Allotment
	aidx  []int // gs index of each request
	aidx2 []int // the same, of the one-unit retries
	// counters for Stats
	reports, responses uint64
}

// batch collects the actions of one message (or tick), in order, so that
// the leases they need go to the store together (flush): a bucket waiting
// for its lease holds its place in acts (nil until flushed).
type batch struct {
	acts   []*rlqspb.RateLimitQuotaResponse_BucketAction
	grants []grant
}

// grant is one bucket's lease in a batch: asked for (want units; inForce:
// a grant still holds, this is a top-up), then answered (a or err).
type grant struct {
	b       *bucket
	slot    int // its action's index in batch.acts
	want    int64
	inForce bool
	a       stack.Allotment
	err     error
}

// reset empties bt for the next message; a bucket still waiting (the
// message was refused) waits no more.
func (bt *batch) reset() {
	for i := range bt.grants {
		bt.grants[i].b.leasing = false
	}
	clear(bt.acts)
	clear(bt.grants)
	bt.acts, bt.grants = bt.acts[:0], bt.grants[:0]
}

// response is bt's actions as one message, nil when there are none.
func (bt *batch) response() *rlqspb.RateLimitQuotaResponse {
	var resp *rlqspb.RateLimitQuotaResponse
	for _, a := range bt.acts {
		if a != nil {
			resp = appendAction(resp, a)
		}
	}
	return resp
}

func (s *Server) newSession() *session {
	return &session{srv: s, buckets: map[string]*bucket{}}
}

// handle applies one usage report and returns the response to send, nil
// when there is nothing to send. An error is a gRPC status that ends the
// stream. The leases the message's buckets need are taken together once
// every usage is applied (flush), the actions sent in the usages' order; a
// message refused takes no lease.
func (ss *session) handle(ctx context.Context, now time.Time, m *rlqspb.RateLimitQuotaUsageReports) (*rlqspb.RateLimitQuotaResponse, error) {
	ss.reports++
	lim := ss.srv.opts.RequestBounds
	switch {
	case ss.domain == "" && m.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "rlqs: domain: the first message of a stream must carry the domain")
	case ss.domain == "":
		if err := lim.CheckDomain(m.GetDomain()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "rlqs: domain: %v", err)
		}
		ss.domain = m.GetDomain()
	case m.GetDomain() != "" && m.GetDomain() != ss.domain:
		return nil, status.Errorf(codes.InvalidArgument, "rlqs: domain: the stream is for domain %q; a new domain needs a new stream", ss.domain)
	}
	usages := m.GetBucketQuotaUsages()
	if len(usages) > ss.srv.opts.MaxBuckets {
		return nil, status.Errorf(codes.ResourceExhausted, "rlqs: bucket_quota_usages: %d in one message, at most %d", len(usages), ss.srv.opts.MaxBuckets)
	}
	bt := &ss.bt
	defer bt.reset()
	for i, u := range usages {
		bm := u.GetBucketId().GetBucket()
		if len(bm) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d].bucket_id: empty bucket", i)
		}
		if err := checkBucket(lim, i, bm); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d].bucket_id: %v", i, err)
		}
		key := canonical(bm)
		b := ss.buckets[key]
		if b != nil && b.leasing {
			// The bucket twice in one message: its first usage's lease
			// is answered before the second is applied, as if the two
			// came one after the other.
			ss.flush(ctx, now)
		}
		if b == nil {
			if len(ss.buckets) >= ss.srv.opts.MaxBuckets {
				return nil, status.Errorf(codes.ResourceExhausted, "rlqs: bucket_quota_usages[%d]: the stream already has %d buckets, at most %d", i, len(ss.buckets), ss.srv.opts.MaxBuckets)
			}
			if err := ss.room(i, bm); err != nil {
				return nil, err
			}
			// A bucket this stream does not know: the same data plane's
			// from a stream that ended (parked), or a new one.
			if b = ss.srv.claim(ss, key, now, u.GetTimeElapsed().AsDuration()); b != nil {
				b.id = u.GetBucketId()
				ss.seq = max(ss.seq, b.seq) // the next token bucket differs from the one in force
			} else {
				b = &bucket{id: u.GetBucketId()}
				if err := ss.resolve(b); err != nil {
					return nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d].bucket_id: %v", i, err)
				}
			}
			ss.buckets[key] = b
		}
		if b.snap != ss.srv.src.Current() {
			// The rules were reloaded: match again; a bucket whose rule,
			// limit or kind changed gets a new assignment now.
			old := *b
			if err := ss.resolve(b); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "rlqs: bucket_quota_usages[%d].bucket_id: %v", i, err)
			}
			if b.kind != old.kind || b.quota.Limit != old.quota.Limit || ruleID(b.quota.Rule) != ruleID(old.quota.Rule) {
				b.sent, b.granted = false, 0
			}
		}
		el := max(u.GetTimeElapsed().AsDuration(), 0)
		// The report the client sends as it applies an assignment
		// (rlqs.proto: "it must send the current usage report for the
		// bucket") is expected: it covers a sliver of time, and says
		// nothing about the new grant yet.
		post := b.postReport && now.Sub(b.sentAt) <= ss.srv.opts.ReportingInterval/2
		if post {
			ss.srv.postReports.Add(1)
		}
		b.postReport = false
		b.lastReport = now
		if !post && el > 0 {
			b.periodic = now // on the client's reporting phase
		}
		// Everything reported after a grant counts as spent from it (some
		// of it may be the earlier grant's: the give-back errs low).
		b.spent = min(b.spent+int64(min(u.GetNumRequestsAllowed(), math.MaxInt32)), math.MaxInt64/2)
		b.observe(&ss.srv.opts, u.GetNumRequestsAllowed(), u.GetNumRequestsDenied(), el)
		// Denials mean the grant in force ran short only when the whole
		// reported period followed it (denials before it are stale).
		starved := !post && u.GetNumRequestsDenied() > 0 && u.GetTimeElapsed() != nil && !now.Add(-el).Before(b.grantAt)
		ss.act(now, b, starved)
	}
	ss.flush(ctx, now)
	resp := bt.response()
	if resp != nil {
		ss.responses++
	}
	return resp, nil
}

// tick sends what is due at now: new allotments for grants that ended and
// abandon actions for buckets nobody reported for Options.AbandonAfter.
func (ss *session) tick(ctx context.Context, now time.Time) *rlqspb.RateLimitQuotaResponse {
	bt := &ss.bt
	defer bt.reset()
	keys := make([]string, 0, len(ss.buckets))
	for k := range ss.buckets {
		keys = append(keys, k)
	}
	slices.Sort(keys) // a deterministic order of actions
	for _, k := range keys {
		b := ss.buckets[k]
		if !now.Before(b.lastReport.Add(ss.srv.opts.AbandonAfter)) {
			delete(ss.buckets, k)
			ss.srv.abandoned.Add(1)
			bt.acts = append(bt.acts, &rlqspb.RateLimitQuotaResponse_BucketAction{
				BucketId:     b.id,
				BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqspb.RateLimitQuotaResponse_BucketAction_AbandonAction{}},
			})
			continue
		}
		if b.kind == kindLease && !now.Before(b.expires) {
			ss.act(now, b, false)
		}
	}
	ss.flush(ctx, now)
	resp := bt.response()
	if resp != nil {
		ss.responses++
	}
	return resp
}

// next returns when tick has something to do, or the zero time when the
// stream has no buckets.
func (ss *session) next() time.Time {
	var t time.Time
	for _, b := range ss.buckets {
		d := b.lastReport.Add(ss.srv.opts.AbandonAfter)
		if b.kind == kindLease && b.expires.Before(d) {
			d = b.expires
		}
		if t.IsZero() || d.Before(t) {
			t = d
		}
	}
	return t
}

// resolve matches b against the rules in force and sets its kind.
func (ss *session) resolve(b *bucket) error {
	snap := ss.srv.src.Current()
	if ss.orders == nil || ss.snap != snap {
		ss.snap, ss.orders = snap, newKeyOrders(snap)
	}
	entries := ss.orders.entries(ss.srv.engine, ss.domain, b.id.GetBucket())
	q, err := ss.srv.engine.Quota(ss.domain, entries)
	if err != nil {
		return err
	}
	b.entries, b.quota, b.snap = entries, q, snap
	switch {
	case q.Rule == nil:
		b.kind = ss.srv.unmatched
	case q.Unlimited || q.Shadow:
		b.kind = kindAllow
	default:
		b.kind, b.lease = kindLease, ss.srv.leaseBy(q)
		if b.lease == leaseNone {
			// A limit no lease keeps within its bound: deny rather than
			// let the bucket past the rule (docs/rlqs.md).
			b.kind = kindDeny
			ss.srv.unleasable.Add(1)
			ss.srv.warnUnleasable(q)
		}
	}
	return nil
}

func ruleID(r *rules.Rule) string {
	if r == nil {
		return ""
	}
	return r.ID
}

// observe folds one usage report into b's demand estimate. Reports are
// pooled until they span at least half a reporting interval, so that no
// single short report (the one sent as an assignment is applied covers a
// few milliseconds) sets the estimate by itself; each pooled span then
// moves the estimate towards its own rate by 1 - e^(-span/interval), a
// time-weighted moving average (the first span sets it).
func (b *bucket) observe(o *Options, allowed, denied uint64, el time.Duration) {
	b.pendN += float64(allowed) + float64(denied)
	b.pendEl += el
	if b.pendEl < o.ReportingInterval/2 {
		return
	}
	sample := b.pendN / b.pendEl.Seconds()
	if !b.reported {
		b.rate, b.reported = sample, true
	} else {
		a := 1 - math.Exp(-b.pendEl.Seconds()/o.ReportingInterval.Seconds())
		b.rate += a * (sample - b.rate)
	}
	b.pendN, b.pendEl = 0, 0
}

// act adds the action b needs now to the session's batch: at once when it
// needs no lease, else as a grant that flush leases with the batch's
// others. starved: the client reported denials (its assignment ran short).
func (ss *session) act(now time.Time, b *bucket, starved bool) {
	bt := &ss.bt
	o := &ss.srv.opts
	if b.kind != kindLease {
		// Blanket rules live StaticTTL and are renewed (same strategy: the
		// client only extends the TTL) when less than two reporting
		// intervals are left.
		if b.sent && b.expires.Sub(now) > 2*o.ReportingInterval {
			return
		}
		if !b.sent || !now.Before(b.expires) {
			b.sentAt, b.postReport = now, true // applied as new: reported at once
		}
		b.sent, b.expires = true, now.Add(o.StaticTTL)
		act := ActionAllow
		if b.kind == kindDeny {
			act = ActionDeny
		}
		bt.acts = append(bt.acts, ss.srv.blanket(b.id, o.StaticTTL, act))
		return
	}
	inForce := b.sent && now.Before(b.expires)
	if inForce && !(starved && b.granted > 0) {
		return // the grant holds; a spent quota waits for its refill
	}
	l := b.quota.Limit
	var want float64
	switch {
	case !b.reported:
		want = float64(l.Quota) * o.InitialShare
	case inForce && b.winEnd.After(now):
		want = b.rate * b.winEnd.Sub(now).Seconds() * o.Headroom
	default:
		want = b.rate * l.Window.Seconds() * o.Headroom
	}
	w := int64(math.Ceil(max(want, 1)))
	w = min(w, stack.Capacity(l), math.MaxUint32)
	b.leasing = true
	bt.grants = append(bt.grants, grant{b: b, slot: len(bt.acts), want: w, inForce: inForce})
	bt.acts = append(bt.acts, nil)
}

// flush leases the grants of the session's batch (leaseAll) and puts each
// bucket's action in its place.
func (ss *session) flush(ctx context.Context, now time.Time) {
	bt := &ss.bt
	if len(bt.grants) == 0 {
		return
	}
	ss.leaseAll(ctx, bt.grants)
	for i := range bt.grants {
		g := &bt.grants[i]
		g.b.leasing = false
		bt.acts[g.slot] = ss.granted(now, g)
	}
	clear(bt.grants)
	bt.grants = bt.grants[:0]
}

// granted applies the answer to g's lease to its bucket and returns the
// action to send, or nil.
func (ss *session) granted(now time.Time, g *grant) *rlqspb.RateLimitQuotaResponse_BucketAction {
	o := &ss.srv.opts
	b, a, inForce, l := g.b, g.a, g.inForce, g.b.quota.Limit
	if g.err != nil {
		// Nothing new is sent: the client keeps what it has until that
		// assignment's TTL ends, then follows its expired behaviour.
		ss.srv.allotErrors.Add(1)
		ss.srv.logAllotError(g.err)
		if !inForce {
			b.expires = now.Add(o.ReportingInterval) // retry
		}
		return nil
	}
	ss.srv.grants.Add(1)
	ss.srv.grantedUnits.Add(uint64(a.Granted))
	if a.Granted == 0 {
		if inForce && b.granted > 0 {
			// Top-up refused: keep the grant in force (the client keeps
			// spending what it has left); nothing to send.
			return nil
		}
		wait := a.ResetAfter
		if wait <= 0 {
			wait = o.ReportingInterval
		}
		b.sent, b.expires, b.granted, b.winEnd, b.grantAt = true, now.Add(wait), 0, now.Add(wait), now
		b.sentAt, b.postReport, b.spent, b.epoch = now, true, 0, a.Epoch
		return ss.srv.blanket(b.id, wait, ActionDeny)
	}
	ttl := a.TTL
	if ttl <= 0 {
		ttl = time.Millisecond // the grant ends now; the client sees it expire
	}
	b.sent, b.expires, b.granted, b.winEnd, b.grantAt = true, now.Add(ttl), a.Granted, now.Add(ttl), now
	b.sentAt, b.postReport, b.spent, b.epoch = now, true, 0, a.Epoch
	ss.seq++
	b.seq = ss.seq
	ss.srv.assigned[ActionTokenBucket].Add(1)
	return assignment(b.id, ttl, tokenBucket(a.Granted, ttl, l.Window, ss.seq))
}

// blanket returns an ALLOW_ALL or DENY_ALL assignment, counted.
func (s *Server) blanket(id *rlqspb.BucketId, ttl time.Duration, act Action) *rlqspb.RateLimitQuotaResponse_BucketAction {
	s.assigned[act].Add(1)
	rule := typev3.RateLimitStrategy_ALLOW_ALL
	if act == ActionDeny {
		rule = typev3.RateLimitStrategy_DENY_ALL
	}
	return assignment(id, ttl, &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: rule}})
}

// leaseAll leases the grants gs: for each, up to want units of its
// bucket's counter for one client, at most 1/Split of what is left (the
// last units, fewer than Split, one at a time). Granted 0 comes with
// ResetAfter, how long until units are worth asking for again (the
// DENY_ALL's time to live).
//
// The buckets leased by Allot are leased in one call for all of them (the
// store takes each request in its own atomic step, in order), and a second
// for those that came back with nothing granted and units left (fewer than
// Split: 1/Split of them rounds down to nothing), one unit each; both calls
// share one Options.AllotTimeout. An error of a call is the error of every
// bucket in it (stack.Allotter: nothing may be assumed granted). The
// buckets leased by Takes are leased one after another, each with its own
// AllotTimeout: a batch of Takes is all or nothing (sluice.Store), so one
// bucket's refusal would refuse the others'.
func (ss *session) leaseAll(ctx context.Context, gs []grant) {
	s := ss.srv
	o := &s.opts
	reqs, idx := ss.areqs[:0], ss.aidx[:0]
	for i := range gs {
		g := &gs[i]
		if g.b.lease != leaseAllot {
			continue
		}
		idx = append(idx, i)
		reqs = append(reqs, stack.AllotRequest{Key: g.b.quota.Key, Limit: g.b.quota.Limit, Want: g.want, Split: o.Split})
	}
	if len(reqs) > 0 {
		out := slices.Grow(ss.aout[:0], len(reqs))[:len(reqs)]
		clear(out)
		actx, cancel := context.WithTimeout(ctx, o.AllotTimeout)
		err := s.allot(actx, reqs, out)
		for j, i := range idx {
			gs[i].a, gs[i].err = out[j], err
		}
		if err == nil {
			// Less than Split units are left: they go one at a time.
			again := reqs[:0] // reqs[j] is read before it is overwritten
			aidx := ss.aidx2[:0]
			for j, i := range idx {
				if a := out[j]; a.Granted == 0 && a.Remaining > 0 {
					r := reqs[j]
					r.Want, r.Split = 1, 1
					again = append(again, r)
					aidx = append(aidx, i)
				}
			}
			if len(again) > 0 {
				out = out[:len(again)]
				clear(out)
				err := s.allot(actx, again, out)
				for k, i := range aidx {
					gs[i].a, gs[i].err = out[k], err
				}
			}
			ss.aidx2 = aidx[:0]
		}
		cancel()
		ss.aout = out[:0]
	}
	clear(reqs)
	ss.areqs, ss.aidx = reqs[:0], idx[:0]
	for i := range gs {
		g := &gs[i]
		if g.b.lease == leaseTake {
			tctx, cancel := context.WithTimeout(ctx, o.AllotTimeout)
			g.a, g.err = s.takeLease(tctx, g.b.quota, g.want)
			cancel()
		}
		if g.err != nil {
			g.a = stack.Allotment{}
			continue
		}
		if g.a.Granted == 0 && g.b.quota.Limit.Algorithm != sluice.FixedWindow {
			// A bucket refills continuously and a sliding window's estimate
			// falls as it slides: deny until a unit is back, but for at least
			// a fifth of a reporting interval (so that a spent limit does not
			// cost a message per unit) and at most one interval.
			g.a.ResetAfter = min(max(g.a.ResetAfter, o.ReportingInterval/5), o.ReportingInterval)
		}
	}
}

// takeLease leases units of q's counter by Takes of Check's own op (q.Key,
// q.Limit) through the Allotter's Take, so that the stack routes them as it
// routes Check's and RLS, HTTP and RLQS spend one counter: a look (cost
// 0) for what is left, then a Take of min(want, left / Split) units (at
// least 1), again with what is left if a concurrent Take got there first
// (at most three Takes). A Take is all or nothing, so the units granted
// are taken in one atomic step. The grant's TTL: for fixed_window and
// sliding_window, until the window in which the units were counted ends
// (so a sliding window's units are spent within the window that counts
// them); for gcra and token_bucket (tokens taken now), min(Window, 1 h).
// Granted 0 comes with the RetryAfter of the last Take as ResetAfter.
func (s *Server) takeLease(ctx context.Context, q service.Quota, want int64) (stack.Allotment, error) {
	st := s.opts.Allotter
	ops := []sluice.Op{{Key: q.Key, Limit: q.Limit}}
	res := make([]sluice.Result, 1)
	if err := st.Take(ctx, ops, res); err != nil {
		return stack.Allotment{}, fmt.Errorf("rlqs: lease %q: %w", q.Key, err)
	}
	left := res[0].Remaining
	split := max(s.opts.Split, 1)
	for range 3 {
		n := max(min(want, left/split), 1)
		ops[0].Cost = n
		if err := st.Take(ctx, ops, res); err != nil {
			return stack.Allotment{}, fmt.Errorf("rlqs: lease %q: %w", q.Key, err)
		}
		r := &res[0]
		if r.Allowed {
			a := stack.Allotment{Granted: n, Remaining: r.Remaining, ResetAfter: r.ResetAfter}
			switch q.Limit.Algorithm {
			case sluice.FixedWindow:
				a.TTL = r.ResetAfter // the window's end (the count is > 0)
			case sluice.SlidingWindow:
				a.TTL = r.ResetAfter - q.Limit.Window // the end of the window counting the units
			default:
				a.TTL = min(q.Limit.Window, maxLease)
			}
			return a, nil
		}
		if r.Remaining == 0 {
			return stack.Allotment{ResetAfter: r.RetryAfter}, nil
		}
		left = r.Remaining
	}
	return stack.Allotment{ResetAfter: res[0].RetryAfter}, nil
}

// maxLease caps how long a bucket algorithm's grant may be spent (as the
// stores' Allot does).
const maxLease = time.Hour

// tokenBucket is a token bucket of exactly n tokens that refills less than
// one token within ttl: its fill interval is more than twice ttl (and the
// window), and varies with seq so that no two consecutive assignments are
// the same strategy (a client only extends the TTL of an unchanged
// strategy, without refilling it).
func tokenBucket(n int64, ttl, window time.Duration, seq uint64) *typev3.RateLimitStrategy {
	fill := 2*max(ttl, window) + time.Second + time.Duration(seq%1000)*time.Millisecond
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(min(n, math.MaxUint32)),
		TokensPerFill: wrapperspb.UInt32(1),
		FillInterval:  durationpb.New(fill),
	}}}
}

func assignment(id *rlqspb.BucketId, ttl time.Duration, st *typev3.RateLimitStrategy) *rlqspb.RateLimitQuotaResponse_BucketAction {
	return &rlqspb.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{QuotaAssignmentAction: &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
			AssignmentTimeToLive: durationpb.New(ttl),
			RateLimitStrategy:    st,
		}},
	}
}

func appendAction(r *rlqspb.RateLimitQuotaResponse, a *rlqspb.RateLimitQuotaResponse_BucketAction) *rlqspb.RateLimitQuotaResponse {
	if r == nil {
		r = &rlqspb.RateLimitQuotaResponse{}
	}
	r.BucketAction = append(r.BucketAction, a)
	return r
}

// checkBucket checks a bucket's size: entries, key and value lengths.
func checkBucket(lim service.RequestBounds, i int, m map[string]string) error {
	keys := sortedKeys(m)
	return lim.CheckEntries(i, len(keys), func(j int) (string, string) { return keys[j], m[keys[j]] })
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// canonical is a bucket's identity: its entries in key order, each length-
// prefixed, so key order in the map does not matter and no two buckets
// collide.
func canonical(m map[string]string) string {
	var b strings.Builder
	for _, k := range sortedKeys(m) {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
		b.WriteString(strconv.Itoa(len(m[k])))
		b.WriteByte(':')
		b.WriteString(m[k])
	}
	return b.String()
}
