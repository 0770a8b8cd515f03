package rlqs

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// grpcFixture is a Server behind a real gRPC server on loopback, over a
// store of kind (the memory store, or a real redis-server) on a fake clock.
type grpcFixture struct {
	srv    *Server
	client rlqspb.RateLimitQuotaServiceClient
	clock  *storetest.Clock
}

func newGRPCFixture(t *testing.T, kind string, opts Options) *grpcFixture {
	t.Helper()
	clock := storetest.NewClock()
	st := newSimStore(t, kind, clock.Now)
	eng, src := simEngineOn(t, st, simRules)
	opts.Now, opts.Allotter = clock.Now, st
	srv, err := New(eng, src, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(); g.Stop() })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &grpcFixture{srv: srv, client: rlqspb.NewRateLimitQuotaServiceClient(conn), clock: clock}
}

func usage(bucket map[string]string, allowed, denied uint64) *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage {
	return &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		BucketId: &rlqspb.BucketId{Bucket: bucket}, TimeElapsed: durationpb.New(5 * time.Second),
		NumRequestsAllowed: allowed, NumRequestsDenied: denied,
	}
}

// TestStream: over gRPC, a bucket of a fixed-window rule gets a token
// bucket of the units granted with the grant's TTL (at most the window), an
// unmatched bucket gets Options.Unmatched (deny) and an unlimited one
// ALLOW_ALL; the client's CloseSend ends the stream cleanly (io.EOF, no
// error status).
func TestStream(t *testing.T) { eachStore(t, testStream) }

func testStream(t *testing.T, kind string) {
	f := newGRPCFixture(t, kind, Options{Unmatched: DenyUnmatched})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := f.client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(map[string]string{"route": "api", "tenant": "acme"}, 100, 0),
		usage(map[string]string{"tenant": "nobody"}, 1, 0),
		usage(map[string]string{"tenant": "free", "route": "x"}, 1, 0),
	}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := st.Recv()
	if err != nil {
		t.Fatalf("Recv: %v", err)
	}
	acts := resp.GetBucketAction()
	if len(acts) != 3 {
		t.Fatalf("got %d actions, want 3: %v", len(acts), resp)
	}
	tb := acts[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket()
	ttl := acts[0].GetQuotaAssignmentAction().GetAssignmentTimeToLive().AsDuration()
	// 100 requests in 5 s: 20/s × 60 s × 1.25 headroom = 1500 units wanted.
	if tb.GetMaxTokens() != 1500 || ttl <= 0 || ttl > time.Minute {
		t.Errorf("limited bucket: token bucket %v, TTL %v; want 1500 tokens, 0 < TTL ≤ 1m", tb, ttl)
	}
	if fill := tb.GetFillInterval().AsDuration(); fill <= 2*ttl {
		t.Errorf("fill interval %v, want > 2 × TTL %v (less than one token refilled while the grant lives)", fill, ttl)
	}
	for i, want := range map[int]typev3.RateLimitStrategy_BlanketRule{1: typev3.RateLimitStrategy_DENY_ALL, 2: typev3.RateLimitStrategy_ALLOW_ALL} {
		got := acts[i].GetQuotaAssignmentAction().GetRateLimitStrategy()
		if _, ok := got.GetStrategy().(*typev3.RateLimitStrategy_BlanketRule_); !ok || got.GetBlanketRule() != want {
			t.Errorf("action %d (%v): got %v, want blanket %v", i, acts[i].GetBucketId().GetBucket(), got, want)
		}
	}
	if err := st.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after CloseSend: Recv error %v, want io.EOF (a clean end)", err)
	}
}

// TestStreamErrors: bad messages end the stream with a gRPC status naming
// the field, never a panic.
func TestStreamErrors(t *testing.T) { eachStore(t, testStreamErrors) }

