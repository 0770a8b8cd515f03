package rls

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
	"github.com/sluice-rl/sluice/store/redis"
	"github.com/sluice-rl/sluice/store/storetest"
)

const envoyRules = `domain: ai
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: token_bucket, settle: after}
  - key: user
    metadata: {plan: {name: gold}}
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: daily
    quota_mode: true
    metadata: {plan: {window: day}, owner: quota}
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: weekly
    quota_mode: true
    rate_limit: {unit: week, requests_per_unit: 2}
`

// serve starts the RLS on loopback over an engine with the given store and
// returns a client.
func serveRLS(t *testing.T, store sluice.Store, cfg service.Config, opts Options) rlsv3.RateLimitServiceClient {
	t.Helper()
	snap, err := rules.Parse("ai.yaml", []byte(envoyRules), rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := service.New(cfg, service.StaticRules{Snapshot: snap}, store, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions()...) // as sluice serve runs it
	New(eng, opts).Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

func call(t *testing.T, c rlsv3.RateLimitServiceClient, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// withHits is d with a per-descriptor hits_addend.
func withHits(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func header(resp *rlsv3.RateLimitResponse, name string) string {
	for _, h := range resp.GetResponseHeadersToAdd() {
		if h.GetKey() == name {
			return h.GetValue()
		}
	}
	return ""
}

// stores runs f on a memory store and on Redis (single and Cluster), each
// on the fake clock.
func stores(t *testing.T, f func(t *testing.T, st sluice.Store, clock *storetest.Clock)) {
	t.Run("memory", func(t *testing.T) {
		clock := storetest.NewClock()
		st := memory.New(memory.Options{Now: clock.Now})
		t.Cleanup(func() { st.Close() })
		f(t, st, clock)
	})
	for _, mode := range []string{"redis", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var url string
			if mode == "redis" {
				url = redistest.Start(t).URL()
			} else {
				url = redistest.StartCluster(t).URL()
			}
			clock := storetest.NewClock()
			st, err := redis.New(redis.Options{URL: url, Now: clock.Now, Timeout: 5 * time.Second, Prefix: fmt.Sprintf("t%d:", time.Now().UnixNano())})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			f(t, st, clock)
		})
	}
}

// TestStreamDoneCharge: Envoy's apply_on_stream_done pattern over gRPC. The
// request path looks (hits_addend 0), the stream-done call carries the
// tokens used: charged even beyond what is left, and the next look is
// OVER_LIMIT with the exact wait for one token.
func TestStreamDoneCharge(t *testing.T) {
	t.Parallel() // its own stores, servers and clocks; it mostly waits for a Cluster to form
	stores(t, func(t *testing.T, st sluice.Store, clock *storetest.Clock) {
		c := serveRLS(t, st, service.DefaultConfig(), Options{ResponseHeaders: true})
		look := func() *rlsv3.RateLimitRequest {
			return &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("tenant", "acme"), 0)}}
		}
		done := func(tokens uint32) *rlsv3.RateLimitRequest {
			return &rlsv3.RateLimitRequest{Domain: "ai", HitsAddend: tokens, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("tenant", "acme")}}
		}
		if r := call(t, c, look()); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 1000 {
			t.Fatalf("first look: %v, want OK with 1000 left", r)
		}
		if r := call(t, c, done(900)); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 100 {
			t.Fatalf("stream done, 900 tokens: %v, want OK with 100 left", r)
		}
		if r := call(t, c, look()); r.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("look with 100 left: %v, want OK", r)
		}
		if r := call(t, c, done(300)); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 0 {
			t.Fatalf("stream done, 300 tokens with 100 left: %v, want OK (charged) with 0 left", r)
		}
		// 200 tokens in debt: one token is back after 201 × 60ms = 12.06s.
		r := call(t, c, look())
		if r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT || header(r, "Retry-After") != "13" {
			t.Fatalf("look in debt: %v, Retry-After %q; want OVER_LIMIT, 13", r.GetOverallCode(), header(r, "Retry-After"))
		}
		clock.Advance(12060*time.Millisecond - time.Microsecond)
		if r := call(t, c, look()); r.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("1µs before one token is back: %v, want OVER_LIMIT", r.GetOverallCode())
		}
		clock.Advance(time.Microsecond)
		if r := call(t, c, look()); r.GetOverallCode() != rlsv3.RateLimitResponse_OK || r.GetStatuses()[0].GetLimitRemaining() != 1 {
			t.Fatalf("one token back: %v, want OK with 1 left", r)
		}
	})
}

// TestNegativeHits: is_negative_hits gives units back, never past a fresh
// counter.
func TestNegativeHits(t *testing.T) {
	t.Parallel() // its own stores, servers and clocks; it mostly waits for a Cluster to form
	stores(t, func(t *testing.T, st sluice.Store, clock *storetest.Clock) {
		c := serveRLS(t, st, service.DefaultConfig(), Options{})
		req := func(hits uint64, negative bool) *rlsv3.RateLimitRequest {
			d := withHits(desc("user", "bob"), hits)
			d.IsNegativeHits = negative
			return &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
		}
		for i, step := range []struct {
			hits     uint64
			negative bool
			want     rlsv3.RateLimitResponse_Code
			left     uint32
		}{
			{10, false, rlsv3.RateLimitResponse_OK, 0},
			{1, false, rlsv3.RateLimitResponse_OVER_LIMIT, 0},
			{4, true, rlsv3.RateLimitResponse_OK, 4},
			{4, false, rlsv3.RateLimitResponse_OK, 0},
			{50, true, rlsv3.RateLimitResponse_OK, 10},
		} {
			r := call(t, c, req(step.hits, step.negative))
			if r.GetOverallCode() != step.want || r.GetStatuses()[0].GetLimitRemaining() != step.left {
				t.Fatalf("step %d (hits %d, negative %v): %v with %d left, want %v with %d", i, step.hits, step.negative,
					r.GetOverallCode(), r.GetStatuses()[0].GetLimitRemaining(), step.want, step.left)
			}
		}
		call(t, c, req(6, false))
		clock.Advance(time.Minute) // a past window gives nothing back
		if r := call(t, c, req(6, true)); r.GetStatuses()[0].GetLimitRemaining() != 10 {
			t.Errorf("refund of a past window: %d left, want 10", r.GetStatuses()[0].GetLimitRemaining())
		}
		if r := call(t, c, req(3, false)); r.GetStatuses()[0].GetLimitRemaining() != 7 {
			t.Errorf("after it: %d left, want 7", r.GetStatuses()[0].GetLimitRemaining())
		}
	})
}

