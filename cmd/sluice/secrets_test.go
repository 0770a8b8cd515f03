package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

// runServe starts `sluice serve args…` in process, as main would, and
// returns its HTTP and debug addresses, its log, and a stop function that
// returns run's error.
func runServeArgs(t *testing.T, args []string, envs map[string]string) (httpAddr, debugAddr string, logs *syncBuffer, stop func() error) {
	t.Helper()
	logs = &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"serve"}, args...), func(k string) string { return envs[k] }, io.Discard, logs)
	}()
	serving := regexp.MustCompile(`msg="sluice serving" grpc=\S+ http=(\S+) .*debug=(\S+)`)
	deadline := time.Now().Add(time.Minute)
	for {
		if m := serving.FindStringSubmatch(logs.String()); m != nil {
			httpAddr, debugAddr = m[1], m[2]
			break
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve exited at start: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve did not start within 10s:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	var stopped bool
	var runErr error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(15 * time.Second):
				t.Errorf("serve did not stop within 15s")
			}
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return httpAddr, debugAddr, logs, stop
}

// No secret reaches the command line served on /debug/*, any other
// endpoint, a log line or an error: serve a password-protected Redis with
// the password on the command line (and in os.Args, as the real process
// would have it), make the store fail, and look everywhere.
func TestSecretsNeverShown(t *testing.T) {
	const secret = "s3cret-Pa55word"
	rd := redistest.Start(t)
	if _, err := rd.Do("CONFIG", "SET", "requirepass", secret); err != nil {
		t.Fatalf("CONFIG SET requirepass: %v", err)
	}
	url := "redis://:" + secret + "@" + rd.Addr() + "/0?timeout=2s"
	oldArgs := os.Args
	os.Args = append(append([]string(nil), os.Args...), "--redis-url", url)
	defer func() { os.Args = oldArgs }()

	httpAddr, debugAddr, logs, stop := runServeArgs(t, []string{
		"--store", "redis", "--redis-url", url, "--log-level", "debug",
		"--rules", filepath.Join(repoRoot, "testdata/rules/failure"),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0",
	}, nil)
	if !strings.Contains(logs.String(), "holds a password") {
		t.Errorf("no warning about the password on the command line in the log:\n%s", logs.String())
	}
	var seen []string // every body the test scraped
	scrape := func(base, path string) (int, string) {
		t.Helper()
		code, body := get(t, "http://"+base+path)
		seen = append(seen, path+": "+body)
		return code, body
	}
	check := func() string {
		c, body := post(t, "http://"+httpAddr+"/v1/check", `{"domain":"failure","descriptors":[{"entries":[{"key":"open","value":"v"}]}]}`)
		seen = append(seen, "/v1/check: "+body)
		if c != 200 {
			t.Fatalf("POST /v1/check = %d %s", c, body)
		}
		return body
	}
	if body := check(); strings.Contains(body, "degraded") {
		t.Fatalf("check with the right password was not decided by Redis: %s", body)
	}
	if code, _ := scrape(debugAddr, "/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/cmdline = %d, want 404", code)
	}
	if code, _ := scrape(debugAddr, "/debug/vars"); code != http.StatusNotFound {
		t.Errorf("/debug/vars = %d, want 404 (no expvar: it would print the command line)", code)
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/goroutine?debug=2", "/metrics", "/debug/rules", "/healthz"} {
		scrape(debugAddr, p)
	}
	for _, p := range []string{"/metrics", "/readyz", "/healthcheck", "/debug/rules", "/debug/pprof/cmdline"} {
		scrape(httpAddr, p)
	}
	// Now make the store fail: no Redis at all.
	rd.Kill()
	for range 5 {
		check()
	}
	for _, p := range []string{"/readyz", "/healthcheck", "/metrics"} {
		scrape(httpAddr, p)
	}
	runErr := stop()
	everything := strings.Join(seen, "\n") + "\n" + logs.String()
	if runErr != nil {
		everything += "\n" + runErr.Error()
	}
	if strings.Contains(everything, secret) {
		for _, line := range strings.Split(everything, "\n") {
			if strings.Contains(line, secret) {
				t.Errorf("secret shown: %.300s", line)
			}
		}
	}
	if !strings.Contains(logs.String(), "level=WARN msg=\"store failed") {
		t.Errorf("no store failure logged; the test did not exercise the error paths:\n%s", logs.String())
	}
}

