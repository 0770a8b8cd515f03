package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/internal/envoytest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/notify"
)

// envoyRequest is what Envoy knows of one request when it builds rate-limit
// descriptors: its headers and the dynamic metadata the external processor
// wrote (namespace → key → value).
type envoyRequest struct {
	headers  map[string]string
	metadata map[string]map[string]string
}

// envoyConfig is the part of examples/llm/envoy.yaml that decides what Envoy
// sends to Sluice: the rate-limit filter's domain and the route's rate limits.
type envoyConfig struct {
	domain string
	limits []*routev3.RateLimit
}

// loadEnvoyExample decodes examples/llm/envoy.yaml strictly into Envoy's
// own types (unknown fields and failed validations are errors) and returns
// its rate-limit filter's domain and its route's rate limits.
func loadEnvoyExample(t *testing.T) envoyConfig {
	t.Helper()
	hcm := envoytest.Load(t, filepath.Join(repoRoot, "examples/llm/envoy.yaml"))
	var cfg envoyConfig
	for _, f := range hcm.HttpFilters {
		if f.Name != "envoy.filters.http.ratelimit" {
			continue
		}
		var rl ratelimitfilterv3.RateLimit
		if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
			t.Fatal(err)
		}
		cfg.domain = rl.Domain
	}
	cfg.limits = hcm.GetRouteConfig().VirtualHosts[0].Routes[0].GetRoute().RateLimits
	if cfg.domain == "" || len(cfg.limits) == 0 {
		t.Fatalf("envoy.yaml: rate-limit domain %q, %d route rate limits; want both", cfg.domain, len(cfg.limits))
	}
	return cfg
}

// dynamicMetadataFormat is the one substitution the example's hits_addend
// formats use.
var dynamicMetadataFormat = regexp.MustCompile(`^%DYNAMIC_METADATA\(([^:]+):([^)]+)\)%$`)

// call builds the RateLimitRequest Envoy sends for req on the request path
// (done false) or when its stream is done (done true), as Envoy's
// rate-limit filter does: every route rate limit of that phase whose
// actions all produce an entry makes one descriptor, in route order, with
// its hits_addend (a number, or a format read from the metadata) and
// is_negative_hits. The example uses request_headers, generic_key and
// metadata actions only; any other fails the test.
func (c envoyConfig) call(t *testing.T, req envoyRequest, done bool) *rlsv3.RateLimitRequest {
	t.Helper()
	out := &rlsv3.RateLimitRequest{Domain: c.domain}
	for _, rl := range c.limits {
		if rl.ApplyOnStreamDone != done {
			continue
		}
		d := &ratelimitv3.RateLimitDescriptor{}
		complete := true
		for _, a := range rl.Actions {
			switch {
			case a.GetRequestHeaders() != nil:
				h := a.GetRequestHeaders()
				v, ok := req.headers[h.HeaderName]
				if !ok {
					complete = false // Envoy sends no descriptor without the header
					continue
				}
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: h.DescriptorKey, Value: v})
			case a.GetGenericKey() != nil:
				g := a.GetGenericKey()
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: g.DescriptorKey, Value: g.DescriptorValue})
			case a.GetMetadata() != nil:
				m := a.GetMetadata()
				if len(m.MetadataKey.Path) != 1 {
					t.Fatalf("metadata action %v: the test reads one path segment", m)
				}
				v, ok := req.metadata[m.MetadataKey.Key][m.MetadataKey.Path[0].GetKey()]
				if !ok {
					v = m.DefaultValue
				}
				d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: m.DescriptorKey, Value: v})
			default:
				t.Fatalf("route rate limit action %v: not one the test builds", a)
			}
		}
		if !complete {
			continue
		}
		if h := rl.HitsAddend; h != nil {
			switch {
			case h.Number != nil:
				d.HitsAddend = wrapperspb.UInt64(h.Number.Value)
			case h.Format != "":
				m := dynamicMetadataFormat.FindStringSubmatch(h.Format)
				if m == nil {
					t.Fatalf("hits_addend format %q: the test reads %%DYNAMIC_METADATA(ns:key)%% only", h.Format)
				}
				n, err := strconv.ParseUint(req.metadata[m[1]][m[2]], 10, 64)
				if err != nil {
					t.Fatalf("hits_addend %q: metadata %s:%s = %q: %v", h.Format, m[1], m[2], req.metadata[m[1]][m[2]], err)
				}
				d.HitsAddend = wrapperspb.UInt64(n)
			}
			d.IsNegativeHits = h.IsNegativeHits
		}
		out.Descriptors = append(out.Descriptors, d)
	}
	return out
}

