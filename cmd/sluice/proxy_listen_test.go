package main

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// `sluice proxy` without --listen listens on loopback only, like serve.
func TestProxyListensOnLoopbackByDefault(t *testing.T) {
	logs := &syncBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"proxy", "--upstream", "http://127.0.0.1:1", "--rules", filepath.Join(repoRoot, "examples/rules"), "--domain", "edge"},
			func(string) string { return "" }, io.Discard, logs)
	}()
	listening := regexp.MustCompile(`msg="proxy listening" addr=(\S+)`)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-done:
			// Port 8080 may be taken on this machine: the error names the
			// address it tried.
			if err == nil || !strings.Contains(err.Error(), "127.0.0.1:8080") {
				t.Fatalf("proxy exited with %v, want it listening on 127.0.0.1:8080 (or failing to)", err)
			}
			return
		case <-deadline:
			t.Fatalf("proxy did not start within 10s:\n%s", logs.String())
		case <-time.After(10 * time.Millisecond):
		}
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			if m[1] != "127.0.0.1:8080" {
				t.Errorf("proxy listens on %s by default, want 127.0.0.1:8080", m[1])
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("proxy after cancel: %v", err)
			}
			return
		}
	}
}
