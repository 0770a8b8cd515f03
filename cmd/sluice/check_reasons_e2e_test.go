package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/server/api"
)

// TestCheckCommandReasons: with --url, sluice check prints every status's
// reason and degraded mode (Redis killed under a fail-open and a
// fail-closed rule, one request of three descriptors given with -d and
// --descriptor), and --output json prints the API's answer.
func TestCheckCommandReasons(t *testing.T) {
	rd := redistest.Start(t)
	ts := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), withRedis(rd.URL(), func(c *serveConfig) {
		c.Store.Redis.Timeout = time.Second
	}))
	check := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		getenv := func(k string) string {
			if k == "SLUICE_CHECK_URL" {
				return ts.base
			}
			return ""
		}
		if err := run(context.Background(), append([]string{"check"}, args...), getenv, &out, &errOut); err != nil {
			t.Fatalf("sluice check %q: %v\n%s", args, err, errOut.String())
		}
		return out.String()
	}
	got := check("--domain", "failure", "open=v", "-d", "closed=v", "--descriptor", "nothing=v,more=w")
	for _, want := range []string{"OK\n", "descriptor 0: OK  rule open", "descriptor 1: OK  rule closed", "descriptor 2: OK  no rule matched"} {
		if !strings.Contains(got, want) {
			t.Errorf("before the kill: sluice check printed\n%s\nwant a line with %q", got, want)
		}
	}
	rd.Kill()
	got = check("--domain", "failure", "open=v", "-d", "closed=v", "--descriptor", "nothing=v,more=w")
	for _, want := range []string{
		"OVER_LIMIT  reason unavailable\n",
		"descriptor 0: OK  rule open  limit 2 per hour  degraded failed_open\n",
		"descriptor 1: OVER_LIMIT  rule closed  limit 2 per hour  reason unavailable  degraded failed_closed\n",
		"descriptor 2: OK  no rule matched\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Redis down: sluice check printed\n%s\nwant the line %q", got, want)
		}
	}
	var cr api.CheckResponse
	js := check("--domain", "failure", "-d", "closed=v", "--output", "json")
	if err := json.Unmarshal([]byte(js), &cr); err != nil || len(cr.Statuses) != 1 || cr.Statuses[0].Degraded != "failed_closed" || cr.Reason != "unavailable" {
		t.Errorf("--output json printed %s (%v), want the API's answer: one status, degraded failed_closed, reason unavailable", js, err)
	}
	// Over gRPC, several descriptors and JSON too.
	js = check("--url", "", "--addr", ts.grpcAddr(), "--domain", "failure", "-d", "open=v", "-d", "nothing=v", "--output", "json")
	if !strings.Contains(js, `"overallCode":"OK"`) || strings.Count(js, `"code":"OK"`) != 2 {
		t.Errorf("gRPC --output json printed %s, want overall OK and two statuses", js)
	}
	if err := run(context.Background(), []string{"check", "--domain", "d", "-d", "novalue"}, func(string) string { return "" }, io.Discard, io.Discard); err == nil {
		t.Error("-d novalue: no error, want one asking for key=value")
	}
}
