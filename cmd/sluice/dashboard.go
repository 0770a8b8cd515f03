package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/server/dashboard"
	"github.com/sluice-rl/sluice/store/redis"
)

// withDashboard mounts /dashboard, /admin/v1/stats and /admin/v1/top beside
// h when the admin API is on (any admin token, read-only is enough). On
// Redis the figures are the fleet's: every instance publishes its snapshot
// to the shared Redis every two seconds.
func (s *server) withDashboard(h http.Handler, toks *admin.Tokens, reg prometheus.Gatherer, log *slog.Logger) (http.Handler, error) {
	if s.tracker == nil || toks.Len() == 0 {
		return h, nil
	}
	host, _ := os.Hostname()
	d, err := dashboard.New(dashboard.Options{
		Tracker:  s.tracker,
		Gatherer: reg,
		Health:   s.engine.Health,
		Reload: func() dashboard.ReloadStatus {
			st := dashboard.ReloadStatus{LastReload: s.watcher.LastReload(), OK: true}
			if err := s.watcher.LastError(); err != nil {
				st.OK, st.LastError = false, err.Error()
			}
			return st
		},
		Auth:     toks.Read(),
		Fleet:    s.fleet,
		Instance: fmt.Sprintf("%s/%d/%08x", host, os.Getpid(), rand.Uint32()), // unique per server, also in one process
		Logger:   log,
	})
	if err != nil {
		return nil, fmt.Errorf("serve: dashboard: %w", err)
	}
	s.dash = d
	mux := http.NewServeMux()
	for _, p := range d.Routes() {
		mux.Handle(p, d)
	}
	mux.Handle("/", h)
	return mux, nil
}

// errRedisNotConnected is what the dashboard's fleet answers until the
// Redis store is connected.
var errRedisNotConnected = fmt.Errorf("redis store not connected yet: %w", sluice.ErrStoreUnavailable)

// redisFleet is the dashboard's Fleet over the Redis store, which may still
// be connecting (get returns nil until then).
type redisFleet struct{ get func() *redis.Store }

func (f redisFleet) Publish(ctx context.Context, instance string, blob []byte) error {
	st := f.get()
	if st == nil {
		return errRedisNotConnected
	}
	return st.Publish(ctx, instance, blob)
}

func (f redisFleet) Collect(ctx context.Context) (map[string][]byte, error) {
	st := f.get()
	if st == nil {
		return nil, errRedisNotConnected
	}
	return st.Collect(ctx)
}
