// Package remote is an httplimit.Checker that asks a remote Sluice (or any
// server speaking Envoy's rate limit service v3, such as envoyproxy/ratelimit)
// over gRPC, so a fleet of HTTP servers can share one rate-limit service.
//
// The wire carries less than the in-process engine knows (see
// rlsproto.Response): no algorithm, burst or exact retry time. The
// middleware's fields are built from what it does carry: q is
// requests_per_unit (or the remaining count, when a burst makes that
// larger), w the unit's length, and a refused request's wait is
// duration_until_reset (which a Sluice server sets, for a refused status,
// to when the request would pass: the in-process Retry-After).
//
// The Checker is not an httplimit.Releaser: Envoy's protocol has no way to
// give a concurrency lease back, so a server-side concurrency rule's leases
// are freed only when their window passes. Apply concurrency limits with
// httplimit.Config.Concurrency instead.
package remote

import (
	"context"
	"fmt"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/rlsproto"
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
var ErrInvalidRequest = rlsproto.ErrInvalidRequest

// utf8Only are limits that check nothing but UTF-8: the sizes are the
// server's to check.
var utf8Only = service.RequestBounds{MaxKeyBytes: -1, MaxValueBytes: -1, MaxDescriptors: -1, MaxEntries: -1}

// Check implements httplimit.Checker. A request the server refuses as
// invalid (codes.InvalidArgument: a key or value over its limits, say),
// and one whose domain, key or value is not UTF-8 (which protobuf cannot
// carry: refused before it is sent, naming the field), return an error
// wrapping service.ErrInvalidRequest, which the middleware answers 400
// whether it fails closed or not, as it answers the in-process engine's:
// otherwise such a key would skip every limit.
func (c *Checker) Check(ctx context.Context, req service.Request) (service.Response, error) {
	if err := utf8Only.Check(&req); err != nil {
		return service.Response{}, fmt.Errorf("remote: %w", err)
	}
	in, err := rlsproto.Request(req)
	if err != nil {
		return service.Response{}, fmt.Errorf("remote: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	out, err := c.client.ShouldRateLimit(ctx, in)
	if status.Code(err) == codes.InvalidArgument {
		return service.Response{}, fmt.Errorf("remote: ShouldRateLimit: %w: %s", service.ErrInvalidRequest, status.Convert(err).Message())
	}
	if err != nil {
		return service.Response{}, fmt.Errorf("remote: ShouldRateLimit: %w", err)
	}
	resp, err := rlsproto.Response(out, len(req.Descriptors))
	if err != nil {
		return service.Response{}, fmt.Errorf("remote: %w", err)
	}
	return resp, nil
}
