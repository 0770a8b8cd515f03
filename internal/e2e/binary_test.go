// Package e2e holds end-to-end tests that build and run the sluice binary
// itself, as a user would: `sluice serve` with no flags but free ports, then
// `sluice check` and the HTTP API against it, then SIGTERM.
package e2e

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
)

// repoRoot is the module root, relative to this package.
const repoRoot = "../.."

// sluiceBin is ./cmd/sluice, built once per test binary (a build on a
// loaded machine takes most of a minute).
var sluiceBin = proctest.Binary{Pkg: "./cmd/sluice", Dir: repoRoot}

func TestMain(m *testing.M) {
	code := m.Run()
	sluiceBin.Remove()
	proctest.Exit(code)
}

// build returns the path of the sluice binary.
func build(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	return sluiceBin.Path(t)
}

var servingLine = regexp.MustCompile(`msg="sluice serving" grpc=(\S+) http=(\S+)`)

// TestServeCheckSIGTERM is the README's quick start, on free ports: serve
// with the example rules and the memory store, ask it with `sluice check`
// and over HTTP, then SIGTERM: it drains and exits 0.
func TestServeCheckSIGTERM(t *testing.T) {
	bin := build(t)
	serve := exec.Command(bin, "serve", "--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "")
	serve.Dir = repoRoot // the default --rules is examples/rules, relative to the repo
	grpcAddr, httpAddr, lines, exited := startServe(t, serve)

	out, err := exec.Command(bin, "check", "--addr", grpcAddr, "--domain", "edge", "remote_address=1.2.3.4").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "OK\n") || !strings.Contains(string(out), "limit 10 per second") {
		t.Errorf("sluice check = %v\n%s\nwant OK with the example's 10 per second", err, out)
	}
	out, err = exec.Command(bin, "check", "--addr", grpcAddr, "--domain", "edge", "remote_address=50.0.0.5").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "OVER_LIMIT\n") {
		t.Errorf("sluice check of the blocked address = %v\n%s\nwant OVER_LIMIT", err, out)
	}
	resp, err := http.Post("http://"+httpAddr+"/v1/check", "application/json",
		strings.NewReader(`{"domain":"edge","descriptors":[{"entries":[{"key":"ldap","value":"x"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"unlimited":true`) {
		t.Errorf("POST /v1/check = %d %s, want 200 unlimited", resp.StatusCode, body)
	}

	if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain so the reader goroutine can finish
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if errors.As(err, &ee) || err != nil {
			t.Errorf("serve after SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(time.Minute): // a hang guard, not a bound
		t.Fatalf("serve did not exit within a minute of SIGTERM")
	}
}

// startServe starts serve (a `sluice serve` command listening on free
// ports) and waits until it logs the addresses it serves on; lines then
// carries the rest of its log (drained by the caller, or dropped when
// full), exited its exit once the log has ended. The process is killed at
// cleanup if it is still running.
func startServe(t *testing.T, serve *exec.Cmd) (grpcAddr, httpAddr string, lines <-chan string, exited <-chan error) {
	t.Helper()
	stderr, err := serve.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	ex := make(chan error, 1)
	ls := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			select {
			case ls <- sc.Text():
			default:
			}
		}
		close(ls)
		ex <- serve.Wait()
	}()
	t.Cleanup(func() {
		if serve.ProcessState == nil {
			_ = serve.Process.Kill()
		}
	})
	deadline := time.After(time.Minute) // a poll deadline, not a bound
	var logged []string
	for grpcAddr == "" {
		select {
		case l, ok := <-ls:
			if !ok {
				t.Fatalf("serve exited before serving; log:\n%s", strings.Join(logged, "\n"))
			}
			logged = append(logged, l)
			if m := servingLine.FindStringSubmatch(l); m != nil {
				grpcAddr, httpAddr = m[1], m[2]
			}
		case <-deadline:
			t.Fatalf("serve did not log its addresses within a minute; log:\n%s", strings.Join(logged, "\n"))
		}
	}
	return grpcAddr, httpAddr, ls, ex
}

// TestServeBadConfig: bad flags and environment exit non-zero with every
// problem named, without starting.
func TestServeBadConfig(t *testing.T) {
	bin := build(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--store", "etcd", "--rules", "no/such/dir")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "SLUICE_LOG_FORMAT=xml")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("serve with a bad config: %v, want exit status 1\n%s", err, out)
	}
	for _, want := range []string{"--store", "--rules", "--log-format"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output %q does not name %s", out, want)
		}
	}
	out, err = exec.CommandContext(ctx, bin, "serve", "--expected-replicas", "x").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Errorf("serve with a malformed flag: %v, want exit status 2 (usage)\n%s", err, out)
	}
}