// webhookSink is a webhook receiver: it verifies each body's signature
// and keeps the levels that fired.
type webhookSink struct {
	mu     sync.Mutex
	levels []int
	bad    []string
}

// TestLLMExample: examples/llm as a user runs it. envoy.yaml decodes
// strictly into Envoy's types; from its route's rate limits the test
// builds the calls Envoy would send for each request (request path, then
// stream done, with the usage the external processor put in dynamic
// metadata) and sends them over gRPC to a real `sluice serve --store
// redis` with the example's rules and price table and a webhook for
// notify_at. It checks what the guide (docs/llm.md) promises: tokens
// reserved then settled, stream slots held and given back, money charged
// at the table's prices, the first model with quota chosen and named in
// dynamic metadata, and the 50 % level told once, signed.
func TestLLMExample(t *testing.T) {
	bin := build(t)
	cfg := loadEnvoyExample(t)
	rd := redistest.Start(t)
	dir := t.TempDir()
	secret := "an example secret of enough bytes"
	secretFile := filepath.Join(dir, "secret")
	if err := os.WriteFile(secretFile, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	sink := &webhookSink{}
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var f struct{ Level int }
		err := json.Unmarshal(body, &f)
		sink.mu.Lock()
		defer sink.mu.Unlock()
		if verr := notify.Verify([]byte(secret), r.Header.Get("Sluice-Signature"), body, time.Now(), time.Hour); verr != nil || err != nil {
			sink.bad = append(sink.bad, fmt.Sprintf("%v %v: %s", verr, err, body))
			return
		}
		sink.levels = append(sink.levels, f.Level)
	}))
	defer hook.Close()
	serve := exec.Command(bin, "serve", "--store", "redis", "--redis-url", rd.URL(),
		"--rules", "examples/llm/rules", "--prices", "examples/llm/prices.yaml",
		"--notify-webhook", hook.URL, "--notify-secret-file", secretFile,
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "")
	serve.Dir = repoRoot
	grpcAddr, _, lines, _ := startServe(t, serve)
	go func() {
		for range lines { // the log, until the process ends
		}
	}()
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rls := rlsv3.NewRateLimitServiceClient(conn)
	ctx := context.Background()
	send := func(t *testing.T, what string, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := rls.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return resp
	}
	// request is the n-th request of key "k" (team "t"), of model, using
	// in/out/cached tokens; total is their sum.
	request := func(n int, model string, in, out, cached int) envoyRequest {
		return envoyRequest{
			headers: map[string]string{"x-api-key": "k", "x-team": "t", "x-request-id": fmt.Sprintf("req-%d", n)},
			metadata: map[string]map[string]string{"io.envoy.ai_gateway": {
				"model": model, "llm_input_token": strconv.Itoa(in), "llm_output_token": strconv.Itoa(out),
				"llm_cached_input_token": strconv.Itoa(cached), "llm_total_token": strconv.Itoa(in + out + cached)}},
		}
	}
	// On the request path the processor has read the model, not yet the
	// usage.
	pathOnly := func(r envoyRequest) envoyRequest {
		md := map[string]string{"model": r.metadata["io.envoy.ai_gateway"]["model"]}
		return envoyRequest{headers: r.headers, metadata: map[string]map[string]string{"io.envoy.ai_gateway": md}}
	}
	// status finds the status of the descriptor whose first entry has key.
	status := func(t *testing.T, req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, key string) *rlsv3.RateLimitResponse_DescriptorStatus {
		t.Helper()
		for i, d := range req.Descriptors {
			if d.Entries[0].Key == key {
				return resp.Statuses[i]
			}
		}
		t.Fatalf("no descriptor of key %s in %v", key, req.Descriptors)
		return nil
	}
	chosen := func(resp *rlsv3.RateLimitResponse) string {
		v := resp.GetDynamicMetadata().GetFields()["sluice.choice"].GetStructValue().GetFields()["model"]
		return v.GetStructValue().GetFields()["value"].GetStringValue()
	}

	// Request 1: gpt-4o, 1,000 input and 500 output tokens.
	r1 := request(1, "gpt-4o", 1000, 500, 0)
	path := cfg.call(t, pathOnly(r1), false)
	resp := send(t, "request 1, request path", path)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || chosen(resp) != "gpt-4o" {
		t.Fatalf("request 1: %v, chosen %q; want OK and gpt-4o", resp.OverallCode, chosen(resp))
	}
	if got := status(t, path, resp, "tokens").LimitRemaining; got != 200000-4096 {
		t.Errorf("request 1 reserved: tokens left %d, want %d (the rule's reserve, 4096)", got, 200000-4096)
	}
	done := cfg.call(t, r1, true)
	resp = send(t, "request 1, stream done", done)
	if got := status(t, done, resp, "tokens").LimitRemaining; got != 200000-1500 {
		t.Errorf("request 1 settled: tokens left %d, want %d (the 1,500 used)", got, 200000-1500)
	}
	// gpt-4o: $2.50 a million input, $10 a million output: 2,500 + 5,000 µ$.
	if got := status(t, done, resp, "api_key").LimitRemaining; got != 50_000_000-7_500 {
		t.Errorf("request 1's cost: key budget left %d µ$, want %d", got, 50_000_000-7_500)
	}

	// Requests 2–5 open streams and hold them: the fifth is over the four
	// slots of the key; the stream-done call of one frees a slot.
	var open []envoyRequest
	for n := 2; n <= 4; n++ {
		r := request(n, "gpt-4o", 100, 100, 0)
		if resp := send(t, fmt.Sprintf("request %d", n), cfg.call(t, pathOnly(r), false)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want OK", n, resp.OverallCode)
		}
		open = append(open, r)
	}
	r5 := request(5, "gpt-4o", 100, 100, 0)
	open = append(open, r5)
	path5 := cfg.call(t, pathOnly(r5), false)
	resp = send(t, "request 5", path5)
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("request 5: %v, want OK (the fourth stream)", resp.OverallCode)
	}
	// gpt-4o takes 3 a minute: request 5 (its fourth) went to gpt-4o-mini.
	if got := chosen(resp); got != "gpt-4o-mini" {
		t.Errorf("request 5: chosen %q, want gpt-4o-mini (gpt-4o's 3 a minute spent)", got)
	}
	r6 := request(6, "gpt-4o", 100, 100, 0)
	path6 := cfg.call(t, pathOnly(r6), false)
	resp = send(t, "request 6", path6)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || status(t, path6, resp, "streams").Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("request 6: %v, want OVER_LIMIT by the streams limit (4 open)", resp.OverallCode)
	}
	// Envoy sends the stream-done call for the denied request too: it
	// must take or free nothing.
	send(t, "request 6, stream done", cfg.call(t, request(6, "gpt-4o", 0, 0, 0), true))
	send(t, "request 2, stream done", cfg.call(t, open[0], true))
	resp = send(t, "request 7", cfg.call(t, pathOnly(request(7, "gpt-4o-mini", 0, 0, 0)), false))
	if resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("request 7 after request 2's stream ended: %v, want OK (a slot was given back)", resp.OverallCode)
	}
	for _, r := range append(open[1:], request(7, "gpt-4o-mini", 0, 0, 0)) {
		send(t, "stream done", cfg.call(t, r, true))
	}

	// Spend past half the hour's tokens, each request using what it
	// reserved: the 50 % level is told once, signed.
	for n := 100; n < 125; n++ {
		r := request(n, "gpt-4o-mini", 3000, 1096, 0)
		if resp := send(t, "spend", cfg.call(t, pathOnly(r), false)); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d: %v, want OK", n, resp.OverallCode)
		}
		send(t, "spend, stream done", cfg.call(t, r, true))
	}
	deadline := time.Now().Add(30 * time.Second) // a poll deadline, not a bound
	for {
		sink.mu.Lock()
		levels, bad := append([]int(nil), sink.levels...), append([]string(nil), sink.bad...)
		sink.mu.Unlock()
		if len(bad) > 0 {
			t.Fatalf("webhook bodies that do not verify: %v", bad)
		}
		if len(levels) > 0 || time.Now().After(deadline) {
			if len(levels) != 1 || levels[0] != 50 {
				t.Errorf("webhook levels %v, want [50] (told once)", levels)
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
