package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluice-rl/sluice/httplimit/gateway"
	"github.com/sluice-rl/sluice/shed"
	"github.com/sluice-rl/sluice/shed/shedprom"
)

// startShed starts what the gateway's load shedder needs beside the
// requests: the scheduler-latency sampler of the worker layer when it
// watches queueing delay, and the metrics listener (which also serves
// readyz at /readyz when it is not nil). stop ends them.
func startShed(ctx context.Context, cfg gateway.Config, s *shed.Shedder, log *slog.Logger, readyz http.Handler) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var stops []func()
	stop = func() {
		cancel()
		for _, f := range stops {
			f()
		}
	}
	if s != nil && cfg.Shed.Worker != nil && cfg.Shed.Worker.MaxQueueDelay > 0 {
		// The proxy has no work queue of its own: the queue in front of
		// its CPUs is the Go scheduler's.
		go shed.SchedLatency(ctx, s.Worker(), 100*time.Millisecond, 0.99)
	}
	if cfg.MetricsAddr != "" {
		reg := prometheus.NewRegistry()
		if s != nil {
			reg.MustRegister(shedprom.New(s))
		}
		ln, err := net.Listen("tcp", cfg.MetricsAddr)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("metrics: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		if readyz != nil {
			mux.Handle("GET /readyz", readyz) // with --rls: whether the service answers, and the failure mode
		}
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("metrics listener stopped", "err", err)
			}
		}()
		log.Info("metrics listening", "addr", ln.Addr().String())
		stops = append(stops, func() { _ = srv.Close() })
	}
	return stop, nil
}
