package xds

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	xdsserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/storetest"
)

const node = "sluice-test"

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mgmt is go-control-plane's own management server on a loopback port,
// recording the error_detail of every NACK it receives.
type mgmt struct {
	addr  string
	cache cache.SnapshotCache
	srv   *grpc.Server

	mu    sync.Mutex
	nacks []string
	acks  []string // version_info of the ACKs
	reqs  []seenRequest
}

// seenRequest is what the server was sent in one DiscoveryRequest.
type seenRequest struct {
	version, nack string // version_info; error_detail's message ("" for none)
}

func startMgmt(t *testing.T, addr string) *mgmt {
	t.Helper()
	m := &mgmt{cache: cache.NewSnapshotCache(false, cache.IDHash{}, nil)}
	cb := xdsserver.CallbackFuncs{StreamRequestFunc: func(_ int64, req *discovery.DiscoveryRequest) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.reqs = append(m.reqs, seenRequest{req.GetVersionInfo(), req.GetErrorDetail().GetMessage()})
		switch {
		case req.GetErrorDetail() != nil:
			m.nacks = append(m.nacks, req.GetErrorDetail().GetMessage())
		case req.GetResponseNonce() != "":
			m.acks = append(m.acks, req.GetVersionInfo())
		}
		return nil
	}}
	ctx, cancel := context.WithCancel(context.Background())
	x := xdsserver.NewServer(ctx, m.cache, cb)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		cancel()
		t.Fatalf("listen %s: %v", addr, err)
	}
	m.addr = ln.Addr().String()
	m.srv = grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(m.srv, x)
	go func() { _ = m.srv.Serve(ln) }()
	t.Cleanup(func() { m.srv.Stop(); cancel() })
	return m
}

func (m *mgmt) set(t *testing.T, version string, cfgs ...*rlconf.RateLimitConfig) {
	t.Helper()
	rs := make([]types.Resource, len(cfgs))
	for i, c := range cfgs {
		rs[i] = c
	}
	snap, err := cache.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		t.Fatal(err)
	}
}

func (m *mgmt) seen() (acks, nacks []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.acks...), append([]string(nil), m.nacks...)
}

// requests returns every request the server has received so far.
func (m *mgmt) requests() []seenRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]seenRequest(nil), m.reqs...)
}

// config is a RateLimitConfig limiting key "user" of domain to n per minute.
func config(name, domain string, n uint32) *rlconf.RateLimitConfig {
	return &rlconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlconf.RateLimitDescriptor{{
		Key:       "user",
		RateLimit: &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_MINUTE, RequestsPerUnit: n, Name: "per-user"},
	}}}
}

// admitted counts how many of tries checks of user in domain the engine
// admits.
func admitted(t *testing.T, e *service.Engine, domain, user string, tries int) int {
	t.Helper()
	n := 0
	for range tries {
		resp, err := e.Check(context.Background(), service.Request{Domain: domain,
			Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "user", Value: user}}}}})
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		if resp.OverallCode == service.CodeOK {
			n++
		}
	}
	return n
}

func TestClientAgainstGoControlPlane(t *testing.T) {
	m := startMgmt(t, "127.0.0.1:0")
	m.set(t, "v1", config("a", "alpha", 3), config("b", "beta", 5))

	c, err := New(m.addr, node, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.MinBackoff, c.MaxBackoff = 10*time.Millisecond, 100*time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil after cancel", err)
		}
	}()

	eventually(t, "v1 applied", func() bool { return c.Version() == "v1" })
	snap := c.Current()
	if got := strings.Join(snap.Domains(), ","); got != "alpha,beta" {
		t.Errorf("domains = %q, want alpha,beta", got)
	}
	clock := storetest.NewClock()
	ms := memory.New(memory.Options{Now: clock.Now})
	defer ms.Close()
	eng, err := service.New(service.DefaultConfig(), c, ms, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, eng, "alpha", "u1", 10); got != 3 {
		t.Errorf("alpha v1: admitted %d of 10, want 3", got)
	}
	if got := admitted(t, eng, "beta", "u1", 10); got != 5 {
		t.Errorf("beta v1: admitted %d of 10, want 5", got)
	}
	eventually(t, "v1 ACKed", func() bool { a, _ := m.seen(); return len(a) > 0 && a[len(a)-1] == "v1" })

	// A new version applies its limit.
	m.set(t, "v2", config("a", "alpha", 7), config("b", "beta", 5))
	eventually(t, "v2 applied", func() bool { return c.Version() == "v2" })
	clock.Advance(2 * time.Minute) // a fresh window: count the new limit alone
	if got := admitted(t, eng, "alpha", "u1", 20); got != 7 {
		t.Errorf("alpha v2: admitted %d of 20, want 7", got)
	}
	eventually(t, "v2 ACKed", func() bool { a, _ := m.seen(); return len(a) > 0 && a[len(a)-1] == "v2" })

	// An invalid set (an unknown unit; two configs of one domain) is NACKed
	// and the last good rules stay.
	bad := config("a", "alpha", 1)
	bad.Descriptors[0].RateLimit.Unit = rlconf.RateLimitUnit_UNKNOWN
	m.set(t, "v3", bad, config("b", "beta", 5), config("c", "beta", 2))
	eventually(t, "v3 NACKed", func() bool { _, n := m.seen(); return len(n) > 0 })
	_, nacks := m.seen()
	t.Logf("NACK error_detail: %s", nacks[0])
	for _, want := range []string{`version "v3"`, "xds:a:", "descriptors[0].rate_limit.unit", `unknown unit "unknown"`, "beta"} {
		if !strings.Contains(nacks[0], want) {
			t.Errorf("NACK error_detail = %q, want it to contain %q", nacks[0], want)
		}
	}
	if c.LastError() == nil {
		t.Error("LastError after a NACK = nil, want the reason")
	}
	if got := c.Version(); got != "v2" {
		t.Errorf("version after NACK = %q, want v2 (last good)", got)
	}
	if c.Current() == nil || c.Current().RuleByName("alpha", "per-user") == nil {
		t.Fatal("rules after NACK: alpha/per-user gone, want the last good rules")
	}
	clock.Advance(2 * time.Minute)
	if got := admitted(t, eng, "alpha", "u1", 20); got != 7 {
		t.Errorf("alpha after NACK: admitted %d of 20, want 7 (v2 still in force)", got)
	}

	// The server goes away: the rules stay; it comes back on the same
	// address with new rules, and the client reconnects and applies them.
	m.srv.Stop()
	clock.Advance(2 * time.Minute)
	if got := admitted(t, eng, "alpha", "u1", 20); got != 7 {
		t.Errorf("alpha while the server is down: admitted %d of 20, want 7", got)
	}
	m2 := startMgmt(t, m.addr)
	m2.set(t, "v4", config("a", "alpha", 2), config("b", "beta", 5))
	eventually(t, "v4 applied after reconnect", func() bool { return c.Version() == "v4" })
	if c.LastError() != nil {
		t.Errorf("LastError after v4 = %v, want nil", c.LastError())
	}
	clock.Advance(2 * time.Minute)
	if got := admitted(t, eng, "alpha", "u1", 20); got != 2 {
		t.Errorf("alpha v4: admitted %d of 20, want 2", got)
	}
	eventually(t, "v4 ACKed", func() bool { a, _ := m2.seen(); return len(a) > 0 && a[len(a)-1] == "v4" })
}
