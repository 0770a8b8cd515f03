package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/metadata"
)

// TestGRPCMetadataBounded: a call's metadata is bounded like its message
// (--max-request-bytes): 1 MiB of metadata is refused with an error, not
// decided; a call with ordinary metadata still is.
func TestGRPCMetadataBounded(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), nil)
	req := &rlsv3.RateLimitRequest{Domain: "failure", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("open", "v")}}
	for _, tc := range []struct {
		name  string
		bytes int
		ok    bool
	}{
		{"1 KiB", 1 << 10, true},
		{"1 MiB", 1 << 20, false},
		{"limit + 1 KiB", ts.cfg.Limits.RequestBytes + 1<<10, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "x-padding", strings.Repeat("a", tc.bytes))
		resp, err := ts.client.ShouldRateLimit(ctx, req)
		cancel()
		if (err == nil) != tc.ok {
			t.Errorf("%s of metadata: %v %v, want success %v", tc.name, resp, err, tc.ok)
		}
	}
}

// TestHTTPHeaderBounded: the HTTP listener bounds a request's line and
// header fields at maxHeaderBytes (64 KiB), not net/http's 1 MiB: a
// 1 MiB query or a 100 KiB field is answered 431 before any handler; a
// 32 KiB field is served.
func TestHTTPHeaderBounded(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), nil)
	for _, tc := range []struct {
		name, query string
		field       int
		want        int
	}{
		{"32 KiB field", "", 32 << 10, http.StatusOK},
		{"100 KiB field", "", 100 << 10, http.StatusRequestHeaderFieldsTooLarge},
		{"1 MiB query", "?" + strings.Repeat("a=&", 1<<20/3), 0, http.StatusRequestHeaderFieldsTooLarge},
	} {
		req, err := http.NewRequest(http.MethodGet, ts.base+"/healthz"+tc.query, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.field > 0 {
			req.Header.Set("X-Padding", strings.Repeat("a", tc.field))
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}
