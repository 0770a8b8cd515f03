package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"
)

// countSpec is a run of a fixed number of requests, for counting the
// server's instructions (scripts/instr.sh): warmup requests, then a pause in
// which before runs, then exactly requests requests, then after. No request
// is in flight while before or after runs, so a counter a hook zeroes and
// dumps (callgrind_control -z, -d) sees the measured requests and nothing
// of the warm-up.
type countSpec struct {
	warmup, requests int
	before, after    string        // shell commands; "" runs nothing
	wait             time.Duration // how long the server may take to answer health
}

// driveCount drives spec.addr as countSpec says, with the callers and
// connections of spec.
func driveCount(ctx context.Context, spec loadSpec, cs countSpec, stdout io.Writer) error {
	if err := waitHealthyFor(ctx, spec.addr, cs.wait); err != nil {
		return fmt.Errorf("bench: %s: %w", spec.addr, err)
	}
	conns, call, err := dial(spec)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// Every connection answers once before the warm-up.
	for _, c := range conns {
		if _, err := call(ctx, c, 0); err != nil {
			return fmt.Errorf("bench: first call to %s: %w", spec.addr, err)
		}
	}
	callAt := func(ctx context.Context, w, i int) (bool, error) { return call(ctx, conns[w%len(conns)], i) }
	return countCalls(ctx, spec.concurrency, len(conns), callAt, cs, stdout)
}

// countCalls runs cs's phases with callers concurrent callers: call(ctx,
// w, i) sends request i from caller w and reports whether it was over the
// limit. conns is only printed.
func countCalls(ctx context.Context, callers, conns int, call func(ctx context.Context, w, i int) (bool, error), cs countSpec, stdout io.Writer) error {
	// phase sends n requests from callers callers and returns when
	// every one has been answered.
	var next atomic.Int64
	phase := func(n int) (errs int64, over int64, first error) {
		var (
			wg       sync.WaitGroup
			left     atomic.Int64
			nerr     atomic.Int64
			nover    atomic.Int64
			errMu    sync.Mutex
			firstErr error
		)
		left.Store(int64(n))
		for w := range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for left.Add(-1) >= 0 && ctx.Err() == nil {
					isOver, err := call(ctx, w, int(next.Add(1)))
					if err != nil {
						nerr.Add(1)
						errMu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						errMu.Unlock()
					} else if isOver {
						nover.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		return nerr.Load(), nover.Load(), firstErr
	}
	hook := func(cmd string) error {
		if cmd == "" {
			return nil
		}
		c := exec.CommandContext(ctx, "sh", "-c", cmd)
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		if err := c.Run(); err != nil {
			return fmt.Errorf("bench: %q: %w", cmd, err)
		}
		return nil
	}
	if errs, _, err := phase(cs.warmup); errs > 0 {
		return fmt.Errorf("bench: warm-up: %d of %d calls failed: %w", errs, cs.warmup, err)
	}
	if err := hook(cs.before); err != nil {
		return err
	}
	start := time.Now()
	errs, over, err := phase(cs.requests)
	elapsed := time.Since(start)
	if err := hook(cs.after); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errs > 0 {
		return fmt.Errorf("bench: %d of %d measured calls failed: %w", errs, cs.requests, err)
	}
	fmt.Fprintf(stdout, "requests %d  warmup %d  over-limit %d  callers %d  conns %d  elapsed %v\n",
		cs.requests, cs.warmup, over, callers, conns, elapsed.Round(time.Millisecond))
	return nil
}
