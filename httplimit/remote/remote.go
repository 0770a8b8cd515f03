// Package remote is an httplimit.Checker that asks a remote Sluice (or any
// server speaking Envoy's rate limit service v3, such as envoyproxy/ratelimit)
// over gRPC, so a fleet of HTTP servers can share one rate-limit service.
//
// The wire carries less than the in-process engine knows: each status has
// the limit's requests_per_unit, unit and name, the remaining count and the
// time until reset, but no algorithm, burst or exact retry time. The
// middleware's fields are built from those: q is requests_per_unit (or the
// remaining count, when a burst makes that larger), w the unit's length, and
// a refused request's wait is duration_until_reset.
//
// The Checker is not an httplimit.Releaser: Envoy's protocol has no way to
// give a concurrency lease back, so a server-side concurrency rule's leases
// are freed only when their window passes. Apply concurrency limits with
// httplimit.Config.Concurrency instead.
package remote

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// Options configure a Checker. The zero value is usable.
type Options struct {
	// Timeout bounds each call; zero means DefaultTimeout. A check that
	// times out is an error, which the middleware's FailClosed decides.
	Timeout time.Duration
}

// DefaultTimeout is Options.Timeout's default: a rate limit decision that
// takes longer than this costs more than it protects.
const DefaultTimeout = 100 * time.Millisecond

// Checker asks a rate limit service over gRPC. It is safe for concurrent use.
type Checker struct {
	client  rlsv3.RateLimitServiceClient
	timeout time.Duration
}

// New returns a Checker that calls the service on conn (a *grpc.ClientConn
// the caller dials and closes).
func New(conn grpc.ClientConnInterface, opts Options) *Checker {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Checker{client: rlsv3.NewRateLimitServiceClient(conn), timeout: opts.Timeout}
}

// ErrInvalidRequest: the request cannot be put on the wire.
var ErrInvalidRequest = errors.New("remote: invalid request")

// Check implements httplimit.Checker.
func (c *Checker) Check(ctx context.Context, req service.Request) (service.Response, error) {
	in, err := Request(req)
	if err != nil {
		return service.Response{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	out, err := c.client.ShouldRateLimit(ctx, in)
	if err != nil {
		return service.Response{}, fmt.Errorf("remote: ShouldRateLimit: %w", err)
	}
	return Response(out, len(req.Descriptors))
}

// Request converts a service.Request to Envoy's RateLimitRequest.
func Request(req service.Request) (*rlsv3.RateLimitRequest, error) {
	if req.Hits > math.MaxUint32 {
		return nil, fmt.Errorf("%w: hits %d do not fit the wire's uint32", ErrInvalidRequest, req.Hits)
	}
	out := &rlsv3.RateLimitRequest{Domain: req.Domain, HitsAddend: uint32(req.Hits),
		Descriptors: make([]*ratelimitv3.RateLimitDescriptor, len(req.Descriptors))}
	for i, d := range req.Descriptors {
		pd := &ratelimitv3.RateLimitDescriptor{Entries: make([]*ratelimitv3.RateLimitDescriptor_Entry, len(d.Entries))}
		for j, e := range d.Entries {
			pd.Entries[j] = &ratelimitv3.RateLimitDescriptor_Entry{Key: e.Key, Value: e.Value}
		}
		if d.Limit != nil {
			u, ok := typev3.RateLimitUnit_value[strings.ToUpper(d.Limit.Unit)]
			if !ok || u == 0 {
				return nil, fmt.Errorf("%w: descriptor %d: unknown unit %q", ErrInvalidRequest, i, d.Limit.Unit)
			}
			pd.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: d.Limit.RequestsPerUnit, Unit: typev3.RateLimitUnit(u)}
		}
		if d.Hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*d.Hits)
		}
		out.Descriptors[i] = pd
	}
	return out, nil
}

// Response converts Envoy's RateLimitResponse to a service.Response; n is the
// number of descriptors asked about, which the statuses must match.
func Response(in *rlsv3.RateLimitResponse, n int) (service.Response, error) {
	if len(in.GetStatuses()) != n {
		return service.Response{}, fmt.Errorf("remote: %d statuses for %d descriptors", len(in.GetStatuses()), n)
	}
	out := service.Response{OverallCode: service.CodeOK, Statuses: make([]service.Status, n)}
	if in.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
		out.OverallCode = service.CodeOverLimit
	}
	for i, s := range in.GetStatuses() {
		st := &out.Statuses[i]
		st.Code = service.CodeOK
		over := s.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT
		if over {
			st.Code = service.CodeOverLimit
		}
		cl := s.GetCurrentLimit()
		if cl == nil {
			st.Unlimited = !over && s.GetLimitRemaining() == math.MaxUint32
			continue
		}
		unit := strings.ToLower(cl.GetUnit().String())
		window, ok := rules.UnitWindow(unit)
		if !ok {
			unit, window = "", 0
		}
		if m := cl.GetUnitMultiplier(); m != nil && m.GetValue() > 1 && window > 0 {
			window *= time.Duration(m.GetValue())
		}
		st.CurrentLimit = &service.CurrentLimit{Name: cl.GetName(), RequestsPerUnit: cl.GetRequestsPerUnit(), Unit: unit, Window: window}
		reset := s.GetDurationUntilReset().AsDuration()
		if reset < 0 {
			reset = 0
		}
		st.Result = sluice.Result{
			Allowed: !over,
			// A bucket with a burst above its rate reports more remaining
			// than requests_per_unit; q must not be below r.
			Limit:      max(int64(cl.GetRequestsPerUnit()), int64(s.GetLimitRemaining())),
			Remaining:  int64(s.GetLimitRemaining()),
			ResetAfter: reset,
		}
		if over {
			st.Result.Reason = sluice.ReasonLimited
			st.Result.RetryAfter = reset
			if cl.GetRequestsPerUnit() == 0 {
				st.Result.Reason = sluice.ReasonCostTooHigh
				st.Result.RetryAfter = 0
			}
		}
	}
	return out, nil
}
