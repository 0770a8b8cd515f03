package main

// End-to-end tests: the whole `sluice serve` assembly (rules watcher, engine,
// store, gRPC and HTTP servers) on free loopback ports, asked over real gRPC
// and HTTP, with rule directories from testdata/.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluice-rl/sluice/store/storetest"
)

// repoRoot is where testdata/ lives, relative to this package.
const repoRoot = "../.."

// testServer is one running server and clients for it.
type testServer struct {
	*server
	clock  *storetest.Clock
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	base   string // http://host:port
	logs   *syncBuffer
	stop   func() // shuts down and checks run returned nil; idempotent
}

// syncBuffer collects logs; the server logs from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer runs a server on free ports with the rules in dir and a fake
// clock, after edit (if any) has adjusted its configuration. The server is
// shut down when the test ends, and the shutdown must be clean.
func startServer(t *testing.T, dir string, edit func(*serveConfig)) *testServer {
	t.Helper()
	cfg := defaultServeConfig()
	cfg.Rules.Dir = dir
	cfg.Listen = listenConfig{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", Debug: "127.0.0.1:0"}
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Tenants.Snapshot = filepath.Join(t.TempDir(), "tenants.snapshot") // not the user's cache
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	ts := &testServer{clock: storetest.NewClock(), logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(ts.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := newServer(cfg, log, deps{now: ts.clock.Now})
	if err != nil {
		t.Fatalf("newServer: %v", err)
	}
	ts.server = s
	ts.base = "http://" + s.httpAddr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	ts.conn, err = grpc.NewClient(s.grpcAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc.NewClient: %v", err)
	}
	ts.client = rlsv3.NewRateLimitServiceClient(ts.conn)
	var once sync.Once
	ts.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("run after shutdown = %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("run did not return within 10s of shutdown")
			}
		})
	}
	t.Cleanup(func() {
		ts.stop()
		ts.conn.Close()
		if t.Failed() {
			t.Logf("server log:\n%s", ts.logs.String())
		}
	})
	return ts
}

// descriptor builds a descriptor from key, value, key, value…
func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func (ts *testServer) should(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := ts.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// wantStatus is what one descriptor status must say. limit nil: no
// current_limit.
type wantStatus struct {
	code      rlsv3.RateLimitResponse_Code
	limit     *rlsv3.RateLimitResponse_RateLimit
	remaining uint32
}

func lim(rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, name string) *rlsv3.RateLimitResponse_RateLimit {
	return &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit, Name: name}
}

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
	sec  = rlsv3.RateLimitResponse_RateLimit_SECOND
	mn   = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hr   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day  = rlsv3.RateLimitResponse_RateLimit_DAY
)

func checkResponse(t *testing.T, step string, got *rlsv3.RateLimitResponse, wantOverall rlsv3.RateLimitResponse_Code, want []wantStatus) {
	t.Helper()
	if got.GetOverallCode() != wantOverall {
		t.Errorf("%s: overall_code = %v, want %v (response %v)", step, got.GetOverallCode(), wantOverall, got)
	}
	if len(got.GetStatuses()) != len(want) {
		t.Fatalf("%s: %d statuses, want %d (response %v)", step, len(got.GetStatuses()), len(want), got)
	}
	for i, w := range want {
		s := got.GetStatuses()[i]
		if s.GetCode() != w.code {
			t.Errorf("%s: status[%d].code = %v, want %v", step, i, s.GetCode(), w.code)
		}
		if s.GetLimitRemaining() != w.remaining {
			t.Errorf("%s: status[%d].limit_remaining = %d, want %d", step, i, s.GetLimitRemaining(), w.remaining)
		}
		cl := s.GetCurrentLimit()
		switch {
		case w.limit == nil && cl != nil:
			t.Errorf("%s: status[%d].current_limit = %v, want none", step, i, cl)
		case w.limit != nil && cl == nil:
			t.Errorf("%s: status[%d].current_limit = none, want %v", step, i, w.limit)
		case w.limit != nil:
			if cl.GetRequestsPerUnit() != w.limit.RequestsPerUnit || cl.GetUnit() != w.limit.Unit || cl.GetName() != w.limit.Name {
				t.Errorf("%s: status[%d].current_limit = %v, want %v", step, i, cl, w.limit)
			}
			if s.GetDurationUntilReset() == nil {
				t.Errorf("%s: status[%d].duration_until_reset absent, want it with current_limit", step, i)
			}
			if d := s.GetDurationUntilReset().AsDuration(); d < 0 || (d == 0 && (w.code == over || w.remaining < w.limit.RequestsPerUnit)) {
				t.Errorf("%s: status[%d].duration_until_reset = %v, want > 0 for a limit in use", step, i, d)
			}
		}
	}
}

