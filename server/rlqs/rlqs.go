// Package rlqs serves Envoy's rate limit quota service, v3
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas),
// over gRPC. Each Envoy groups requests into buckets, reports their usage
// every few seconds, and enforces what the server assigns: allow all, deny
// all, or a token bucket.
//
// A bucket is matched against the rules as a descriptor (see order.go for
// the order of its keys). A bucket whose rule has a fixed_window, gcra,
// token_bucket or sliding_window limit is served token buckets of exactly
// the units leased for it from the store, on the same counter as Check
// (fixed_window and gcra through stack.Allotter, the allotments of
// placement: hybrid; token_bucket and sliding_window, and rules placed
// local, by Takes of the units on Check's own op), so Envoys never admit
// more than the store granted: per fixed window, at most the limit
// fleet-wide. A limited rule that cannot be leased with a bound
// (sliding_log, leaky_bucket, concurrency) is served DENY_ALL. See
// docs/rlqs.md.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/stack"
)

// Unmatched is what a bucket that matches no rule gets.
type Unmatched uint8

const (
	// AllowUnmatched assigns ALLOW_ALL (the zero value).
	AllowUnmatched Unmatched = iota
	// DenyUnmatched assigns DENY_ALL.
	DenyUnmatched
)

// ParseUnmatched parses "allow" or "deny" ("" is "allow").
func ParseUnmatched(s string) (Unmatched, error) {
	switch s {
	case "allow", "":
		return AllowUnmatched, nil
	case "deny":
		return DenyUnmatched, nil
	}
	return 0, fmt.Errorf("rlqs: unmatched: %q, want allow or deny", s)
}

