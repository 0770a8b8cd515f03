package main

// The fleet test: three `sluice serve --store redis` processes with default
// flags on one redis-server, every core kept busy by spinning processes,
// and 100 concurrent gRPC clients on one key: for every algorithm the fleet
// admits exactly the limit. This is the scenario of issue 12, where a
// per-process breaker tripped by queueing delay switched the limiter off.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
)

// Fleet test sizes: each algorithm's key gets fleetCalls checks from
// fleetClients goroutines against a limit of fleetLimit per day.
const (
	fleetLimit   = 300
	fleetCalls   = 1500 // 5 × the limit: most checks are denials, under overload
	fleetClients = 100
	// The concurrency limit checked by in-flight count (with releases).
	fleetInFlight = 20
)

// sluiceBin is this command, built once per test binary (each build links
// it anew, seconds of CPU, most of a minute on a loaded machine).
var sluiceBin = proctest.Binary{Pkg: ".", Name: "sluice"}

// TestMain runs up to four parallel tests per CPU (go test's default is
// one; an explicit -parallel wins): the parallel tests mostly wait for their
// servers, Redis and PostgreSQL processes, timeouts and breakers, so the
// waits overlap. The tests that load the machine on purpose
// (TestFleetUnderLoad) or set the package's variables stay serial and run
// alone, before the parallel ones.
func TestMain(m *testing.M) {
	proctest.RaiseParallel(4)
	code := m.Run()
	sluiceBin.Remove()
	proctest.Exit(code)
}

// buildSluice returns the path of this command's binary; every test that
// runs it runs its own processes of the one binary.
func buildSluice(t *testing.T) string {
	t.Helper()
	return sluiceBin.Path(t)
}

// mustFreeAddr returns a loopback address that is free now.
func mustFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// fleetServer is one `sluice serve` process.
type fleetServer struct {
	grpc, http string
	cmd        *exec.Cmd
	out        *syncBuffer
	conn       *grpc.ClientConn
	client     rlsv3.RateLimitServiceClient
}

// startFleetServer starts `sluice serve` with default flags but for the
// store, the rules and its own listen addresses, and waits until /readyz
// says ready.
func startFleetServer(t *testing.T, bin, rules, redisURL string) *fleetServer {
	t.Helper()
	s := &fleetServer{grpc: mustFreeAddr(t), http: mustFreeAddr(t), out: &syncBuffer{}}
	s.cmd = exec.Command(bin, "serve", "--store", "redis", "--redis-url", redisURL, "--rules", rules,
		"--grpc-addr", s.grpc, "--http-addr", s.http, "--debug-addr", "off")
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.Env = append(os.Environ(), "GOMAXPROCS=") // the default
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start sluice serve: %v", err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("sluice serve %s log:\n%s", s.grpc, s.out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice serve on %s not ready after 30s (%v); log:\n%s", s.http, err, s.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	var err error
	s.conn, err = grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	s.client = rlsv3.NewRateLimitServiceClient(s.conn)
	return s
}

// fleetRules writes one rule per algorithm (key = the algorithm's name,
// fleetLimit a day) and one concurrency rule of fleetInFlight.
func fleetRules(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("domain: fleet\ndescriptors:\n")
	for _, a := range stack.Algorithms() {
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: day, requests_per_unit: %d, algorithm: %s}\n", a, fleetLimit, a)
	}
	fmt.Fprintf(&b, "  - key: inflight\n    rate_limit: {unit: minute, requests_per_unit: %d, algorithm: concurrency}\n", fleetInFlight)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fleet.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestFleetUnderLoad: admitted equals the limit for every algorithm, with
