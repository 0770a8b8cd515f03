package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/rules/xds"
)

// TestServeRulesXds: `sluice serve --rules-xds ADDR --rules-xds-node ID`
// takes its rules from go-control-plane's own management server (the rule
// directory is not read: it does not exist), is not ready before they
// arrive, enforces them over Envoy RLS, and applies a new version. A bad
// version is NACKed, and its repeats (go-control-plane's cache answers every
// NACK with it at once) only after the NACK backoff, whose defaults serve
// wires in: a handful of requests over the 2s after the first NACK, where
// without the backoff there were thousands; the good version that follows
// is applied once the wait ends.
func TestServeRulesXds(t *testing.T) {
	t.Parallel() // its own xDS server and sluice server; it mostly waits on the xDS stream
	snaps := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	var nacks atomic.Int64
	cb := xdsserver.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
		if req.GetErrorDetail() != nil {
			nacks.Add(1)
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xdsserver.NewServer(ctx, snaps, cb))
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()

	ts := startServer(t, "/nonexistent/rules", func(c *serveConfig) {
		c.Rules.XDS, c.Rules.XDSNode = ln.Addr().String(), "edge-1"
	})
	if code, _ := get(t, ts.base+"/readyz"); code == http.StatusOK {
		t.Errorf("/readyz before any rules = %d, want not 200", code)
	}
	set := func(version string, n uint32) {
		t.Helper()
		unit := rlconf.RateLimitUnit_HOUR
		if n == 0 {
			unit = rlconf.RateLimitUnit_UNKNOWN // rejected: unknown unit
		}
		cfg := &rlconf.RateLimitConfig{Name: "edge", Domain: "edge", Descriptors: []*rlconf.RateLimitDescriptor{{
			Key: "k", RateLimit: &rlconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n},
		}}}
		snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: {cfg}})
		if err != nil {
			t.Fatal(err)
		}
		if err := snaps.SetSnapshot(context.Background(), "edge-1", snap); err != nil {
			t.Fatal(err)
		}
	}
	client := ts.server.watcher.(*xds.Client)
	allowed := func() int {
		n := 0
		for range 10 {
			resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("k", "v")}})
			if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
				n++
			}
		}
		return n
	}

	set("1", 3)
	eventually(t, "version 1 applied", func() bool { return client.Version() == "1" })
	eventually(t, "/readyz 200", func() bool { code, _ := get(t, ts.base+"/readyz"); return code == http.StatusOK })
	if got := allowed(); got != 3 {
		t.Errorf("version 1: allowed %d of 10, want 3", got)
	}
	set("2", 6)
	eventually(t, "version 2 applied", func() bool { return client.Version() == "2" })
	ts.clock.Advance(2 * time.Hour) // a fresh window
	if got := allowed(); got != 6 {
		t.Errorf("version 2: allowed %d of 10, want 6", got)
	}

	// The first NACK goes out at once; the repeats wait 1s, 2s, 4s… each
	// jittered down to no less than half, so at most 1+2 more NACKs fit in
	// the next 2s (5 allows for a slow poll).
	set("3", 0)
	eventually(t, "version 3 NACKed", func() bool { return nacks.Load() > 0 })
	time.Sleep(2 * time.Second)
	if n := nacks.Load(); n > 5 {
		t.Errorf("NACKs within 2s of the first = %d, want at most 5 (backoff 1s doubling)", n)
	}
	if err := client.LastError(); err == nil || !strings.Contains(err.Error(), `version "3"`) {
		t.Errorf("LastError = %v, want version 3's problem", err)
	}
	if got := client.Version(); got != "2" {
		t.Errorf("version after the NACK = %q, want 2 still in force", got)
	}
	set("4", 4)
	eventually(t, "version 4 applied after the wait", func() bool { return client.Version() == "4" })
	if err := client.LastError(); err != nil {
		t.Errorf("LastError after version 4 = %v, want nil", err)
	}
	ts.clock.Advance(2 * time.Hour)
	if got := allowed(); got != 4 {
		t.Errorf("version 4: allowed %d of 10, want 4", got)
	}
}

// TestRulesXdsFlags: --rules-xds needs --rules-xds-node, and with it the
// rule directory is not checked.
func TestRulesXdsFlags(t *testing.T) {
	for _, tc := range []struct {
		name, xds, node, dir, want string
	}{
		{"no node", "127.0.0.1:18000", "", "/nonexistent", "--rules-xds-node: empty"},
		{"directory not read", "127.0.0.1:18000", "edge-1", "/nonexistent", ""},
		{"directory without xds", "", "", "/nonexistent", "--rules:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultServeConfig()
			cfg.Rules.Dir, cfg.Rules.XDS, cfg.Rules.XDSNode = tc.dir, tc.xds, tc.node
			err := cfg.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
