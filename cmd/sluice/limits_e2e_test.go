package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The request limits of `sluice serve`, at both transports: each is refused
// with InvalidArgument / 400 naming the flag, a message or body over
// --max-request-bytes is refused before it is decoded, and the store is
// never touched by a refused request.
func TestRequestLimitsServe(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) {
		c.Limits.Descriptors = 4
		c.Limits.RequestBytes = 64 << 10
	})
	many := make([]*ratelimitv3.RateLimitDescriptor, 5)
	for i := range many {
		many[i] = descriptor("remote_address", fmt.Sprint("10.0.0.", i))
	}
	tests := []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
		want string
	}{
		{"descriptors", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: many}, codes.InvalidArgument, "descriptors: 5 exceeds the limit max-descriptors=4"},
		{"value", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", strings.Repeat("v", 4097))}},
			codes.InvalidArgument, "descriptors[0].entries[0].value: 4097 bytes exceeds the limit max-value-bytes=4096"},
		{"key", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(strings.Repeat("k", 257), "v")}},
			codes.InvalidArgument, "descriptors[0].entries[0].key: 257 bytes exceeds the limit max-key-bytes=256"},
		{"entries", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(strings.Split(strings.Repeat("k,v,", 17), ",")[:34]...)}},
			codes.InvalidArgument, "descriptors[0].entries: 17 exceeds the limit max-entries=16"},
		{"message", &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", strings.Repeat("v", 70<<10))}},
			codes.ResourceExhausted, "larger than max"},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := ts.client.ShouldRateLimit(ctx, tt.req)
		cancel()
		if status.Code(err) != tt.code || !strings.Contains(status.Convert(err).Message(), tt.want) {
			t.Errorf("gRPC %s: error = %v, want %v containing %q", tt.name, err, tt.code, tt.want)
		}
	}
	body := func(n int, value string) string {
		var ds []string
		for i := range n {
			ds = append(ds, fmt.Sprintf(`{"entries":[{"key":"remote_address","value":"%s%d"}]}`, value, i))
		}
		return `{"domain":"edge","descriptors":[` + strings.Join(ds, ",") + `]}`
	}
	for _, tt := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"descriptors", body(5, "1."), 400, "descriptors: 5 exceeds the limit max-descriptors=4"},
		{"value", body(1, strings.Repeat("v", 4097)), 400, "descriptors[0].entries[0].value: 4098 bytes exceeds the limit max-value-bytes=4096"},
		{"body", body(1, strings.Repeat("v", 70<<10)), 413, "max-request-bytes=65536"},
	} {
		for _, path := range []string{"/v1/check", "/json"} {
			code, out := post(t, ts.base+path, tt.body)
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Errorf("POST %s %s = %d %s, want %d containing %q", path, tt.name, code, out, tt.code, tt.want)
			}
		}
	}
	if code, out := post(t, ts.base+"/v1/check", body(4, "1.")); code != 200 {
		t.Errorf("POST /v1/check of 4 descriptors = %d %s, want 200", code, out)
	}
}

func TestLimitFlags(t *testing.T) {
	cfg, err := parseServe(t, []string{"--max-key-bytes", "64", "--max-value-bytes=512", "--max-descriptors", "8", "--max-entries", "4",
		"--max-request-bytes", "4096", "--max-detailed-metric-values", "10", "--memory-max-keys", "1000"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := limitsConfig{KeyBytes: 64, ValueBytes: 512, Descriptors: 8, Entries: 4, RequestBytes: 4096, DetailedMetricValues: 10}
	if cfg.Limits != want || cfg.Store.Memory.MaxKeys != 1000 {
		t.Errorf("limits = %+v, memory cap %d; want %+v and 1000", cfg.Limits, cfg.Store.Memory.MaxKeys, want)
	}
	cfg.Rules.Dir = filepath.Join(repoRoot, "examples/rules")
	cfg.Limits.Entries, cfg.Store.Memory.MaxKeys = 0, -1
	err = cfg.Validate()
	for _, w := range []string{"--max-entries: 0, want at least 1", "--memory-max-keys: -1, want at least 1"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Validate = %v, want it to contain %q", err, w)
		}
	}
}

// The memory store's key count, cap and evictions, and the detailed_metric
// gauges, are on /metrics.
func TestMemoryMetricsServe(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "examples/rules"), func(c *serveConfig) { c.Store.Memory.MaxKeys = 512 })
	for i := range 600 {
		if code, out := post(t, ts.base+"/v1/check", fmt.Sprintf(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.1.%d.%d"}]}]}`, i/256, i%256)); code != 200 {
			t.Fatalf("check %d = %d %s", i, code, out)
		}
	}
	_, body := get(t, ts.base+"/metrics")
	for _, want := range []string{
		`sluice_memory_store_max_keys{store="memory"} 512`,
		`sluice_memory_store_evictions_total{store="memory"}`,
		`sluice_memory_store_swept_total{store="memory"}`,
		`sluice_detailed_metric_values 0`,
		`sluice_detailed_metric_overflow_total 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	var keys, evictions float64
	for _, line := range strings.Split(body, "\n") {
		fmt.Sscanf(line, `sluice_memory_store_keys{store="memory"} %g`, &keys)
		fmt.Sscanf(line, `sluice_memory_store_evictions_total{store="memory"} %g`, &evictions)
	}
	if keys == 0 || keys > 512 || evictions < 600-512 {
		t.Errorf("/metrics: keys %v, evictions %v after 600 distinct keys into a cap of 512; want 0 < keys ≤ 512 and at least 88 evictions", keys, evictions)
	}
}
