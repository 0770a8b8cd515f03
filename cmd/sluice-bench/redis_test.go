package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
)

func TestBenchRedis(t *testing.T) {
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	args := []string{"redis", "--redis-url", srv.URL(), "--duration", "300ms", "--goroutines", "8", "--keys", "100"}
	if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("run(%v) = %v; stderr %s", args, err, errOut.String())
	}
	if !strings.Contains(out.String(), "decisions/s") || !strings.Contains(out.String(), "p99") {
		t.Fatalf("output %q, want decisions/s and p99", out.String())
	}
}

// TestBenchRedisFigures runs both patterns, and the store's native fixed
// windows (--native), and checks that each prints what Redis spent: its CPU
// and every command, counted from INFO (the Redis store's script calls and
// the commands they ran; the native pipelines' TIME and INCRBY, no script;
// INCRBY and EXPIRE, one each per decision).
func TestBenchRedisFigures(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		pattern string
		native  bool
		want    []string
		notWant []string
	}{
		{pattern: "sluice", want: []string{"evalsha", "mget", "set"}},
		{pattern: "sluice", native: true, want: []string{"time", "incrby"}, notWant: []string{"evalsha", "evalsha_ro", "eval"}},
		{pattern: "incrby-expire", want: []string{"incrby", "expire"}},
	} {
		var out, errOut bytes.Buffer
		args := []string{"redis", "--redis-url", srv.URL(), "--pattern", tc.pattern, "--algorithm", "fixed_window",
			"--duration", "300ms", "--goroutines", "4", "--keys", "10", "--quota", "1000000", "--window", "1m"}
		if tc.native {
			args = append(args, "--native")
		}
		if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); err != nil {
			t.Fatalf("run(%v) = %v; stderr %s", args, err, errOut.String())
		}
		if !strings.Contains(out.String(), "redis cpu") || !strings.Contains(out.String(), "degraded 0") {
			t.Fatalf("%s: output %q, want redis cpu and degraded 0", tc.pattern, out.String())
		}
		for _, cmd := range tc.want {
			if !strings.Contains(out.String(), "\n  "+cmd+" ") {
				t.Errorf("%s (native %v): output %q, want a line for %s", tc.pattern, tc.native, out.String(), cmd)
			}
		}
		for _, cmd := range tc.notWant {
			if strings.Contains(out.String(), "\n  "+cmd+" ") {
				t.Errorf("%s (native %v): output %q, want no line for %s", tc.pattern, tc.native, out.String(), cmd)
			}
		}
		if tc.native && !strings.Contains(out.String(), "sluice (native)") {
			t.Errorf("--native: output %q, want it named sluice (native)", out.String())
		}
		if tc.pattern == "incrby-expire" && !strings.Contains(out.String(), "commands 2.0") {
			t.Errorf("incrby-expire: output %q, want 2 commands per decision", out.String())
		}
	}
}

// TestBenchRedisRefuses kills Redis during the run: the decisions after it
// fail, as a failure policy would then answer them, and the command must
// refuse to print Redis figures and fail.
func TestBenchRedisRefuses(t *testing.T) {
	srv := redistest.Start(t)
	var out, errOut bytes.Buffer
	args := []string{"redis", "--redis-url", srv.URL(), "--algorithm", "fixed_window",
		"--duration", "1s", "--goroutines", "2", "--keys", "10"}
	kill := time.AfterFunc(300*time.Millisecond, srv.Kill)
	defer kill.Stop()
	err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "not decided by Redis") && !strings.Contains(err.Error(), "no decision completed") {
		t.Fatalf("run(%v) = %v, want a refusal (decisions not decided by Redis)", args, err)
	}
	if strings.Contains(out.String(), "redis cpu") {
		t.Fatalf("output %q has Redis figures despite failed decisions", out.String())
	}
}

func TestParseInfoCounters(t *testing.T) {
	body := "# Commandstats\r\ncmdstat_get:calls=3,usec=5,usec_per_call=1.67,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_script|load:calls=2,usec=40,usec_per_call=20.00\r\n# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n"
	c, err := parseInfoCounters(body)
	if err != nil {
		t.Fatal(err)
	}
	if c.calls["get"] != 3 || c.usec["get"] != 5 || c.calls["script|load"] != 2 || c.cpu != 3.75 {
		t.Fatalf("parseInfoCounters = %+v, want get 3 calls 5 usec, script|load 2 calls, cpu 3.75", c)
	}
	if _, err := parseInfoCounters("cmdstat_get:calls=3"); err == nil {
		t.Fatal("parseInfoCounters without CPU lines succeeded, want an error")
	}
}

func TestBenchRedisUsage(t *testing.T) {
	for _, args := range [][]string{
		{"redis", "--algorithm", "nope"},
		{"redis", "--goroutines", "0"},
		{"redis", "--redis-url", "http://x"},
		{"redis", "--window", "0s"},
		{"redis", "--pattern", "nope"},
		{"redis", "--pattern", "incrby-expire", "--algorithm", "token_bucket"},
		{"redis", "--pattern", "incrby-expire", "--algorithm", "fixed_window", "--window", "1500ms"},
		{"redis", "--timeout", "0s"},
		{"redis", "--native", "--algorithm", "token_bucket"},
		{"redis", "--native", "--pattern", "incrby-expire", "--algorithm", "fixed_window"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("run(%v) = %v, want a usage error", args, err)
		}
	}
}
