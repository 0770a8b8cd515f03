package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/sony/gobreaker/v2"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/stack"
)

// Defaults of BreakerOptions.
const (
	DefaultBreakerConsecutiveFailures = 5
	DefaultBreakerConsecutiveTimeouts = 3
	DefaultBreakerFailureRatio        = 0.5
	DefaultBreakerMinCalls            = 5
	DefaultBreakerWindow              = 10 * time.Second
	DefaultBreakerOpenTimeout         = time.Second
	DefaultBreakerHalfOpenProbes      = 1
)

// BreakerOptions configure the circuit breaker the store keeps for each
// node it sends script calls to (the server; with Sentinel the current
// master; with Cluster each master). A breaker counts script calls, not
// Takes: one call that fails is one failure however many Takes it carried.
// It opens only on evidence that the node is down or erroring, never on one
// slow call. While a node's breaker is open, Takes for its keys fail at once
// with an error wrapping sluice.ErrStoreUnavailable; after OpenTimeout it
// lets HalfOpenProbes calls through, and closes when they all succeed.
//
// The zero value means every default.
type BreakerOptions struct {
	// ConsecutiveFailures opens the breaker after this many calls in a row
	// failed at the connection level: refused, reset or closed connections
	// and failed dials (the node is gone). Timeouts and Redis error replies
	// do not count here. Default 5.
	ConsecutiveFailures int
	// ConsecutiveTimeouts opens the breaker after this many calls in a row
	// got no reply within Options.Timeout, with no successful call between:
	// a hung node (SIGSTOP, a stuck failover) gives timeouts, not errors.
	// Under load a call now and then is slow, but the next ones succeed
	// and start the count again. Default 3.
	ConsecutiveTimeouts int
	// FailureRatio opens the breaker when at least this fraction of the
	// calls that completed within Window failed (timeouts, Redis error
	// replies and connection failures alike), once at least MinCalls
	// completed in it. In (0, 1]. Default 0.5.
	FailureRatio float64
	// MinCalls is the least number of completed calls in Window before
	// FailureRatio applies. Default 5.
	MinCalls int
	// Window is the rolling window of FailureRatio, counted in ten buckets.
	// Default 10s.
	Window time.Duration
	// OpenTimeout is how long an open breaker fails calls before it lets
	// probes through. Default 1s.
	OpenTimeout time.Duration
	// HalfOpenProbes is how many calls a half-open breaker lets through;
	// when they all succeed it closes, when one fails it opens again.
	// Default 1.
	HalfOpenProbes int
}

// withDefaults returns b with zero fields set to their defaults.
func (b BreakerOptions) withDefaults() BreakerOptions {
	if b.ConsecutiveFailures == 0 {
		b.ConsecutiveFailures = DefaultBreakerConsecutiveFailures
	}
	if b.ConsecutiveTimeouts == 0 {
		b.ConsecutiveTimeouts = DefaultBreakerConsecutiveTimeouts
	}
	if b.FailureRatio == 0 {
		b.FailureRatio = DefaultBreakerFailureRatio
	}
	if b.MinCalls == 0 {
		b.MinCalls = DefaultBreakerMinCalls
	}
	if b.Window == 0 {
		b.Window = DefaultBreakerWindow
	}
	if b.OpenTimeout == 0 {
		b.OpenTimeout = DefaultBreakerOpenTimeout
	}
	if b.HalfOpenProbes == 0 {
		b.HalfOpenProbes = DefaultBreakerHalfOpenProbes
	}
	return b
}

// validate reports every invalid field of b (zero fields are valid: they
// mean the default).
func (b BreakerOptions) validate() []error {
	var errs []error
	if b.ConsecutiveFailures < 0 {
		errs = append(errs, fmt.Errorf("breaker consecutive failures %d, want ≥ 1 (0 for the default)", b.ConsecutiveFailures))
	}
	if b.ConsecutiveTimeouts < 0 {
		errs = append(errs, fmt.Errorf("breaker consecutive timeouts %d, want ≥ 1 (0 for the default)", b.ConsecutiveTimeouts))
	}
	if b.FailureRatio < 0 || b.FailureRatio > 1 {
		errs = append(errs, fmt.Errorf("breaker failure ratio %v, want in (0, 1] (0 for the default)", b.FailureRatio))
	}
	if b.MinCalls < 0 {
		errs = append(errs, fmt.Errorf("breaker min calls %d, want ≥ 1 (0 for the default)", b.MinCalls))
	}
	if b.Window < 0 || (b.Window > 0 && b.Window < 10*time.Millisecond) {
		errs = append(errs, fmt.Errorf("breaker window %v, want ≥ 10ms (0 for the default)", b.Window))
	}
	if b.OpenTimeout < 0 {
		errs = append(errs, fmt.Errorf("breaker open timeout %v, want positive (0 for the default)", b.OpenTimeout))
	}
	if b.HalfOpenProbes < 0 || b.HalfOpenProbes > 1<<16 {
		errs = append(errs, fmt.Errorf("breaker half-open probes %d, want 1 to 65536 (0 for the default)", b.HalfOpenProbes))
	}
	return errs
}