// TestEnvoyBehaviours walks every envoy RLS behaviour in PROTOCOLS.md over
// real gRPC. Steps run in order against one server; the clock stands still.
func TestEnvoyBehaviours(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), nil)
	req := func(hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: hits, Descriptors: ds}
	}
	withHits := func(d *ratelimitv3.RateLimitDescriptor, n uint64) *ratelimitv3.RateLimitDescriptor {
		d.HitsAddend = wrapperspb.UInt64(n)
		return d
	}
	withLimit := func(d *ratelimitv3.RateLimitDescriptor, rpu uint32, u typev3.RateLimitUnit) *ratelimitv3.RateLimitDescriptor {
		d.Limit = &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: u}
		return d
	}
	steps := []struct {
		name    string
		req     *rlsv3.RateLimitRequest
		overall rlsv3.RateLimitResponse_Code
		want    []wantStatus
	}{
		{"bare key, first hit", req(0, descriptor("remote_address", "1.2.3.4")), ok, []wantStatus{{ok, lim(3, hr, ""), 2}}},
		{"bare key, second hit", req(0, descriptor("remote_address", "1.2.3.4")), ok, []wantStatus{{ok, lim(3, hr, ""), 1}}},
		{"bare key, third hit", req(0, descriptor("remote_address", "1.2.3.4")), ok, []wantStatus{{ok, lim(3, hr, ""), 0}}},
		{"bare key, over limit", req(0, descriptor("remote_address", "1.2.3.4")), over, []wantStatus{{over, lim(3, hr, ""), 0}}},
		{"other value counts apart", req(0, descriptor("remote_address", "1.2.3.5")), ok, []wantStatus{{ok, lim(3, hr, ""), 2}}},
		{"exact value beats bare key; zero blocks", req(0, descriptor("remote_address", "50.0.0.5")), over, []wantStatus{{over, lim(0, sec, ""), 0}}},
		{"wildcard, shadow mode, first", req(0, descriptor("path", "/api/v1/action")), ok, []wantStatus{{ok, lim(1, mn, ""), 0}}},
		{"wildcard, shadow mode, over but OK", req(0, descriptor("path", "/api/v1/action")), ok, []wantStatus{{ok, lim(1, mn, ""), 0}}},
		{"wildcard does not match other paths", req(0, descriptor("path", "/api/v1/other")), ok, []wantStatus{{ok, nil, 0}}},
		{"unlimited", req(0, descriptor("ldap", "cn=x")), ok, []wantStatus{{ok, nil, math.MaxUint32}}},
		{"no rule matched", req(0, descriptor("nope", "x")), ok, []wantStatus{{ok, nil, 0}}},
		{"nested rule needs the last level", req(0, descriptor("tenant", "acme")), ok, []wantStatus{{ok, nil, 0}}},
		{"nested, deeper than the rules", req(0, descriptor("tenant", "acme", "user", "bob", "x", "y")), ok, []wantStatus{{ok, nil, 0}}},
		{"nested 1", req(0, descriptor("tenant", "acme", "user", "bob")), ok, []wantStatus{{ok, lim(2, hr, "per_user"), 1}}},
		{"nested 2", req(0, descriptor("tenant", "acme", "user", "bob")), ok, []wantStatus{{ok, lim(2, hr, "per_user"), 0}}},
		{"nested over", req(0, descriptor("tenant", "acme", "user", "bob")), over, []wantStatus{{over, lim(2, hr, "per_user"), 0}}},
		{"replaces drops per_user (1)", req(0, descriptor("tenant", "acme", "user", "carol"), descriptor("plan", "premium", "user", "carol")), ok,
			[]wantStatus{{ok, nil, 0}, {ok, lim(5, hr, "premium_user"), 4}}},
		{"replaces drops per_user (2)", req(0, descriptor("tenant", "acme", "user", "carol"), descriptor("plan", "premium", "user", "carol")), ok,
			[]wantStatus{{ok, nil, 0}, {ok, lim(5, hr, "premium_user"), 3}}},
		{"replaces drops per_user (3, past per_user's 2)", req(0, descriptor("tenant", "acme", "user", "carol"), descriptor("plan", "premium", "user", "carol")), ok,
			[]wantStatus{{ok, nil, 0}, {ok, lim(5, hr, "premium_user"), 2}}},
		{"per_user alone was never charged", req(0, descriptor("tenant", "acme", "user", "carol")), ok, []wantStatus{{ok, lim(2, hr, "per_user"), 1}}},
		// The allowed descriptor of a denied request reports its state as it
		// stands: nothing was charged.
		{"any over limit → overall over; statuses in order", req(0, descriptor("remote_address", "9.9.9.9"), descriptor("remote_address", "50.0.0.5")), over,
			[]wantStatus{{ok, lim(3, hr, ""), 3}, {over, lim(0, sec, ""), 0}}},
		{"a denied request charged none of its limits", req(0, descriptor("remote_address", "9.9.9.9")), ok, []wantStatus{{ok, lim(3, hr, ""), 2}}},
		{"hits_addend 2", req(2, descriptor("remote_address", "7.7.7.7")), ok, []wantStatus{{ok, lim(3, hr, ""), 1}}},
		{"descriptor hits_addend 0 looks without charging", req(5, withHits(descriptor("remote_address", "7.7.7.7"), 0)), ok, []wantStatus{{ok, lim(3, hr, ""), 1}}},
		{"descriptor hits_addend overrides the request's", req(5, withHits(descriptor("remote_address", "7.7.7.7"), 1)), ok, []wantStatus{{ok, lim(3, hr, ""), 0}}},
		{"hits over the limit", req(4, descriptor("remote_address", "6.6.6.6")), over, []wantStatus{{over, lim(3, hr, ""), 0}}},
		{"limit override 1", req(0, withLimit(descriptor("nope", "y"), 1, typev3.RateLimitUnit_MINUTE)), ok, []wantStatus{{ok, lim(1, mn, ""), 0}}},
		{"limit override 2", req(0, withLimit(descriptor("nope", "y"), 1, typev3.RateLimitUnit_MINUTE)), over, []wantStatus{{over, lim(1, mn, ""), 0}}},
		{"unknown domain: nothing applies", &rlsv3.RateLimitRequest{Domain: "nowhere", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "1.2.3.4")}}, ok,
			[]wantStatus{{ok, nil, 0}}},
		{"second file, own domain", &rlsv3.RateLimitRequest{Domain: "other", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "1.2.3.4")}}, ok,
			[]wantStatus{{ok, lim(1, day, ""), 0}}},
	}
	for _, st := range steps {
		checkResponse(t, st.name, ts.should(t, st.req), st.overall, st.want)
	}

	t.Run("window extension is unit × multiplier", func(t *testing.T) {
		resp := ts.should(t, req(0, descriptor("window", "w")))
		cl := resp.GetStatuses()[0].GetCurrentLimit()
		if cl.GetUnit() != sec || cl.GetUnitMultiplier().GetValue() != 90 || cl.GetRequestsPerUnit() != 4 {
			t.Errorf("current_limit = %v, want 4 per 90 × SECOND", cl)
		}
	})
	t.Run("duration_until_reset counts down with the clock", func(t *testing.T) {
		r1 := ts.should(t, req(0, descriptor("remote_address", "5.5.5.5"))).GetStatuses()[0].GetDurationUntilReset().AsDuration()
		ts.clock.Advance(10 * time.Minute)
		r2 := ts.should(t, req(0, descriptor("remote_address", "5.5.5.5"))).GetStatuses()[0].GetDurationUntilReset().AsDuration()
		if r1 != time.Hour || r2 != 50*time.Minute {
			t.Errorf("duration_until_reset = %v then %v (10 min later), want 1h0m0s then 50m0s (epoch-aligned hour window)", r1, r2)
		}
	})
}