func testStreamErrors(t *testing.T, kind string) {
	long := strings.Repeat("k", 300)
	many := map[string]string{}
	for i := range 17 {
		many[string(rune('a'+i))] = "v"
	}
	ok := usage(map[string]string{"tenant": "acme", "route": "api"}, 1, 0)
	tests := []struct {
		name string
		msgs []*rlqspb.RateLimitQuotaUsageReports
		code codes.Code
		want string
	}{
		{"no domain first", []*rlqspb.RateLimitQuotaUsageReports{{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok}}},
			codes.InvalidArgument, "first message of a stream must carry the domain"},
		{"new domain", []*rlqspb.RateLimitQuotaUsageReports{{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok}}, {Domain: "other"}},
			codes.InvalidArgument, "a new domain needs a new stream"},
		{"domain too long", []*rlqspb.RateLimitQuotaUsageReports{{Domain: long}}, codes.InvalidArgument, "domain"},
		{"empty bucket", []*rlqspb.RateLimitQuotaUsageReports{{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(nil, 1, 0)}}},
			codes.InvalidArgument, "bucket_quota_usages[0].bucket_id: empty bucket"},
		{"nil bucket id", []*rlqspb.RateLimitQuotaUsageReports{{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{}}}},
			codes.InvalidArgument, "bucket_quota_usages[0].bucket_id"},
		{"too many entries", []*rlqspb.RateLimitQuotaUsageReports{{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, usage(many, 1, 0)}}},
			codes.InvalidArgument, "bucket_quota_usages[1].bucket_id"},
		{"key too long", []*rlqspb.RateLimitQuotaUsageReports{{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{long: "v"}, 1, 0)}}},
			codes.InvalidArgument, "bucket_quota_usages[0].bucket_id"},
		{"too many buckets", []*rlqspb.RateLimitQuotaUsageReports{
			{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"a": "1"}, 1, 0), usage(map[string]string{"a": "2"}, 1, 0)}},
			{BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"a": "3"}, 1, 0)}}},
			codes.ResourceExhausted, "at most 2"},
		{"too many usages in one message", []*rlqspb.RateLimitQuotaUsageReports{
			{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{ok, ok, ok}}},
			codes.ResourceExhausted, "bucket_quota_usages: 3 in one message, at most 2"},
	}
	f := newGRPCFixture(t, kind, Options{MaxBuckets: 2})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := f.client.StreamRateLimitQuotas(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.msgs {
				if err := st.Send(m); err != nil {
					break // the server ended the stream: Recv tells why
				}
			}
			for {
				_, err = st.Recv()
				if err != nil {
					break
				}
			}
			if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.want) {
				t.Errorf("got %v, want code %v with %q", err, tt.code, tt.want)
			}
		})
	}
}

// TestShutdownEndsStreams: Shutdown ends an open stream with status OK.
func TestShutdownEndsStreams(t *testing.T) { eachStore(t, testShutdownEndsStreams) }

func testShutdownEndsStreams(t *testing.T, kind string) {
	f := newGRPCFixture(t, kind, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := f.client.StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": "nobody"}, 1, 0)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil { // the server has the stream
		t.Fatal(err)
	}
	if s := f.srv.Stats(); s.Open != 1 || s.Streams != 1 || s.Reports != 1 || s.Assignments[ActionAllow] != 1 {
		t.Errorf("stats with the stream open: %+v, want 1 open, 1 opened, 1 report, 1 allow assignment", s)
	}
	f.srv.Shutdown()
	if _, err := st.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after Shutdown: Recv error %v, want io.EOF (status OK)", err)
	}
	if s := f.srv.Stats(); s.Open != 0 {
		t.Errorf("stats after Shutdown: %d streams open, want 0", s.Open)
	}
}