// callOutcome classifies the end of one script call for a breaker.
type callOutcome uint8

const (
	callOK      callOutcome = iota
	callConn                // connection refused, reset, closed; dial failed
	callTimeout             // no reply within the store timeout
	callError               // a Redis error reply, or a reply the store could not read
	callIgnored             // the store was closed: says nothing about the node
)

// classify says what err, the error of a script call, tells about the node.
func classify(err error, closed bool) callOutcome {
	switch {
	case err == nil:
		return callOK
	case closed:
		return callIgnored
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return callTimeout
	}
	var nerr net.Error
	if errors.As(err, &nerr) && nerr.Timeout() {
		return callTimeout
	}
	if _, ok := rueidis.IsRedisErr(err); ok {
		return callError
	}
	if errors.Is(err, errExpired) {
		return callTimeout
	}
	var perr *replyError
	if errors.As(err, &perr) {
		return callError
	}
	return callConn
}

// expiredReply is what scripts/guard.lua answers for a call that ran past
// its deadline, and errExpired the error the store makes of it.
const expiredReply = "sluice:expired"

var errExpired = errors.New("it reached Redis after its deadline and was not run: nothing charged")

// callError is the error of a script call described by what that failed
// with err, which the breaker classified as o: it wraps ErrClosed when the
// store was closed, and sluice.ErrStoreTimeout when the call was sent and
// got no reply in time (it may still have run) or reached Redis too late
// to run.
func (s *Store) callError(what string, err error, o callOutcome, closed bool) error {
	switch {
	case closed:
		return fmt.Errorf("%s: %w", what, errors.Join(ErrClosed, err))
	case errors.Is(err, errExpired):
		return fmt.Errorf("%s: %v: %w", what, err, sluice.ErrStoreTimeout)
	case o == callTimeout:
		return fmt.Errorf("%s: no reply within %v (%v); it may still have run: %w", what, s.timeout, err, sluice.ErrStoreTimeout)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// replyError is a reply the store could not read (a defect, not a sign of
// a dead node; it counts in the failure ratio).
type replyError struct{ err error }

func (e *replyError) Error() string { return e.err.Error() }
func (e *replyError) Unwrap() error { return e.err }

// Errors handed to gobreaker's done func, so that IsSuccessful and
// IsExcluded tell the outcomes apart.
var (
	errCallFailed  = errors.New("redis: call failed")
	errCallIgnored = errors.New("redis: call ignored")
)

// node is one target of script calls and its breaker. Its methods are safe
// for concurrent use.
type node struct {
	addr      atomic.Pointer[string] // host:port; Sentinel may move it
	cb        *gobreaker.TwoStepCircuitBreaker[struct{}]
	connFails atomic.Int64 // connection-level failures since the last success
	timeouts  atomic.Int64 // timeouts since the last success
	lastErr   atomic.Pointer[string]
	opened    atomic.Int64 // times the breaker opened
	// openUntil is when an open breaker lets probes through (unix ns), 0
	// when it is not open: read on every Take, without gobreaker's lock.
	openUntil atomic.Int64
	clock     clockEstimate
}

// clockEstimate is the offset of a node's TIME from the local clock, from
// the "now" its script calls report, so that the store can give each call a
// deadline in the node's own time (scripts/guard.lua). It is safe for
// concurrent use.
type clockEstimate struct {
	mu     sync.Mutex
	ok     bool
	offset int64 // node TIME − local time, µs
	errUs  int64 // bound on the error of offset when taken, µs
	at     time.Time
}

// sample records that a call sent at start and answered after d read
// redisNow (µs): the read happened within [start, start+d], so the offset
// is known to within d/2. A sample replaces the estimate when it is at
// least as tight as the old one, aged by 100 µs per second (clock drift),
// or when the two cannot both be right (their error intervals do not
// overlap: a clock stepped, or the node changed): a tight estimate proven
// wrong must not outlive the proof.
func (c *clockEstimate) sample(redisNow int64, start time.Time, d time.Duration) {
	errUs := d.Microseconds()/2 + 1
	mid := start.Add(d / 2).UnixMicro()
	offset := redisNow - mid
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok {
		aged := c.errUs + time.Since(c.at).Milliseconds()/10
		apart := offset - c.offset
		if apart < 0 {
			apart = -apart
		}
		if errUs > aged && apart <= aged+errUs {
			return
		}
	}
	c.ok, c.offset, c.errUs, c.at = true, offset, errUs, time.Now()
}

// deadline returns the latest node TIME (µs) at which a call sent at start
// may still run and have its reply back by start+timeout, or false when no
// estimate is known yet. It leaves a tenth of the timeout, plus the
// estimate's error, for the reply's way back.
func (c *clockEstimate) deadline(start time.Time, timeout time.Duration) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		return 0, false
	}
	aged := c.errUs + time.Since(c.at).Milliseconds()/10
	return start.Add(timeout-timeout/10).UnixMicro() + c.offset - aged, true
}