// A wrong password: the errors it causes (at start, on /readyz, in the
// log) do not show it.
func TestWrongPasswordNotShown(t *testing.T) {
	const wrong = "wr0ng-Pa55word"
	rd := redistest.Start(t)
	if _, err := rd.Do("CONFIG", "SET", "requirepass", "the-right-one"); err != nil {
		t.Fatalf("CONFIG SET requirepass: %v", err)
	}
	httpAddr, _, logs, stop := runServeArgs(t, []string{
		"--store", "redis", "--log-level", "debug", "--rules", filepath.Join(repoRoot, "testdata/rules/failure"),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0",
	}, map[string]string{"SLUICE_REDIS_URL": "redis://default:" + wrong + "@" + rd.Addr() + "/0?timeout=2s"})
	var seen []string
	for range 3 {
		_, body := post(t, "http://"+httpAddr+"/v1/check", `{"domain":"failure","descriptors":[{"entries":[{"key":"open","value":"v"}]}]}`)
		seen = append(seen, body)
	}
	for _, p := range []string{"/readyz", "/metrics"} {
		_, body := get(t, "http://"+httpAddr+p)
		seen = append(seen, body)
	}
	err := stop()
	all := strings.Join(seen, "\n") + logs.String()
	if err != nil {
		all += err.Error()
	}
	if strings.Contains(all, wrong) {
		t.Errorf("the wrong password is shown:\n%s", all)
	}
	if !strings.Contains(all, "WRONGPASS") && !strings.Contains(all, "unreachable") {
		t.Errorf("no authentication failure reported anywhere; the test did not exercise it:\n%s", all)
	}
}

// An error that quotes the URL (here a bad flag next to it) has the
// password scrubbed, and keeps its exit status.
func TestSecretsScrubbedFromErrors(t *testing.T) {
	const secret = "s3cret-Pa55word"
	err := run(context.Background(), []string{"serve", "--store", "redis", "--redis-url", "redis://:" + secret + "@127.0.0.1:6379/0?timeout=xyz",
		"--rules", filepath.Join(repoRoot, "examples/rules")}, func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("serve with a bad URL = %v, want an error without the password", err)
	}
	err = run(context.Background(), []string{"serve", "--redis-url", "redis://u:" + secret + "@h:1/0", "--expected-replicas", "x"},
		func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || strings.Contains(err.Error(), secret) || !errors.Is(err, errUsage) {
		t.Errorf("serve with a bad flag = %v, want a usage error without the password", err)
	}
	s := scrubber{urlSecrets("redis://user:" + secret + "@h:1/0")}
	if got := s.String("dial redis://user:" + secret + "@h:1/0: refused"); strings.Contains(got, secret) {
		t.Errorf("scrubbed = %q, still holds the secret", got)
	}
	enc := scrubber{urlSecrets("redis://:p%40ss%2Fword@h:1/0")}
	if got := enc.String("auth p@ss/word failed; url p%40ss%2Fword"); strings.Contains(got, "p@ss/word") || strings.Contains(got, "p%40ss%2Fword") {
		t.Errorf("scrubbed = %q, still holds the secret (decoded or encoded)", got)
	}
}

// The Redis URL can come from a file or the environment, off the command
// line, and then no warning is logged.
func TestRedisURLFromFileOrEnv(t *testing.T) {
	const secret = "s3cret-Pa55word"
	rd := redistest.Start(t)
	if _, err := rd.Do("CONFIG", "SET", "requirepass", secret); err != nil {
		t.Fatalf("CONFIG SET requirepass: %v", err)
	}
	url := "redis://:" + secret + "@" + rd.Addr() + "/0?timeout=2s"
	file := filepath.Join(t.TempDir(), "redis-url")
	if err := os.WriteFile(file, []byte(url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--store", "redis", "--rules", filepath.Join(repoRoot, "testdata/rules/failure"),
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0"}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"file", append([]string{"--redis-url-file", file}, base...), nil},
		{"env", base, map[string]string{"SLUICE_REDIS_URL": url}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			httpAddr, _, logs, stop := runServeArgs(t, tt.args, tt.env)
			c, body := post(t, "http://"+httpAddr+"/v1/check", `{"domain":"failure","descriptors":[{"entries":[{"key":"closed","value":"v"}]}]}`)
			if c != 200 || strings.Contains(body, "degraded") {
				t.Errorf("check = %d %s, want decided by Redis (the password was read)", c, body)
			}
			if err := stop(); err != nil {
				t.Errorf("serve: %v", err)
			}
			if strings.Contains(logs.String(), "holds a password") || strings.Contains(logs.String(), secret) {
				t.Errorf("log warns about, or shows, a password that is not on the command line:\n%s", logs.String())
			}
		})
	}
}
