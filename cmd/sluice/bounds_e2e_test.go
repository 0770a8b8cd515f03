package main

import (
	"context"
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