// three servers, default flags, busy cores and 100 concurrent clients.
func TestFleetUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three servers; skipped with -short")
	}
	rd := redistest.Start(t)
	bin := buildSluice(t)
	rules := fleetRules(t)
	var fleet []*fleetServer
	for range 3 {
		fleet = append(fleet, startFleetServer(t, bin, rules, rd.URL()))
	}
	spin(t, runtime.NumCPU())

	for _, a := range stack.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			var admitted, denied atomic.Int64
			var next atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for c := range fleetClients {
				srv := fleet[c%len(fleet)]
				wg.Go(func() {
					for next.Add(1) <= fleetCalls {
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						resp, err := srv.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "fleet",
							Descriptors: []*ratelimitv3.RateLimitDescriptor{descriptor(a.String(), "one-key")}})
						cancel()
						if err != nil {
							t.Errorf("client %d: ShouldRateLimit: %v", c, err)
							return
						}
						switch resp.GetOverallCode() {
						case rlsv3.RateLimitResponse_OK:
							admitted.Add(1)
						case rlsv3.RateLimitResponse_OVER_LIMIT:
							denied.Add(1)
						default:
							t.Errorf("client %d: overall code %v", c, resp.GetOverallCode())
						}
					}
				})
			}
			wg.Wait()
			t.Logf("%s: %d admitted, %d denied of %d in %v", a, admitted.Load(), denied.Load(), fleetCalls, time.Since(start).Round(time.Millisecond))
			if admitted.Load() != fleetLimit || admitted.Load()+denied.Load() != fleetCalls {
				t.Errorf("%s: the fleet admitted %d and denied %d of %d checks, want exactly %d admitted", a, admitted.Load(), denied.Load(), fleetCalls, fleetLimit)
			}
		})
	}

	t.Run("concurrency in flight", func(t *testing.T) {
		var inFlight, most, admitted atomic.Int64
		var next atomic.Int64
		var wg sync.WaitGroup
		body := `{"domain":"fleet","descriptors":[{"entries":[{"key":"inflight","value":"one-key"}]}]}`
		for c := range fleetClients {
			srv := fleet[c%len(fleet)]
			wg.Go(func() {
				for next.Add(1) <= fleetCalls {
					var r struct {
						Allowed  bool
						Statuses []struct{ Lease uint64 }
					}
					if err := postJSON("http://"+srv.http+"/v1/check", body, &r); err != nil || len(r.Statuses) != 1 {
						t.Errorf("client %d: /v1/check: %v %+v", c, err, r)
						return
					}
					if !r.Allowed {
						continue
					}
					admitted.Add(1)
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Millisecond) // the work the slot guards
					inFlight.Add(-1)
					rel := strings.TrimSuffix(body, "}") + fmt.Sprintf(`,"leases":[%d]}`, r.Statuses[0].Lease)
					if err := postJSON("http://"+srv.http+"/v1/release", rel, nil); err != nil {
						t.Errorf("client %d: /v1/release: %v", c, err)
						return
					}
				}
			})
		}
		wg.Wait()
		t.Logf("concurrency: %d admitted of %d, at most %d in flight", admitted.Load(), fleetCalls, most.Load())
		if most.Load() > fleetInFlight {
			t.Errorf("%d held at once, want at most %d", most.Load(), fleetInFlight)
		}
		if admitted.Load() < fleetInFlight {
			t.Errorf("only %d admitted of %d checks, want at least %d (slots are released)", admitted.Load(), fleetCalls, fleetInFlight)
		}
	})

	// No check was decided by a failure mode.
	for _, s := range fleet {
		resp, err := http.Get("http://" + s.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(line, "sluice_store_errors_total") || (strings.HasPrefix(line, "sluice_") && strings.Contains(line, `"failed_`)) {
				if !strings.HasSuffix(line, " 0") {
					t.Errorf("server %s: %s, want none", s.grpc, line)
				}
			}
		}
	}
}

// spin starts n processes that keep a core busy each (as `stress --cpu n`
// would) until the test ends.
func spin(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a busy process: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

// postJSON posts body and decodes a 2xx answer into out (if not nil).
func postJSON(url, body string, out any) error {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("%s: %d %s", url, resp.StatusCode, b.String())
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
