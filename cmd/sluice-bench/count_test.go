package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGRPCRequests: --requests sends exactly that many measured requests,
// after the warm-up, with --before and --after run around them.
func TestGRPCRequests(t *testing.T) {
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"baseline", "--addr", addr}, func(string) string { return "" }, &bytes.Buffer{}, &bytes.Buffer{})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("baseline: %v", err)
		}
	})
	dir := t.TempDir()
	before, after := filepath.Join(dir, "before"), filepath.Join(dir, "after")
	var out, errOut bytes.Buffer
	args := []string{"grpc", "--addr", addr, "--method", "health", "--requests", "120", "--warmup-requests", "30",
		"--concurrency", "7", "--before", "touch " + before, "--after", "touch " + after}
	if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); err != nil {
		t.Fatalf("run(%v) = %v; stderr %s", args, err, errOut.String())
	}
	if !strings.HasPrefix(out.String(), "requests 120  warmup 30 ") {
		t.Fatalf("output %q, want it to start with %q", out.String(), "requests 120  warmup 30 ")
	}
	for _, f := range []string{before, after} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("hook did not run: %v", err)
		}
	}
}

func TestGRPCRequestsUsage(t *testing.T) {
	for _, args := range [][]string{
		{"grpc", "--requests", "-1"},
		{"grpc", "--requests", "10", "--warmup-requests", "-1"},
		{"grpc", "--requests", "10", "--compare"},
	} {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, &out, &errOut); !errors.Is(err, errUsage) {
			t.Errorf("run(%v) = %v, want a usage error", args, err)
		}
	}
}
