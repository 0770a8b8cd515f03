// Package rls serves Envoy's rate limit service, v3
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit), over gRPC,
// as a drop-in for envoyproxy/ratelimit: it converts the protobuf request into
// a service.Request, asks the engine, and renders the answer the way
// envoyproxy/ratelimit does. It also registers gRPC health and reflection.
// Policy lives in package service; this package only translates.
package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/internal/rlsproto"
	"github.com/sluice-rl/sluice/service"
)

// Checker decides rate-limit requests. *service.Engine implements it.
type Checker interface {
	Check(ctx context.Context, req service.Request) (service.Response, error)
}

// Options configure a Server. The zero value is valid: no extra response
// headers, logs discarded.
type Options struct {
	// Logger receives errors the engine returns (not bad requests, which are
	// the client's). Nil discards them.
	Logger *slog.Logger
	// ResponseHeaders adds RateLimit, RateLimit-Policy and Retry-After to
	// response_headers_to_add, as edge.Decision renders them.
	ResponseHeaders bool
	// RequestBounds bound the size of requests (see service.RequestBounds); a request
	// over one is refused with codes.InvalidArgument naming the limit,
	// before it is converted. The zero value is the defaults.
	RequestBounds service.RequestBounds
	// LimitHeaders, when set, adds envoyproxy/ratelimit's response headers
	// (LIMIT_RESPONSE_HEADERS_ENABLED) to response_headers_to_add, beside
	// or instead of ResponseHeaders: the limit, remaining count and seconds
	// to reset of the descriptor closest to its limit (an over-limit one
	// that denies the request first), under the names it gives.
	LimitHeaders *LimitHeaderNames
	// DynamicMetadata fills the response's dynamic_metadata as
	// envoyproxy/ratelimit does with RESPONSE_DYNAMIC_METADATA: the
	// domain, the request's descriptors, its hits_addend and the merged
	// metadata of the rules of the descriptors that were not over. An
	// answer that chose an alternative (service.Response.Choice) carries
	// it under rlsproto.ChoiceKey ("sluice.choice") whether or not this is
	// set: it is what the caller routes on.
	DynamicMetadata bool
}

// LimitHeaderNames name envoyproxy/ratelimit's three response headers.
// DefaultLimitHeaderNames returns its defaults; an empty name is an error
// (Validate).
type LimitHeaderNames struct {
	Limit, Remaining, Reset string
}

// DefaultLimitHeaderNames returns envoyproxy/ratelimit's default names:
// RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset.
func DefaultLimitHeaderNames() LimitHeaderNames {
	return LimitHeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
}

// Validate reports a name that is empty or not an HTTP token.
func (n LimitHeaderNames) Validate() error {
	for _, f := range []struct{ field, v string }{{"limit", n.Limit}, {"remaining", n.Remaining}, {"reset", n.Reset}} {
		if f.v == "" {
			return fmt.Errorf("rls: %s header name: empty", f.field)
		}
		if len(f.v) > 256 {
			return fmt.Errorf("rls: %s header name: %d bytes, at most 256", f.field, len(f.v))
		}
		for _, c := range []byte(f.v) {
			if !tokenByte(c) {
				return fmt.Errorf("rls: %s header name %q: byte %q is not allowed in a header name", f.field, f.v, c)
			}
		}
	}
	return nil
}

// tokenByte reports whether c may appear in an HTTP field name (RFC 9110
// token).
func tokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// ServiceName is the gRPC service name Register serves and marks in health.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Server implements envoy's RateLimitServiceServer over a Checker. It is
// safe for concurrent use; create one with New.
type Server struct {
	rlsv3.UnimplementedRateLimitServiceServer
	checker Checker
	opts    Options
	log     *slog.Logger
	health  *health.Server
}

// New returns a Server that asks c.
func New(c Checker, opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{checker: c, opts: opts, log: log, health: health.NewServer()}
}

// Register registers the rate limit service, gRPC health (reporting SERVING
// for "" and ServiceName) and reflection on g. g should be built with
// ServerOptions.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(&serviceDesc, s)
	healthpb.RegisterHealthServer(g, s.health)
	reflection.Register(g)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
}

