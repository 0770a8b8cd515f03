package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jsonBombRSS bounds the peak resident memory of a `sluice serve` process
// (its VmHWM) that has answered bodies of 256 KiB nested brackets: the
// server at rest takes some 30 MiB; decoding one such body allocates about
// a megabyte (internal/strictjson's budget: 8 bytes per body byte). Before
// issue 28's fix, 100 KB of '[' took 22 GiB.
const jsonBombRSS = 100 << 20

// TestJSONBombs: the real binary, with its default 256 KiB body limit,
// answers 400 with the reason to bodies of 256 KiB nested brackets and
// objects, on /v1/check and /v1/release (before any authentication),
// /v1/charge and the admin API (after it),
// and its peak RSS stays under jsonBombRSS.
func TestJSONBombs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("reads the server's peak RSS from /proc: Linux only")
	}
	t.Parallel() // its own server process, whose peak RSS is measured
	const token = "rw-jsonbomb-token-0123456789"
	bin := buildSluice(t)
	s := startServe(t, bin, []string{"--rules", filepath.Join(repoRoot, "examples/rules")}, "SLUICE_ADMIN_TOKEN="+token)

	const size = defaultMaxRequestBytes
	pad := func(prefix, elem string) string {
		return prefix + strings.Repeat(elem, (size-len(prefix))/len(elem))
	}
	for _, tc := range []struct {
		name, path, body, want string
	}{
		{"brackets", "/v1/check", pad("", "["), "body: got JSON array, want an object"},
		{"objects", "/v1/check", pad("", `{"a":`), "nesting deeper than 16 levels"},
		{"brackets in a member", "/v1/check", pad(`{"domain":"edge","descriptors":[{"entries":[{"key":"k","value":`, "["), "nesting deeper than 16 levels at byte 74"},
		{"brackets in an unknown member", "/v1/release", pad(`{"x":`, "["), "nesting deeper than 16 levels"},
		{"objects", "/v1/charge", pad("", `{"a":`), "nesting deeper than 16 levels"},
		{"brackets", "/admin/v1/reset", pad("", "["), "got JSON array, want an object"},
		{"objects", "/admin/v1/reset", pad("", `{"a":`), "nesting deeper than 16 levels"},
	} {
		if len(tc.body) > size {
			t.Fatalf("%s: body of %d bytes, above the limit %d", tc.name, len(tc.body), size)
		}
		for range 3 {
			req, err := http.NewRequest("POST", "http://"+s.http+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tc.path != "/v1/check" && tc.path != "/v1/release" { // the others want a token

				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("POST %s %s: %v", tc.path, tc.name, err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 400 || !strings.Contains(string(out), tc.want) {
				t.Errorf("POST %s, 256 KiB of %s = %d %.300s, want 400 containing %q", tc.path, tc.name, resp.StatusCode, out, tc.want)
			}
		}
	}
	hwm := peakRSS(t, s.cmd.Process.Pid)
	t.Logf("sluice serve peak RSS after the bodies: %.1f MiB", float64(hwm)/(1<<20))
	if hwm > jsonBombRSS {
		t.Errorf("sluice serve peak RSS %d bytes, want at most %d", hwm, jsonBombRSS)
	}
}

// startServe starts `sluice serve` on free ports with the memory store,
// args and env added, and waits until /readyz says ready.
func startServe(t *testing.T, bin string, args []string, env ...string) *fleetServer {
	t.Helper()
	s := &fleetServer{grpc: mustFreeAddr(t), http: mustFreeAddr(t), out: &syncBuffer{}}
	s.cmd = exec.Command(bin, append([]string{"serve", "--grpc-addr", s.grpc, "--http-addr", s.http, "--debug-addr", "off"}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.Env = append(os.Environ(), env...)
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
			t.Logf("sluice serve log:\n%s", s.out.String())
		}
	})
	eventually(t, "sluice serve ready", func() bool {
		resp, err := http.Get("http://" + s.http + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return s
}

// peakRSS reads a process's peak resident set size (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("VmHWM %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}
