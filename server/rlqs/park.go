package rlqs

import (
	"context"
	"math"
	"time"

	"github.com/sluice-rl/sluice/store/stack"
)

// Grants that outlive a stream.
//
// When a stream ends (the client went away, a load balancer drained it,
// Options.MaxStreamAge ended it), its buckets are parked for
// Options.ReconnectGrace with the state of their assignments: what was
// granted, until when, the demand estimate. An Envoy keeps its
// assignments across a broken stream and reports on a new one at its
// next reporting interval; when that report names a parked bucket, the
// new stream takes the bucket over as it was, and sends nothing: the
// Envoy goes on spending the token bucket it holds, and gets its next
// grant when that one ends, as if the stream had never broken.
//
// The protocol carries no identity of the data plane, and every Envoy of a
// fleet may report the same bucket ids. A bucket is handed back to the
// data plane that held it by the times of its reports. A usage report
// says how long ago the client last reported the bucket (time_elapsed),
// and the parked bucket says when the server received its last report and
// its last periodic one (neither the bucket's first nor one sent as an
// assignment was applied: rlqs.proto does not say whether time_elapsed
// counts from those, so either fits). A parked bucket fits when one of
// them lies within Options.ReconnectTolerance of now − time_elapsed; when
// several fit (their Envoys all reported at once as a window's grants
// were applied), the one whose periodic reports fall on the same phase of
// the reporting interval as now is taken. Only a single fit is handed
// back; once a stream has taken over a bucket of a parked stream, that
// stream's other buckets go to it too. Where the fit is not single (two
// Envoys reporting within the tolerance of each other) nothing is handed
// back: the report is served as a new bucket's, its grant is fresh from
// the store, and the parked ones are given back when the grace period
// ends. A bucket handed to the wrong client would let it spend, from a
// full token bucket, units the other had already spent.
//
// When the grace period ends, a parked bucket's unspent units go back to
// the store (for a fixed_window or gcra rule, leased by Allot: the give-back
// of stack.AllotRequest, void once the window has passed): the units
// granted less those reported allowed since, and less what the client
// could have spent between its last report and the end of the stream at
// its estimated demand × Options.Headroom. By then an Envoy that is alive
// has reported on some stream (the grace period is at least one reporting
// interval), and a server that answered its report replaced the token
// bucket it held. Units of a rule leased by Takes (token_bucket,
// sliding_window, placement local) are not given back: they are void when
// the grant's time to live ends.

// parked is one ended stream's buckets, waiting for their data plane.
type parked struct {
	domain  string
	buckets map[string]*bucket
	ended   time.Time
	until   time.Time
	owner   *session // the stream that took over one of its buckets
}

// endSession parks ss's buckets (see above) when the stream has ended at
// now. Called once per stream, by its goroutine, as it returns.
func (s *Server) endSession(ss *session, now time.Time) {
	if s.opts.ReconnectGrace < 0 || len(ss.buckets) == 0 || ss.domain == "" {
		return
	}
	p := &parked{domain: ss.domain, buckets: ss.buckets, ended: now, until: now.Add(s.opts.ReconnectGrace)}
	ss.buckets = map[string]*bucket{}
	for _, b := range p.buckets {
		b.leasing = false
	}
	s.parkMu.Lock()
	s.parked = append(s.parked, p)
	s.parkMu.Unlock()
	s.parkedBuckets.Add(uint64(len(p.buckets)))
	if s.realClock {
		time.AfterFunc(s.opts.ReconnectGrace+time.Millisecond, func() {
			select {
			case <-s.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.AllotTimeout)
			defer cancel()
			s.reap(ctx, s.opts.Now())
		})
	}
}

// claim hands the parked bucket key back to ss, or returns nil: ss's
// report of it, received at now, says the client last reported it el ago.
func (s *Server) claim(ss *session, key string, now time.Time, el time.Duration) *bucket {
	s.parkMu.Lock()
	defer s.parkMu.Unlock()
	if len(s.parked) == 0 {
		return nil
	}
	take := func(i int) *bucket {
		p := s.parked[i]
		b := p.buckets[key]
		delete(p.buckets, key)
		p.owner = ss
		if len(p.buckets) == 0 {
			s.parked = append(s.parked[:i], s.parked[i+1:]...)
		}
		s.handedBack.Add(1)
		return b
	}
	for i, p := range s.parked {
		if p.owner == ss && p.buckets[key] != nil && now.Before(p.until) {
			return take(i)
		}
	}
	if el <= 0 {
		return nil
	}
	last, tol, iv := now.Add(-el), s.opts.ReconnectTolerance, s.opts.ReportingInterval
	near := func(a, b time.Time) bool { return absDur(a.Sub(b)) <= tol }
	var fit, phased []int
	for i, p := range s.parked {
		b := p.buckets[key]
		if b == nil || p.owner != nil || p.domain != ss.domain || !now.Before(p.until) {
			continue
		}
		if !near(b.lastReport, last) && (b.periodic.IsZero() || !near(b.periodic, last)) {
			continue
		}
		fit = append(fit, i)
		if !b.periodic.IsZero() {
			if off := now.Sub(b.periodic) % iv; off <= tol || iv-off <= tol {
				phased = append(phased, i)
			}
		}
	}
	switch {
	case len(fit) == 1:
		return take(fit[0])
	case len(phased) == 1:
		return take(phased[0])
	case len(fit) > 1:
		s.ambiguous.Add(1)
	}
	return nil
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// reap ends the grace period of the parked streams whose grace has run out
// at now, giving their buckets' unspent units back to the store (see
// above). Returns the units given back.
func (s *Server) reap(ctx context.Context, now time.Time) int64 {
	s.parkMu.Lock()
	var due []*parked
	keep := s.parked[:0]
	for _, p := range s.parked {
		if now.Before(p.until) {
			keep = append(keep, p)
		} else {
			due = append(due, p)
		}
	}
	clear(s.parked[len(keep):])
	s.parked = keep
	s.parkMu.Unlock()
	if len(due) == 0 {
		return 0
	}
	var reqs []stack.AllotRequest
	for _, p := range due {
		s.parkExpired.Add(uint64(len(p.buckets)))
		for _, b := range p.buckets {
			if g := s.unspent(p, b, now); g > 0 {
				reqs = append(reqs, stack.AllotRequest{Key: b.quota.Key, Limit: b.quota.Limit, Give: g, Epoch: b.epoch, Split: 1})
			}
		}
	}
	if len(reqs) == 0 {
		return 0
	}
	out := make([]stack.Allotment, len(reqs))
	if err := s.allot(ctx, reqs, out); err != nil {
		s.allotErrors.Add(1)
		s.logAllotError(err)
		return 0
	}
	var n int64
	for _, r := range reqs {
		n += r.Give
	}
	s.givenBack.Add(uint64(n))
	return n
}

// unspent is what a parked bucket's grant can give back at now: 0 unless
// it is an Allot lease still in force.
func (s *Server) unspent(p *parked, b *bucket, now time.Time) int64 {
	if b.kind != kindLease || b.lease != leaseAllot || b.granted <= 0 || !now.Before(b.expires) {
		return 0
	}
	since := max(p.ended.Sub(b.lastReport), 0).Seconds()
	maybe := math.Ceil(b.rate * s.opts.Headroom * since)
	if !b.reported {
		maybe = float64(b.granted) // no estimate: assume it all spent
	}
	return max(b.granted-b.spent-int64(min(maybe, float64(b.granted))), 0)
}