// TestQuotaModeGRPC: quota-mode descriptors deny only when all are over;
// the metadata of the descriptors not over comes back in dynamic_metadata;
// envoyproxy/ratelimit's headers name the descriptor closest to its limit.
func TestQuotaModeGRPC(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	names := DefaultLimitHeaderNames()
	c := serveRLS(t, st, service.DefaultConfig(), Options{DynamicMetadata: true, LimitHeaders: &names})
	req := &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("daily", "a"), desc("weekly", "a"), desc("user", "a")}}
	codes := func(r *rlsv3.RateLimitResponse) string {
		s := r.GetOverallCode().String()
		for _, st := range r.GetStatuses() {
			s += " " + st.GetCode().String()
		}
		return s
	}
	steps := []string{
		"OK OK OK OK",
		"OK OVER_LIMIT OK OK",
		"OVER_LIMIT OVER_LIMIT OVER_LIMIT OK",
	}
	var last *rlsv3.RateLimitResponse
	for i, want := range steps {
		last = call(t, c, req)
		if got := codes(last); got != want {
			t.Fatalf("step %d: %s, want %s", i, got, want)
		}
		if i == 1 {
			md := last.GetDynamicMetadata()
			meta := md.GetFields()["metadata"].GetStructValue()
			if md.GetFields()["domain"].GetStringValue() != "ai" || len(md.GetFields()["descriptors"].GetListValue().GetValues()) != 3 {
				t.Errorf("step 1 dynamic metadata %v: want domain ai and 3 descriptors", md)
			}
			// daily is over: only user's metadata.
			if meta.GetFields()["plan"].GetStructValue().GetFields()["name"].GetStringValue() != "gold" || meta.GetFields()["owner"] != nil {
				t.Errorf("step 1 metadata = %v, want user's only", meta)
			}
			if h := header(last, "RateLimit-Limit") + "/" + header(last, "RateLimit-Remaining"); h != "1/0" {
				t.Errorf("step 1 headers limit/remaining = %s, want 1/0 (daily, the first with the least left, as envoyproxy/ratelimit picks)", h)
			}
		}
	}
	first := call(t, c, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "b")}})
	if h := header(first, "RateLimit-Limit") + "/" + header(first, "RateLimit-Remaining") + "/" + header(first, "RateLimit-Reset"); h == "" || header(first, "RateLimit-Limit") != "10" || header(first, "RateLimit-Remaining") != "9" || header(first, "RateLimit-Reset") == "" {
		t.Errorf("headers of a first hit = %s, want 10/9/<seconds>", h)
	}
	// user a was charged by the two admitted requests only.
	if r := call(t, c, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{withHits(desc("user", "a"), 0)}}); r.GetStatuses()[0].GetLimitRemaining() != 8 {
		t.Errorf("user a: %d left, want 8", r.GetStatuses()[0].GetLimitRemaining())
	}
}

// TestEmptyDescriptorsGRPC: a descriptor with no entries or an empty key is
// OK; the others are enforced.
func TestEmptyDescriptorsGRPC(t *testing.T) {
	st := memory.New(memory.Options{})
	t.Cleanup(func() { st.Close() })
	c := serveRLS(t, st, service.DefaultConfig(), Options{})
	call(t, c, &rlsv3.RateLimitRequest{Domain: "ai", HitsAddend: 10, Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("user", "x")}})
	r := call(t, c, &rlsv3.RateLimitRequest{Domain: "ai", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}, desc("", "v"), desc("user", "x")}})
	got := fmt.Sprint(r.GetOverallCode(), r.GetStatuses()[0].GetCode(), r.GetStatuses()[1].GetCode(), r.GetStatuses()[2].GetCode())
	if got != "OVER_LIMIT OK OK OVER_LIMIT" {
		t.Errorf("codes = %s, want OVER_LIMIT OK OK OVER_LIMIT", got)
	}
	if r.GetStatuses()[0].GetCurrentLimit() != nil || r.GetStatuses()[1].GetCurrentLimit() != nil {
		t.Errorf("statuses of empty descriptors carry a limit: %v", r.GetStatuses())
	}
}

func TestLimitHeaderNamesValidate(t *testing.T) {
	for _, tc := range []struct {
		n    LimitHeaderNames
		want string
	}{
		{DefaultLimitHeaderNames(), ""},
		{LimitHeaderNames{Limit: "X-L", Remaining: "", Reset: "X-R"}, "remaining header name: empty"},
		{LimitHeaderNames{Limit: "X L", Remaining: "a", Reset: "b"}, `limit header name "X L": byte ' '`},
	} {
		err := tc.n.Validate()
		if (err == nil) != (tc.want == "") || (err != nil && !contains(err.Error(), tc.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.n, err, tc.want)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