// TestInvalidArgument: malformed requests are InvalidArgument over gRPC and
// 400 with a clear body over HTTP.
func TestInvalidArgument(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), nil)
	tests := []struct {
		name     string
		req      *rlsv3.RateLimitRequest
		json     string
		wantText string
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("a", "b")}},
			`{"descriptors":[{"entries":[{"key":"a","value":"b"}]}]}`, "domain: empty"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "edge"}, `{"domain":"edge"}`, "descriptors: none given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ts.client.ShouldRateLimit(context.Background(), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("gRPC error = %v, want InvalidArgument containing %q", err, tt.wantText)
			}
			for _, path := range []string{"/json", "/v1/check"} {
				code, body := post(t, ts.base+path, tt.json)
				if code != http.StatusBadRequest || !strings.Contains(body, tt.wantText) {
					t.Errorf("POST %s = %d %s, want 400 containing %q", path, code, body, tt.wantText)
				}
			}
		})
	}
	// Envoy's descriptors without entries or with an empty key are OK over
	// gRPC and /json, as envoyproxy/ratelimit answers them; /v1/check, Sluice's
	// own API, still refuses them.
	for _, tt := range []struct {
		name, json, wantText string
		req                  *rlsv3.RateLimitRequest
	}{
		{"descriptor without entries", `{"domain":"edge","descriptors":[{}]}`, "descriptors[0].entries: none given",
			&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}},
		{"empty key", `{"domain":"edge","descriptors":[{"entries":[{"key":"","value":"b"}]}]}`, "descriptors[0].entries[0].key: empty",
			&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("", "b")}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := ts.client.ShouldRateLimit(context.Background(), tt.req)
			if err != nil || resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
				t.Errorf("gRPC = %v, %v; want OK", resp, err)
			}
			if code, body := post(t, ts.base+"/json", tt.json); code != http.StatusOK {
				t.Errorf("POST /json = %d %s, want 200", code, body)
			}
			if code, body := post(t, ts.base+"/v1/check", tt.json); code != http.StatusBadRequest || !strings.Contains(body, tt.wantText) {
				t.Errorf("POST /v1/check = %d %s, want 400 containing %q", code, body, tt.wantText)
			}
		})
	}
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading body: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// TestHTTP: /json speaks envoy's protojson with 200/429; /v1/check speaks
// Sluice's JSON; health, readiness, metrics and rules are served.
func TestHTTP(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), func(c *serveConfig) { c.Listen.ResponseHeaders = true })
	envoyReq := `{"domain":"edge","descriptors":[{"entries":[{"key":"tenant","value":"acme"},{"key":"user","value":"http"}]}]}`
	wantCodes := []int{200, 200, 429}
	for i, want := range wantCodes {
		code, body := post(t, ts.base+"/json", envoyReq)
		if code != want {
			t.Fatalf("POST /json #%d = %d %s, want %d", i+1, code, body, want)
		}
		var got struct {
			OverallCode string `json:"overallCode"`
			Statuses    []struct {
				Code           string `json:"code"`
				LimitRemaining uint32 `json:"limitRemaining"`
				CurrentLimit   struct {
					Name            string `json:"name"`
					RequestsPerUnit uint32 `json:"requestsPerUnit"`
					Unit            string `json:"unit"`
				} `json:"currentLimit"`
			} `json:"statuses"`
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("POST /json body %s: %v", body, err)
		}
		wantOverall := map[int]string{200: "OK", 429: "OVER_LIMIT"}[want]
		if got.OverallCode != wantOverall || len(got.Statuses) != 1 || got.Statuses[0].CurrentLimit.Name != "per_user" ||
			got.Statuses[0].CurrentLimit.Unit != "HOUR" || got.Statuses[0].LimitRemaining != uint32(max(1-i, 0)) {
			t.Errorf("POST /json #%d body = %s, want overallCode %s, per_user 2/HOUR, remaining %d", i+1, body, wantOverall, max(1-i, 0))
		}
	}

	checkReq := `{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"8.8.8.8"}]},{"entries":[{"key":"ldap","value":"x"}]}],"hits":3}`
	resp, err := http.Post(ts.base+"/v1/check", "application/json", strings.NewReader(checkReq))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /v1/check = %d %s, want 200", resp.StatusCode, body)
	}
	var cr struct {
		Allowed  bool
		Code     string
		Statuses []struct {
			Code      string
			Rule      string
			Remaining int64
			Unlimited bool
			Limit     *struct {
				RequestsPerUnit uint32 `json:"requests_per_unit"`
				Unit            string
				WindowMs        int64 `json:"window_ms"`
				Algorithm       string
			}
		}
	}
	if err := json.Unmarshal(body, &cr); err != nil {
		t.Fatalf("/v1/check body %s: %v", body, err)
	}
	if !cr.Allowed || cr.Code != "OK" || len(cr.Statuses) != 2 || cr.Statuses[0].Rule != "remote_address" || cr.Statuses[0].Remaining != 0 ||
		cr.Statuses[0].Limit == nil || cr.Statuses[0].Limit.WindowMs != 3600000 || cr.Statuses[0].Limit.Algorithm != "fixed_window" || !cr.Statuses[1].Unlimited {
		t.Errorf("/v1/check body = %s, want allowed, remote_address 3/hour fixed_window with 0 remaining, then unlimited", body)
	}
	if got := resp.Header.Get("RateLimit"); got != `"remote_address";r=0;t=3600` {
		t.Errorf("RateLimit header = %q, want %q", got, `"remote_address";r=0;t=3600`)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"remote_address";q=3;w=3600` {
		t.Errorf("RateLimit-Policy header = %q, want %q", got, `"remote_address";q=3;w=3600`)
	}

	for _, tt := range []struct {
		path, want string
		code       int
	}{
		{"/healthz", "ok", 200},
		{"/readyz", "ready", 200},
		{"/healthcheck", "ready", 200},
		{"/metrics", `sluice_decisions_total{domain="edge"`, 200},
		{"/debug/rules", "no endpoint", 404}, // no admin tokens: on the debug listener only
		{"/debug/pprof/", "no endpoint", 404},
		{"/nope", "no endpoint", 404},
	} {
		code, body := get(t, ts.base+tt.path)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("GET %s = %d %.200q, want %d containing %q", tt.path, code, body, tt.code, tt.want)
		}
	}
	if code, body := get(t, "http://"+ts.debugLn.Addr().String()+"/debug/rules"); code != 200 || !strings.Contains(body, `"id":"tenant=acme.user"`) {
		t.Errorf("debug listener GET /debug/rules = %d %.200q, want 200 listing tenant=acme.user", code, body)
	}
	code, index := get(t, "http://"+ts.debugLn.Addr().String()+"/debug/pprof/")
	if code != 200 || !strings.Contains(index, "goroutine") {
		t.Errorf("debug listener GET /debug/pprof/ = %d, want 200 with the profile index", code)
	}

	stream, err := reflectionpb.NewServerReflectionClient(ts.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	lr, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	_ = stream.CloseSend()
	var services []string
	for _, svc := range lr.GetListServicesResponse().GetService() {
		services = append(services, svc.GetName())
	}
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !slices.Contains(services, want) {
			t.Errorf("reflection lists %v, want %s among them", services, want)
		}
	}

	hc := healthpb.NewHealthClient(ts.conn)
	for _, svc := range []string{"", "envoy.service.ratelimit.v3.RateLimitService"} {
		hr, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("grpc health %q = %v, %v, want SERVING", svc, hr.GetStatus(), err)
		}
	}
}

// TestResponseHeadersOverGRPC: with --response-headers, an over-limit answer
// carries RateLimit, RateLimit-Policy and Retry-After.
func TestResponseHeadersOverGRPC(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), func(c *serveConfig) { c.Listen.ResponseHeaders = true })
	req := &rlsv3.RateLimitRequest{Domain: "edge", HitsAddend: 3, Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("remote_address", "4.4.4.4")}}
	ts.should(t, req)
	ts.clock.Advance(20 * time.Minute)
	resp := ts.should(t, req)
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	want := map[string]string{
		"RateLimit-Policy": `"remote_address";q=3;w=3600`,
		"RateLimit":        `"remote_address";r=0;t=2400`,
		"Retry-After":      "2400",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (all: %v)", k, got[k], v, got)
		}
	}
}

// eventually polls cond until it holds, failing after a minute (a loaded
// machine is slow, not wrong).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHotReload writes, replaces and breaks rule files under a running
// server: good changes take effect, a bad one keeps the last good rules and
// is reported on /debug/rules and in metrics, and a fix recovers.
func TestHotReload(t *testing.T) {
	t.Parallel() // its own server and processes; it mostly waits for them
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		// Write then rename, as editors and ConfigMaps do, so the watcher
		// never reads half a file.
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	rule := func(rpu int) string {
		return "domain: hot\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + itoa(rpu) + "\n"
	}
	write("hot.yaml", rule(5))
	// Removals are applied at once here; the guard that holds them is
	// TestGuardedReload's.
	ts := startServer(t, dir, func(c *serveConfig) { c.Rules.Guard.AllowRemoval = true })
	limitOf := func(domain string) uint32 {
		resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*ratelimitv3.RateLimitDescriptor{withLook(descriptor("k", "v"))}})
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limitOf("hot"); got != 5 {
		t.Fatalf("initial limit = %d, want 5", got)
	}

	write("hot.yaml", rule(7))
	eventually(t, "the replaced file to take effect (limit 7)", func() bool { return limitOf("hot") == 7 })

	write("new.yaml", strings.ReplaceAll(rule(9), "domain: hot", "domain: fresh"))
	eventually(t, "a new file to take effect", func() bool { return limitOf("fresh") == 9 })

	write("hot.yaml", "domain: hot\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n")
	eventually(t, "the broken file to be reported on /debug/rules", func() bool {
		_, body := get(t, "http://"+ts.debugLn.Addr().String()+"/debug/rules")
		return strings.Contains(body, "hot.yaml:5") && strings.Contains(body, "unit")
	})
	if got := limitOf("hot"); got != 7 {
		t.Errorf("after a bad reload, limit = %d, want the last good 7", got)
	}
	if _, body := get(t, ts.base+"/metrics"); !strings.Contains(body, `sluice_rule_reloads_total{result="failure"}`) {
		t.Errorf("/metrics has no failed reload counted")
	}

	write("hot.yaml", rule(11))
	eventually(t, "the fixed file to take effect", func() bool { return limitOf("hot") == 11 })
	if _, body := get(t, ts.base+"/debug/rules"); strings.Contains(body, "reload_error") {
		t.Errorf("/debug/rules still reports a reload error after a good reload: %s", body)
	}

	if err := os.Remove(filepath.Join(dir, "new.yaml")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a removed file's domain to disappear", func() bool {
		resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "fresh", Descriptors: []*ratelimitv3.RateLimitDescriptor{withLook(descriptor("k", "v"))}})
		return resp.GetStatuses()[0].GetCurrentLimit() == nil
	})
}

// TestHotReloadConfigMapSwap replaces the rules the way a Kubernetes
// ConfigMap volume does: the files are symlinks through "..data", which is
// atomically re-pointed at a new directory.
func TestHotReloadConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name string, rpu int) {
		t.Helper()
		v := filepath.Join(dir, name)
		if err := os.Mkdir(v, 0o755); err != nil {
			t.Fatal(err)
		}
		body := "domain: cm\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + itoa(rpu) + "\n"
		if err := os.WriteFile(filepath.Join(v, "cm.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_01_01_v1", 3)
	if err := os.Symlink("..data/cm.yaml", filepath.Join(dir, "cm.yaml")); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, dir, nil)
	limitOf := func() uint32 {
		resp := ts.should(t, &rlsv3.RateLimitRequest{Domain: "cm", Descriptors: []*ratelimitv3.RateLimitDescriptor{withLook(descriptor("k", "v"))}})
		return resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
	}
	if got := limitOf(); got != 3 {
		t.Fatalf("initial limit = %d, want 3", got)
	}
	version("..2026_01_01_v2", 4)
	eventually(t, "the ConfigMap swap to take effect (limit 4)", func() bool { return limitOf() == 4 })
}

func withLook(d *ratelimitv3.RateLimitDescriptor) *ratelimitv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(0)
	return d
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// TestGracefulShutdown: a call in flight when shutdown starts completes;
// afterwards readiness is gone and run returns nil.
func TestGracefulShutdown(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), nil)
	// Warm the connection, then shut down while calls keep coming.
	ts.should(t, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("ldap", "x")}})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				_, err := ts.client.ShouldRateLimit(context.Background(),
					&rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor("ldap", "x")}})
				if err != nil {
					// After shutdown, new calls fail with Unavailable; never
					// with anything else.
					if status.Code(err) != codes.Unavailable {
						errs <- err
					}
					return
				}
			}
		}()
	}
	ts.stop() // fails the test if run does not return nil
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("call during shutdown failed with %v, want success or Unavailable", err)
	}
	if _, err := http.Get(ts.base + "/healthz"); err == nil {
		t.Errorf("HTTP still accepting after shutdown")
	}
}

// TestCheckCommand runs `sluice check` against a running server.
func TestCheckCommand(t *testing.T) {
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/envoy"), nil)
	var out bytes.Buffer
	args := []string{"check", "--addr", ts.grpcAddr(), "--domain", "edge", "tenant=acme", "user=cli", "--hits", "2"}
	if err := run(context.Background(), args, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatalf("sluice check: %v", err)
	}
	want := "OK\n  descriptor 0: OK  limit 2 per hour (per_user)  remaining 0  reset in 1h0m0s\n"
	if out.String() != want {
		t.Errorf("sluice check printed %q, want %q", out.String(), want)
	}
	out.Reset()
	if err := run(context.Background(), args, func(string) string { return "" }, &out, io.Discard); err != nil {
		t.Fatalf("sluice check: %v", err)
	}
	if !strings.HasPrefix(out.String(), "OVER_LIMIT\n") {
		t.Errorf("second sluice check printed %q, want OVER_LIMIT first", out.String())
	}
	err := run(context.Background(), []string{"check", "--addr", ts.grpcAddr(), "--domain", "", "k=v"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil {
		t.Errorf("sluice check without a domain: no error")
	}
}