// TestRedisDown: while Redis is down an Envoy keeps spending only the
// grant it holds, until that grant's TTL ends (then its expired behaviour,
// DENY_ALL, applies); the server sends nothing new and counts the failed
// allotments; once Redis is back the next report gets a grant again.
func TestRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	clock := storetest.NewClock()
	eng, src, st := simEngine(t, rs.URL(), clock, simRules)
	srv, err := New(eng, src, Options{Now: clock.Now, AllotTimeout: 2 * time.Second, Allotter: st})
	if err != nil {
		t.Fatal(err)
	}
	e := newSimEnvoy("envoy", func() *Server { return srv }, clock.Now())
	id := map[string]string{"tenant": "acme", "route": "api"}
	e.request(t, clock.Now(), id) // creates the bucket; the report gets a grant
	b := e.buckets[canonical(id)]
	grant := b.strategy.GetTokenBucket().GetMaxTokens()
	if grant == 0 {
		t.Fatalf("no token bucket after the first report: %v", b.strategy)
	}
	rs.Kill()
	admitted := 0
	step := 100 * time.Millisecond
	for now := clock.Now(); now.Before(storetest.Epoch.Add(3 * time.Minute)); now = now.Add(step) {
		clock.Set(now)
		e.tick(t, now)
		for range 100 {
			if e.request(t, now, id) {
				admitted++
			}
		}
		if !now.Before(e.nextReport) {
			e.report(t, now, nil)
			e.nextReport = now.Add(5 * time.Second)
		}
	}
	if admitted > int(grant) {
		t.Errorf("admitted %d while Redis was down, want ≤ the grant held, %d", admitted, grant)
	}
	if s := srv.Stats(); s.AllotErrors == 0 {
		t.Errorf("allot errors %d, want > 0", s.AllotErrors)
	}
	if b.expires.IsZero() || clock.Now().Before(b.expires) {
		t.Errorf("assignment expires %v, want expired by %v", b.expires, clock.Now())
	}
	rs.Restart()
	before := srv.Stats().Grants
	deadline := time.Now().Add(30 * time.Second)
	for srv.Stats().Grants == before && time.Now().Before(deadline) {
		now := clock.Now().Add(5 * time.Second)
		clock.Set(now)
		e.request(t, now, id)
		e.report(t, now, nil)
		time.Sleep(10 * time.Millisecond) // redis-server restarting
	}
	if srv.Stats().Grants == before {
		t.Errorf("no grant after Redis came back")
	}
	t.Logf("grant held %d; admitted %d while Redis was down; %+v", grant, admitted, srv.Stats())
}

// TestPushAtWindowEnd: over gRPC, on the real clock, the server pushes the
// next window's assignment when the grant in force ends, without waiting
// for a report (a 1 s window; the test waits for two pushes after the
// first answer, with a generous deadline and no bound on the time taken).
func TestPushAtWindowEnd(t *testing.T) { eachStore(t, testPushAtWindowEnd) }

func testPushAtWindowEnd(t *testing.T, kind string) {
	const yaml = `
domain: edge
descriptors:
  - key: tenant
    rate_limit: {window: 1s, requests_per_unit: 100}
`
	st := newSimStore(t, kind, nil)
	eng, src := simEngineOn(t, st, yaml)
	srv, err := New(eng, src, Options{Allotter: st})
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	srv.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(func() { srv.Shutdown(); g.Stop() })
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{usage(map[string]string{"tenant": "acme"}, 50, 0)}}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 { // the answer, then two pushes
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("Recv %d: %v", i, err)
		}
		qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
		if qa.GetRateLimitStrategy().GetTokenBucket().GetMaxTokens() == 0 && qa.GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
			t.Errorf("message %d: %v, want a token bucket or DENY_ALL", i, resp)
		}
		if ttl := qa.GetAssignmentTimeToLive().AsDuration(); ttl <= 0 || ttl > time.Second {
			t.Errorf("message %d: TTL %v, want within (0, 1s]", i, ttl)
		}
	}
	if s := srv.Stats(); s.Reports != 1 || s.Responses < 3 {
		t.Errorf("stats %+v: want 1 report, ≥ 3 responses", s)
	}
}