// now returns the node's TIME as estimated now (µs), or false when no
// estimate is known yet.
func (c *clockEstimate) now() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.ok {
		return 0, false
	}
	return time.Now().UnixMicro() + c.offset, true
}

// newNode returns a node named addr with a closed breaker.
func newNode(addr string, o BreakerOptions) *node {
	n := &node{}
	n.addr.Store(&addr)
	consecutive, slow := int64(o.ConsecutiveFailures), int64(o.ConsecutiveTimeouts)
	minCalls, ratio := uint32(o.MinCalls), o.FailureRatio
	n.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         addr,
		MaxRequests:  uint32(o.HalfOpenProbes),
		Interval:     o.Window,
		BucketPeriod: o.Window / 10,
		Timeout:      o.OpenTimeout,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if n.connFails.Load() >= consecutive || n.timeouts.Load() >= slow {
				return true
			}
			completed := c.TotalSuccesses + c.TotalFailures
			return completed >= minCalls && float64(c.TotalFailures) >= ratio*float64(completed)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errCallIgnored) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				n.opened.Add(1)
				n.openUntil.Store(time.Now().Add(o.OpenTimeout).UnixNano())
			} else {
				n.openUntil.Store(0)
			}
		},
	})
	return n
}

// name returns the node's host:port.
func (n *node) name() string { return *n.addr.Load() }

// open reports whether the breaker fails calls now (open, not yet due for
// probes). A half-open breaker is not open: calls reach allow, which lets
// the probes through.
func (n *node) open() bool {
	u := n.openUntil.Load()
	return u != 0 && time.Now().UnixNano() < u
}

// allow asks the breaker for one call. It returns the func to report the
// call's outcome, or an error wrapping sluice.ErrStoreUnavailable.
func (n *node) allow() (func(callOutcome, error), error) {
	done, err := n.cb.Allow()
	if err != nil {
		return nil, n.unavailable()
	}
	return func(o callOutcome, err error) {
		switch o {
		case callOK:
			n.connFails.Store(0)
			n.timeouts.Store(0)
			done(nil)
			return
		case callIgnored:
			done(errCallIgnored)
			return
		case callConn:
			n.connFails.Add(1) // before done: ReadyToTrip reads it
		case callTimeout:
			n.timeouts.Add(1)
		}
		msg := err.Error()
		n.lastErr.Store(&msg)
		done(errCallFailed)
	}, nil
}

// unavailable returns the error of a call the breaker refused.
func (n *node) unavailable() error {
	last := ""
	if p := n.lastErr.Load(); p != nil {
		last = " (last error: " + *p + ")"
	}
	return fmt.Errorf("redis: node %s: circuit breaker open%s: %w", n.name(), last, sluice.ErrStoreUnavailable)
}

// health reports the node for stack.HealthReporter.
func (n *node) health() stack.NodeHealth {
	h := stack.NodeHealth{Node: n.name(), State: n.cb.State().String()}
	if h.State != "closed" {
		if p := n.lastErr.Load(); p != nil {
			h.LastError = *p
		}
	}
	return h
}
