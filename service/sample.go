package service

import (
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
)

// Sample keeps a bounded sample of recent check requests with what the
// rules in force made of them, so that a rule change can be previewed
// against real traffic (sluice diff). It records one check in every
// Every, in a ring of Size requests: memory is bounded by Size times the
// largest request RequestBounds admit. It keeps what the rules see (domain,
// descriptor entries, hits) and nothing else. Create it with NewSample;
// safe for concurrent use.
type Sample struct {
	every uint64
	seen  atomic.Uint64

	mu   sync.Mutex
	ring []SampledRequest
	next int
	full bool
}

// SampledRequest is one sampled check: the request and, per descriptor,
// the rule that matched it then.
type SampledRequest struct {
	Request Request
	// Matched has one entry per descriptor of Request.
	Matched []SampledMatch
}

// SampledMatch is what the rules in force made of one descriptor.
type SampledMatch struct {
	// Rule is the ID of the rule that matched; "" when none did (or the
	// rule was switched off, or the descriptor gave its own limit).
	Rule string
	// Unlimited: the rule is unlimited.
	Unlimited bool
	// Limit is the rule file's limit (zero when Rule is "" or Unlimited).
	Limit sluice.Limit
	// Denied: the descriptor was over its limit (shadow mode included).
	Denied bool
}

// MaxSampleSize bounds NewSample's size.
const MaxSampleSize = 100_000

// NewSample returns a Sample of the last size sampled checks, taking one
// check in every every (at least 1). size is clamped to [1,
// MaxSampleSize].
func NewSample(size, every int) *Sample {
	size = min(max(size, 1), MaxSampleSize)
	return &Sample{every: uint64(max(every, 1)), ring: make([]SampledRequest, size)}
}

// record adds a decided request, one in every s.every.
func (s *Sample) record(req *Request, resp *Response) {
	if s.seen.Add(1)%s.every != 0 {
		return
	}
	r := SampledRequest{Request: Request{Domain: req.Domain, Hits: req.Hits, Descriptors: make([]Descriptor, len(req.Descriptors))},
		Matched: make([]SampledMatch, len(req.Descriptors))}
	for i := range req.Descriptors {
		d := &req.Descriptors[i]
		c := Descriptor{Entries: append([]rules.Entry(nil), d.Entries...)}
		if d.Limit != nil {
			l := *d.Limit
			c.Limit = &l
		}
		if d.Hits != nil {
			h := *d.Hits
			c.Hits = &h
		}
		r.Request.Descriptors[i] = c
		st := &resp.Statuses[i]
		m := SampledMatch{Denied: st.Code == CodeOverLimit || st.Shadowed}
		if st.Rule != nil {
			m.Rule, m.Unlimited = st.Rule.ID, st.Rule.Unlimited
			if !st.Rule.Unlimited {
				m.Limit = st.Rule.Limit
			}
		}
		r.Matched[i] = m
	}
	s.mu.Lock()
	s.ring[s.next] = r
	s.next++
	if s.next == len(s.ring) {
		s.next, s.full = 0, true
	}
	s.mu.Unlock()
}

// Requests returns the sampled requests, oldest first. The slice is the
// caller's; its requests are shared and must not be modified.
func (s *Sample) Requests() []SampledRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		return append([]SampledRequest(nil), s.ring[:s.next]...)
	}
	out := make([]SampledRequest, 0, len(s.ring))
	out = append(out, s.ring[s.next:]...)
	return append(out, s.ring[:s.next]...)
}

// Size returns how many requests the sample holds at most, and Every the
// sampling period.
func (s *Sample) Size() int { return len(s.ring) }

// Every returns the sampling period: one check in Every is recorded.
func (s *Sample) Every() int { return int(s.every) }