// Options configure a Server. The zero value is valid: every field has a
// default.
type Options struct {
	// Unmatched is the assignment of a bucket that matches no rule. (A
	// bucket whose rule has a limit that cannot be leased is served
	// DENY_ALL whatever Unmatched says: see Stats.Unleasable.)
	Unmatched Unmatched
	// ReportingInterval is how often Envoys report (Envoy sends every 5 s
	// today). Default 5 s.
	ReportingInterval time.Duration
	// AbandonAfter: a bucket nobody reported for this long is abandoned
	// (the client forgets it). Default 6 × ReportingInterval.
	AbandonAfter time.Duration
	// StaticTTL is the time to live of an ALLOW_ALL or DENY_ALL assignment
	// that is not a spent quota's; it is renewed while the bucket is
	// reported. Default 12 × ReportingInterval.
	StaticTTL time.Duration
	// MaxBuckets bounds the buckets of one stream (and the usages of one
	// message). Default 1000.
	MaxBuckets int
	// MaxBucketBytes bounds the bytes of bucket ids (keys and values) one
	// stream holds: a new bucket past it ends the stream with
	// ResourceExhausted. Without it a stream of MaxBuckets buckets at the
	// entry limits (service.RequestBounds: 16 entries of 256-byte keys and
	// 4,096-byte values) held 70 MB of ids, 184 MB of heap. Envoy reports
	// a stream's buckets together, so their ids fit in one message
	// (--max-request-bytes, 256 KiB by default). Default 1 MiB.
	MaxBucketBytes int
	// Split caps one grant at 1/Split of the quota left (as placement:
	// hybrid does), so that near the limit assignments shrink. Default 4.
	Split int64
	// InitialShare is the fraction of a limit's quota asked for a bucket
	// whose demand is not known yet. Default 1/16.
	InitialShare float64
	// Headroom multiplies the demand reported, to size a grant. Default 1.25.
	Headroom float64
	// AllotTimeout bounds the Allot calls of one message (or window's
	// end): the one for all its buckets leased by Allot and the second,
	// one unit each, for those down to their last units; and, for each
	// bucket leased by Takes, its Takes. Default 1 s.
	AllotTimeout time.Duration
	// Allotter is the store grants are leased from; it must hold the
	// counters the engine's Check charges (for `sluice serve`, its store
	// stack, whose Allot is the Redis or the memory store's). A bucket of
	// a fixed_window or gcra rule is leased with Allot (unless the rule is
	// placed local); one of a token_bucket or sliding_window rule, or of a
	// rule placed local, with Takes of the units on Check's op (the
	// Allotter's Take, so the stack routes it as Check's). Nil: nothing is
	// leased, every bucket of a limited rule is served DENY_ALL.
	Allotter stack.Allotter
	// ReconnectGrace is how long the buckets of a stream that ended are
	// kept, with their grants, for the same data plane to take over on a
	// new stream (park.go, docs/rlqs.md); when it ends, their unspent
	// units go back to the store. Default 2 × ReportingInterval; a value
	// below ReportingInterval is an error (an Envoy reconnects at its next
	// report); negative: buckets are forgotten when their stream ends.
	ReconnectGrace time.Duration
	// ReconnectTolerance is how far the time of a parked bucket's last
	// report may lie from the time a new stream's report says it was
	// (now − time_elapsed) for the bucket to be handed back. Default
	// ReportingInterval / 50 (100 ms).
	ReconnectTolerance time.Duration
	// MaxStreamAge ends a stream (status OK) once it has been open this
	// long, less up to a tenth at random so that streams opened together
	// do not end together; the Envoy reconnects at its next report and
	// keeps its grants (ReconnectGrace). Zero: streams never age out.
	MaxStreamAge time.Duration
	// RequestBounds bound domains and bucket entries (see service.RequestBounds). The
	// zero value is the defaults.
	RequestBounds service.RequestBounds
	// Logger receives store errors (at most one a second). Nil discards.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// RuleSource supplies the rules in force (service.RuleSource).
type RuleSource = service.RuleSource

// Server implements RateLimitQuotaServiceServer. Create it with New; it is
// safe for concurrent use (each stream is served by its own goroutine).
type Server struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer
	engine    *service.Engine
	src       RuleSource
	opts      Options
	unmatched kind
	log       *slog.Logger

	stop     chan struct{}
	stopOnce sync.Once
	lastLog  atomic.Int64
	lastWarn atomic.Int64

	streams, reports, responses                  atomic.Uint64
	grants, grantedUnits, allotErrors, abandoned atomic.Uint64
	unleasable                                   atomic.Uint64
	open                                         atomic.Int64
	postReports                                  atomic.Uint64
	aged                                         atomic.Uint64

	// the buckets of ended streams (park.go)
	parkMu                                            sync.Mutex
	parked                                            []*parked
	realClock                                         bool // Options.Now unset: reap on timers
	parkedBuckets, handedBack, parkExpired, givenBack atomic.Uint64
	ambiguous                                         atomic.Uint64
	assigned                                          [3]atomic.Uint64 // by Action
}

