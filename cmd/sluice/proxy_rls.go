package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// rlsState follows whether `sluice proxy --rls` can reach its rate limit
// service, so that an operator learns it once at start and once per change,
// not from one warning per request, and a readiness probe can tell.
//
// What the proxy does while the service is unreachable is its failure mode:
// open lets requests through unlimited, closed answers 503.
type rlsState struct {
	addr       string
	failClosed bool
	log        *slog.Logger

	reachable atomic.Int32 // rlsUnknown, rlsUp, rlsDown
	since     atomic.Int64 // unix nanoseconds of the last change
}

const (
	rlsUnknown int32 = iota
	rlsUp
	rlsDown
)

func (s *rlsState) mode() string {
	if s.failClosed {
		return "closed"
	}
	return "open"
}

// probe asks the service's gRPC health once, within timeout, and logs the
// answer with the failure mode in force.
func (s *rlsState) probe(ctx context.Context, conn grpc.ClientConnInterface, timeout time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(pctx, &healthpb.HealthCheckRequest{})
	if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
		s.set(rlsUp)
		return
	}
	if err == nil {
		s.log.Warn("rate limit service answers but is not serving", "rls", s.addr, "status", resp.GetStatus().String(), "failure_mode", s.mode())
		s.set(rlsDown)
		return
	}
	s.set(rlsDown)
}

// set records a state and logs it when it changed.
func (s *rlsState) set(v int32) {
	if s.reachable.Swap(v) == v {
		return
	}
	s.since.Store(time.Now().UnixNano())
	if v == rlsUp {
		s.log.Info("rate limit service reachable", "rls", s.addr, "failure_mode", s.mode())
		return
	}
	what := "requests are let through unlimited"
	if s.failClosed {
		what = "requests are answered 503"
	}
	s.log.Warn("rate limit service unreachable: "+what+" until it answers", "rls", s.addr, "failure_mode", s.mode())
}

// watch follows the connection's state until ctx ends: READY is reachable,
// TRANSIENT_FAILURE unreachable; the states between change nothing.
func (s *rlsState) watch(ctx context.Context, conn *grpc.ClientConn) {
	conn.Connect()
	for {
		st := conn.GetState()
		switch st {
		case connectivity.Ready:
			s.set(rlsUp)
		case connectivity.TransientFailure:
			s.set(rlsDown)
		case connectivity.Idle:
			conn.Connect() // keep trying, so a change is seen without traffic
		}
		if !conn.WaitForStateChange(ctx, st) {
			return
		}
	}
}

// ServeHTTP is the proxy's /readyz: 200 while the service answers, or while
// it does not and the failure mode lets requests through; 503 while it does
// not and every request is refused. The body says which.
func (s *rlsState) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	state := map[int32]string{rlsUnknown: "unknown", rlsUp: "reachable", rlsDown: "unreachable"}[s.reachable.Load()]
	body := map[string]any{"rls": state, "failure_mode": s.mode()}
	if ns := s.since.Load(); ns != 0 {
		body["since"] = time.Unix(0, ns).UTC().Format(time.RFC3339)
	}
	w.Header().Set("Content-Type", "application/json")
	if state == "unreachable" && s.failClosed {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(body)
}

// sampledWarn logs at most one line per period, with how many it held back,
// so a failing dependency costs the log one line per period, not one per
// request.
type sampledWarn struct {
	log    *slog.Logger
	period time.Duration
	now    func() time.Time // nil: time.Now

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (w *sampledWarn) warn(msg string, args ...any) {
	w.mu.Lock()
	now := time.Now()
	if w.now != nil {
		now = w.now()
	}
	if !w.last.IsZero() && now.Sub(w.last) < w.period {
		w.suppressed++
		w.mu.Unlock()
		return
	}
	n := w.suppressed
	w.last, w.suppressed = now, 0
	w.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed_since_last", n)
	}
	w.log.Warn(msg, args...)
}
