package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// TestSampledWarn: one line per period, the next one saying how many were
// held back.
func TestSampledWarn(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	w := &sampledWarn{log: slog.New(slog.NewTextHandler(&buf, nil)), period: 10 * time.Second, now: func() time.Time { return now }}
	steps := []struct {
		advance time.Duration
		lines   int
	}{{0, 1}, {time.Second, 1}, {time.Second, 1}, {8 * time.Second, 2}, {time.Second, 2}, {10 * time.Second, 3}}
	for i, s := range steps {
		now = now.Add(s.advance)
		w.warn("request failed")
		if got := strings.Count(buf.String(), "request failed"); got != s.lines {
			t.Fatalf("step %d: %d lines, want %d:\n%s", i, got, s.lines, buf.String())
		}
	}
	if !strings.Contains(buf.String(), "suppressed_since_last=2") || !strings.Contains(buf.String(), "suppressed_since_last=1") {
		t.Errorf("want the held-back counts 2 then 1 in the log:\n%s", buf.String())
	}
}

// TestProxyRLSUnreachable: `sluice proxy --rls` says at start that the
// service cannot be reached and what it does meanwhile, warns about failed
// requests a line per period rather than a line per request, reports it on
// /readyz, and says so again when the service comes up.
func TestProxyRLSUnreachable(t *testing.T) {
	t.Parallel() // its own proxies and upstreams; it mostly waits for them
	for _, mode := range []string{"open", "closed"} {
		t.Run(mode, func(t *testing.T) { testProxyRLS(t, mode) })
	}
}

func testProxyRLS(t *testing.T, mode string) {
	// A port with nothing on it yet: the service comes up there later.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rlsAddr := l.Addr().String()
	l.Close()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "upstream") }))
	defer upstream.Close()

	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"proxy", "--upstream", upstream.URL, "--rls", rlsAddr, "--domain", "edge",
			"--listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0", "--failure-mode", mode},
			func(string) string { return "" }, io.Discard, logs)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("proxy: %v", err)
		}
	}()
	proxyAddr := waitLog(t, logs, done, `msg="proxy listening" addr=(\S+)`)
	metricsAddr := waitLog(t, logs, done, `msg="metrics listening" .*addr=(\S+)`)
	if n := strings.Count(logs.String(), "rate limit service unreachable"); n != 1 {
		t.Fatalf("%d start-up lines saying the service is unreachable, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "failure_mode="+mode) {
		t.Errorf("the start-up line does not name failure_mode=%s:\n%s", mode, logs.String())
	}

	const requests = 30
	wantStatus := map[string]int{"open": 200, "closed": 503}[mode]
	for i := range requests {
		resp, err := http.Get("http://" + proxyAddr + "/x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != wantStatus {
			t.Fatalf("request %d: status %d, want %d (failure mode %s)", i, resp.StatusCode, wantStatus, mode)
		}
	}
	if n := strings.Count(logs.String(), `msg="request failed"`); n < 1 || n >= requests {
		t.Errorf("%d warnings for %d failed requests: want at least one, and far fewer than one each", n, requests)
	}
	code, body := readyz(t, metricsAddr)
	if wantCode := map[string]int{"open": 200, "closed": 503}[mode]; code != wantCode || body["rls"] != "unreachable" || body["failure_mode"] != mode {
		t.Errorf("/readyz = %d %v, want %d with rls unreachable, failure_mode %s", code, body, wantCode, mode)
	}

	// The service comes up: one line says so, and /readyz follows.
	l, err = net.Listen("tcp", rlsAddr)
	if err != nil {
		t.Skipf("the port was taken meanwhile: %v", err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(l)
	defer srv.Stop()
	waitLog(t, logs, done, `(msg="rate limit service reachable")`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, body = readyz(t, metricsAddr)
		if code == 200 && body["rls"] == "reachable" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %v after the service came up, want 200 reachable", code, body)
		}
	}
}

func readyz(t *testing.T, addr string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("/readyz body: %v", err)
	}
	return resp.StatusCode, body
}

// waitLog polls logs until re matches (returning its first group), failing
// if the proxy exits or nothing matches within a generous deadline.
func waitLog(t *testing.T, logs *syncBuffer, done chan error, re string) string {
	t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if m := rx.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("proxy exited (%v) before logging %s:\n%s", err, re, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line matching %s within 60s:\n%s", re, logs.String())
		}
	}
}