// New returns a Server deciding with e and the rules of src (the engine's
// rule source).
func New(e *service.Engine, src RuleSource, opts Options) (*Server, error) {
	if e == nil || src == nil {
		return nil, errors.New("rlqs: New: nil engine or rule source")
	}
	if opts.ReportingInterval < 0 || opts.AbandonAfter < 0 || opts.StaticTTL < 0 || opts.MaxBuckets < 0 || opts.MaxBucketBytes < 0 ||
		opts.Split < 0 || opts.InitialShare < 0 || opts.InitialShare > 1 || opts.Headroom < 0 || opts.AllotTimeout < 0 ||
		opts.ReconnectTolerance < 0 || opts.MaxStreamAge < 0 {
		return nil, errors.New("rlqs: New: negative option, or initial share above 1")
	}
	if opts.ReportingInterval == 0 {
		opts.ReportingInterval = 5 * time.Second
	}
	switch {
	case opts.ReconnectGrace == 0:
		opts.ReconnectGrace = 2 * opts.ReportingInterval
	case opts.ReconnectGrace > 0 && opts.ReconnectGrace < opts.ReportingInterval:
		return nil, fmt.Errorf("rlqs: New: reconnect grace %v is shorter than the reporting interval %v", opts.ReconnectGrace, opts.ReportingInterval)
	}
	if opts.ReconnectTolerance == 0 {
		opts.ReconnectTolerance = opts.ReportingInterval / 50
	}
	if opts.AbandonAfter == 0 {
		opts.AbandonAfter = 6 * opts.ReportingInterval
	}
	if opts.StaticTTL == 0 {
		opts.StaticTTL = 12 * opts.ReportingInterval
	}
	if opts.MaxBuckets == 0 {
		opts.MaxBuckets = 1000
	}
	if opts.MaxBucketBytes == 0 {
		opts.MaxBucketBytes = DefaultMaxBucketBytes
	}
	if opts.Split == 0 {
		opts.Split = 4
	}
	if opts.InitialShare == 0 {
		opts.InitialShare = 1.0 / 16
	}
	if opts.Headroom == 0 {
		opts.Headroom = 1.25
	}
	if opts.AllotTimeout == 0 {
		opts.AllotTimeout = time.Second
	}
	realClock := opts.Now == nil
	if opts.Now == nil {
		opts.Now = time.Now
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{engine: e, src: src, opts: opts, log: log, stop: make(chan struct{}), unmatched: kindAllow, realClock: realClock}
	if opts.Unmatched == DenyUnmatched {
		s.unmatched = kindDeny
	}
	return s, nil
}

// ServiceName is the gRPC service Register serves.
const ServiceName = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService"

// Register adds the service to g.
func (s *Server) Register(g grpc.ServiceRegistrar) { rlqspb.RegisterRateLimitQuotaServiceServer(g, s) }

// Shutdown ends every stream cleanly (status OK; Envoys keep their
// assignments until their TTLs end and reconnect elsewhere). Streams
// opened afterwards end at once. Safe to call more than once.
func (s *Server) Shutdown() { s.stopOnce.Do(func() { close(s.stop) }) }

// Action is the kind of a quota assignment sent, for Stats.Assignments.
type Action uint8

const (
	// ActionAllow is a blanket ALLOW_ALL.
	ActionAllow Action = iota
	// ActionDeny is a blanket DENY_ALL (a spent quota's, an unleasable
	// rule's, or Unmatched deny).
	ActionDeny
	// ActionTokenBucket is a token bucket of the units granted.
	ActionTokenBucket
)

// String returns "allow", "deny" or "token_bucket" (a metric label).
func (a Action) String() string {
	switch a {
	case ActionAllow:
		return "allow"
	case ActionDeny:
		return "deny"
	}
	return "token_bucket"
}

// Actions lists every Action, in order.
func Actions() []Action { return []Action{ActionAllow, ActionDeny, ActionTokenBucket} }

// Stats are a Server's counters since New (Open is a gauge). Reports and
// Responses count the messages of streams served over gRPC.
type Stats struct {
	// Streams counts streams opened; Open is how many are open now.
	Streams uint64
	Open    int64
	// Reports counts usage-report messages received, Responses messages
	// sent.
	Reports, Responses uint64
	// Assignments counts quota assignments sent, by Action.
	Assignments [3]uint64
	// Grants counts allotments taken, GrantedUnits their units.
	Grants, GrantedUnits uint64
	// AllotErrors counts allotments the store failed; Abandoned, abandon
	// actions sent (buckets nobody reported for Options.AbandonAfter).
	AllotErrors, Abandoned uint64
	// Unleasable counts buckets (matched or matched again) whose rule has
	// a limit that cannot be leased with a bound: served DENY_ALL.
	Unleasable uint64
	// PostAssignmentReports counts the usage reports recognised as the
	// one a client sends as it applies an assignment.
	PostAssignmentReports uint64
	// Aged counts streams ended by Options.MaxStreamAge.
	Aged uint64
	// Parked counts buckets kept when their stream ended; HandedBack,
	// those a new stream took over; ParkExpired, those whose grace period
	// ended; Ambiguous, reports that fitted more than one parked bucket
	// (served as new); GivenBack, the units given back to the store when
	// grace periods ended.
	Parked, HandedBack, ParkExpired, Ambiguous, GivenBack uint64
}

// Stats returns the counters. Safe for concurrent use.
func (s *Server) Stats() Stats {
	st := Stats{
		Streams: s.streams.Load(), Open: s.open.Load(), Reports: s.reports.Load(), Responses: s.responses.Load(),
		Grants: s.grants.Load(), GrantedUnits: s.grantedUnits.Load(), AllotErrors: s.allotErrors.Load(),
		Abandoned: s.abandoned.Load(), Unleasable: s.unleasable.Load(),
		PostAssignmentReports: s.postReports.Load(), Aged: s.aged.Load(),
		Parked: s.parkedBuckets.Load(), HandedBack: s.handedBack.Load(), ParkExpired: s.parkExpired.Load(),
		Ambiguous: s.ambiguous.Load(), GivenBack: s.givenBack.Load(),
	}
	for i := range st.Assignments {
		st.Assignments[i] = s.assigned[i].Load()
	}
	return st
}

// allot leases from Options.Allotter (never nil when called: see leaseBy).
func (s *Server) allot(ctx context.Context, reqs []stack.AllotRequest, out []stack.Allotment) error {
	return s.opts.Allotter.Allot(ctx, reqs, out)
}

// leaseBy says how q's counter is leased: with Allot, with Takes, or not
// at all (leaseNone).
func (s *Server) leaseBy(q service.Quota) lease {
	if s.opts.Allotter == nil || q.Key == "" || q.Rule == nil {
		return leaseNone
	}
	alg := q.Limit.Algorithm
	switch {
	case stack.AllotAlgorithm(alg) && q.Rule.Placement != rules.PlacementLocal:
		return leaseAllot
	case stack.AllotAlgorithm(alg), alg == sluice.TokenBucket, alg == sluice.SlidingWindow:
		return leaseTake
	}
	return leaseNone
}

func (s *Server) warnUnleasable(q service.Quota) {
	now := time.Now().UnixNano()
	if last := s.lastWarn.Load(); now-last < int64(time.Second) || !s.lastWarn.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("rlqs: a rule's limit cannot be leased with a bound: its buckets are denied (docs/rlqs.md)",
		"rule", ruleID(q.Rule), "algorithm", q.Limit.Algorithm.String())
}

func (s *Server) logAllotError(err error) {
	now := time.Now().UnixNano()
	if last := s.lastLog.Load(); now-last < int64(time.Second) || !s.lastLog.CompareAndSwap(last, now) {
		return
	}
	s.log.Warn("rlqs: allotment failed; Envoys keep their assignments until their TTLs end", "err", err)
}

// StreamRateLimitQuotas serves one Envoy's stream until it ends: io.EOF
// from the client (a clean end, status OK), Shutdown (OK), the client
// going away (its context's error) or a bad message (InvalidArgument or
// ResourceExhausted, naming the field).
func (s *Server) StreamRateLimitQuotas(stream rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	s.streams.Add(1)
	s.open.Add(1)
	defer s.open.Add(-1)
	ctx := stream.Context()
	ss := s.newSession()
	defer func() { s.endSession(ss, s.opts.Now()) }()
	var aged <-chan time.Time
	if a := s.opts.MaxStreamAge; a > 0 {
		t := time.NewTimer(a - rand.N(a/10+1))
		defer t.Stop()
		aged = t.C
	}
	type recv struct {
		m   *rlqspb.RateLimitQuotaUsageReports
		err error
	}
	in := make(chan recv)
	go func() {
		for {
			m, err := stream.Recv()
			select {
			case in <- recv{m, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if t := ss.next(); !t.IsZero() {
			timer.Reset(max(t.Sub(s.opts.Now()), 0))
		} else {
			timer.Reset(time.Hour)
		}
		var resp *rlqspb.RateLimitQuotaResponse
		select {
		case <-s.stop:
			return nil
		case <-aged:
			s.aged.Add(1)
			return nil // the Envoy reconnects at its next report; its buckets are parked
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case r := <-in:
			if errors.Is(r.err, io.EOF) {
				return nil
			}
			if r.err != nil {
				return r.err
			}
			s.reports.Add(1)
			var err error
			if resp, err = ss.handle(ctx, s.opts.Now(), r.m); err != nil {
				return err
			}
		case <-timer.C:
			resp = ss.tick(ctx, s.opts.Now())
		}
		if resp != nil {
			s.responses.Add(1)
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

var _ rlqspb.RateLimitQuotaServiceServer = (*Server)(nil)