// SetServing sets what gRPC health answers for "" and ServiceName: SERVING
// when on, NOT_SERVING otherwise (an instance that cannot answer correctly
// yet, so that a load balancer checking gRPC health sends it nothing). It
// is safe for concurrent use; after Shutdown it changes nothing.
func (s *Server) SetServing(on bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if on {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(ServiceName, st)
}

// Shutdown marks every service NOT_SERVING in gRPC health, so that load
// balancers stop sending new work while in-flight calls drain.
func (s *Server) Shutdown() { s.health.Shutdown() }

// ShouldRateLimit answers one RateLimitRequest. A malformed request (empty
// domain, no descriptors) or one over Options.RequestBounds is
// codes.InvalidArgument (envoyproxy/ratelimit answers the first two with
// codes.Unknown; Envoy treats every error alike); a descriptor without
// entries or with an empty key is answered OK, the others decided; an engine error is codes.Internal (Envoy then
// applies its own failure_mode_deny), a cancelled call codes.Canceled or
// codes.DeadlineExceeded.
func (s *Server) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := s.check(ctx, req)
	if err != nil {
		return nil, err
	}
	out := response(resp, s.opts.ResponseHeaders)
	if s.opts.LimitHeaders != nil {
		addLimitHeaders(out, *s.opts.LimitHeaders)
	}
	if s.opts.DynamicMetadata {
		md := dynamicMetadata(req, &resp)
		if resp.Choice != nil {
			md.Fields[rlsproto.ChoiceKey] = rlsproto.ChoiceValue(resp.Choice)
		}
		out.DynamicMetadata = md
	}
	return out, nil
}

// check converts req and asks the checker: ShouldRateLimit before the
// response is rendered. Its error is the call's status.
func (s *Server) check(ctx context.Context, req *rlsv3.RateLimitRequest) (service.Response, error) {
	sreq, err := FromProtoLimits(req, s.opts.RequestBounds)
	if err != nil {
		return service.Response{}, status.Error(codes.InvalidArgument, err.Error())
	}
	resp, err := s.checker.Check(ctx, sreq)
	if err != nil {
		return service.Response{}, s.grpcError(ctx, err)
	}
	return resp, nil
}

// plainResponse reports whether a response is the engine's answer alone:
// no response headers or dynamic metadata to add.
func (s *Server) plainResponse() bool {
	return !s.opts.ResponseHeaders && s.opts.LimitHeaders == nil && !s.opts.DynamicMetadata
}

func (s *Server) grpcError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, ErrInvalidRequest) || errors.Is(err, service.ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	s.log.ErrorContext(ctx, "check failed", "err", err)
	return status.Error(codes.Internal, err.Error())
}

// StreamWorkers is the number of goroutines ServerOptions keeps to run
// calls on (grpc.NumStreamWorkers). A call that finds none idle runs on a
// goroutine of its own, as without workers, so it is not a limit: it is
// how many calls at once run on a goroutine whose stack has already grown,
// instead of growing (copying) a fresh one per call.
const StreamWorkers = 64

// ServerOptions are the transport options Sluice's gRPC server runs with,
// each chosen by counting the server's instructions per request
// (scripts/instr.sh, BENCHMARKS.md): calls run on StreamWorkers
// long-lived goroutines, and the server's codec is grpc-go's
// proto codec, except that Register's ShouldRateLimit decodes its request
// and encodes its response by hand when they hold only what Envoy sends
// (every other service and message goes to the proto codec unchanged).
// They change nothing a client sees but one answer: a request whose
// domain, descriptor key or value is not UTF-8 is refused with
// InvalidArgument naming the field, as service.RequestBounds names it, where
// grpc-go's codec answers Internal. Register works on a server without
// them too, at the protobuf library's cost. A stats handler of the server
// sees a ShouldRateLimit request decoded by hand as an empty
// RateLimitRequest.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.NumStreamWorkers(StreamWorkers),
		grpc.ForceServerCodecV2(newCodec()),
	}
}
