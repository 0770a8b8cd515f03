package rls

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/storetest"
)

// slotRules: at most 3 streams in flight per API key, paired by the
// request id entry; a lost stream's slot is freed after 10 minutes.
const slotRules = `domain: llm
descriptors:
  - key: api_key
    descriptors:
      - key: request_id
        rate_limit: {algorithm: concurrency, window: 10m, requests_per_unit: 3, pair_by: request_id}
`

// serveYAML is serveRLS for a rule file of its own, with the server's
// options opts.
func serveYAML(t *testing.T, yaml string, store sluice.Store, opts Options) rlsv3.RateLimitServiceClient {
	t.Helper()
	return serveYAMLOpts(t, yaml, rules.Options{}, store, opts)
}

// serveYAMLOpts is serveYAML reading the rules with ropts.
func serveYAMLOpts(t *testing.T, yaml string, ropts rules.Options, store sluice.Store, opts Options) rlsv3.RateLimitServiceClient {
	t.Helper()
	snap, err := rules.Parse("llm.yaml", []byte(yaml), ropts)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, store, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(ServerOptions()...)
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

// envoyStream is what Envoy sends for request id on the request path, or
// at stream end (apply_on_stream_done) with is_negative_hits.
func envoyStream(key, id string, done bool) *rlsv3.RateLimitRequest {
	d := desc("api_key", key, "request_id", id)
	d.IsNegativeHits = done
	return &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: []*ratelimitv3.RateLimitDescriptor{d}}
}

// TestStreamSlots: a concurrency limit on streams behind Envoy, over a
// real gRPC server, on memory and Redis: N concurrent streams admit the
// limit, a stream's end frees its slot once, a duplicate end frees
// nothing, and a lost stream's slot expires after the rule's window.
func TestStreamSlots(t *testing.T) {
	stores(t, func(t *testing.T, st sluice.Store, clock *storetest.Clock) {
		c := serveYAML(t, slotRules, st, Options{})
		ok := func(t *testing.T, what string, req *rlsv3.RateLimitRequest, want bool) {
			t.Helper()
			if got := call(t, c, req).GetOverallCode() == rlsv3.RateLimitResponse_OK; got != want {
				t.Errorf("%s: OK = %v, want %v", what, got, want)
			}
		}
		const n = 12
		var admitted atomic.Int64
		ids := make([]bool, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.ShouldRateLimit(context.Background(), envoyStream("k", fmt.Sprint("s", i), false))
				if err != nil {
					t.Errorf("stream %d: %v", i, err)
					return
				}
				if resp.GetOverallCode() == rlsv3.RateLimitResponse_OK {
					admitted.Add(1)
					ids[i] = true
				}
			}()
		}
		wg.Wait()
		if got := admitted.Load(); got != 3 {
			t.Fatalf("%d concurrent streams: %d admitted, want 3", n, got)
		}
		var in []string
		for i, a := range ids {
			if a {
				in = append(in, fmt.Sprint("s", i))
			}
		}
		ok(t, "a fourth stream", envoyStream("k", "x1", false), false)
		ok(t, "stream done (is_negative_hits)", envoyStream("k", in[0], true), true)
		ok(t, "a stream after one ended", envoyStream("k", "x2", false), true)
		ok(t, "a duplicate stream done", envoyStream("k", in[0], true), true)
		ok(t, "a stream after the duplicate (nothing freed)", envoyStream("k", "x3", false), false)

		// in[1] and in[2] are lost (no stream done ever comes); so is x2.
		clock.Advance(10*time.Minute - time.Second)
		ok(t, "a stream before the lost slots expire", envoyStream("k", "x4", false), false)
		clock.Advance(2 * time.Second)
		for i := range 3 {
			ok(t, fmt.Sprintf("stream %d after the lost slots expired", i), envoyStream("k", fmt.Sprint("y", i), false), true)
		}
		ok(t, "a fourth stream after", envoyStream("k", "y3", false), false)
	})
}
