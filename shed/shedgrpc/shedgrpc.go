// Package shedgrpc sheds load in a Go gRPC server: interceptors that ask a
// shed.Shedder about every call before its handler runs. It is apart from
// package shed so that shed stays free of gRPC.
package shedgrpc

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/sluice-rl/sluice/shed"
)

// DefaultMetadataKey is the metadata key the caller's priority class is read
// from when Options.MetadataKey is empty.
const DefaultMetadataKey = "sluice-priority"

// Trailer keys of a shed call.
const (
	// PushbackKey is gRPC's retry pushback (gRFC A6): milliseconds before a
	// retry; clients with a retry policy honour it.
	PushbackKey = "grpc-retry-pushback-ms"
	// LayerKey names the layer that shed the call.
	LayerKey = "sluice-shed-layer"
)

// Options configure the interceptors.
type Options struct {
	// MetadataKey is the incoming metadata key holding the class the caller
	// asks for; the Shedder's routes (matched against the full method name,
	// "/pkg.Service/Method") decide how high a caller may go. Default
	// DefaultMetadataKey.
	MetadataKey string
}

type interceptor struct {
	s   *shed.Shedder
	key string
}

func newInterceptor(s *shed.Shedder, o Options) interceptor {
	if o.MetadataKey == "" {
		o.MetadataKey = DefaultMetadataKey
	}
	return interceptor{s: s, key: o.MetadataKey}
}

// admit classifies and admits a call, or returns the Unavailable status of a
// shed call (with its trailer set).
func (i interceptor) admit(ctx context.Context, method string) (shed.Ticket, error) {
	claimed := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(i.key); len(v) > 0 {
			claimed = v[0]
		}
	}
	t, r := i.s.Admit(ctx, i.s.Classify(method, claimed))
	if r == nil {
		return t, nil
	}
	ms := max(r.RetryAfter, time.Second).Milliseconds()
	_ = grpc.SetTrailer(ctx, metadata.Pairs(PushbackKey, strconv.FormatInt(ms, 10), LayerKey, r.Layer.String()))
	return shed.Ticket{}, status.Errorf(codes.Unavailable, "shed by %s (priority %s): %s", r.Layer, r.Priority, r.Detail)
}

// outcome classifies a finished call for the adaptive limiter: Ignored
// when the client went away or something before the handler (a rate limit,
// ResourceExhausted) refused it; Dropped when the server failed it
// (Unavailable, Internal, DataLoss, DeadlineExceeded) or it ran past the
// client's deadline; Succeeded otherwise, client errors included (the
// server did the work). Unknown, what a handler returning a plain Go error
// gets, counts as Succeeded: it is as often a client's mistake as a fault.
func outcome(ctx context.Context, err error) shed.Outcome {
	var failed bool
	switch status.Code(err) {
	case codes.Unavailable, codes.Internal, codes.DataLoss, codes.DeadlineExceeded:
		failed = true
	}
	return shed.OutcomeOf(ctx.Err(), failed, status.Code(err) == codes.ResourceExhausted)
}

// UnaryServerInterceptor sheds unary calls: a shed call fails with
// codes.Unavailable, a message naming the layer and the class, and the
// trailers grpc-retry-pushback-ms and sluice-shed-layer; its handler never
// runs. Install it before any rate-limiting interceptor, so a shed call
// charges no rate limit.
func UnaryServerInterceptor(s *shed.Shedder, o Options) grpc.UnaryServerInterceptor {
	in := newInterceptor(s, o)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		t, err := in.admit(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		var resp any
		defer func() { t.Done(context.WithoutCancel(ctx), outcome(ctx, err)) }()
		resp, err = handler(ctx, req)
		return resp, err
	}
}

// StreamServerInterceptor sheds streams as UnaryServerInterceptor sheds
// calls; an admitted stream holds its place until the handler returns.
func StreamServerInterceptor(s *shed.Shedder, o Options) grpc.StreamServerInterceptor {
	in := newInterceptor(s, o)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		ctx := ss.Context()
		t, err := in.admit(ctx, info.FullMethod)
		if err != nil {
			return err
		}
		// A stream's length says nothing about queueing: no latency sample.
		defer t.Done(context.WithoutCancel(ctx), shed.Ignored)
		return handler(srv, ss)
	}
}
