package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/store/compose"
	"github.com/sluice-rl/sluice/store/memory"
)

// runBenchMemory measures what the memory store's key cap costs in RSS:
// it fills a store of --max-keys keys with mid-window counters (keys shaped
// like the engine's, --key-bytes long), then keeps inserting new keys for
// --churn × the cap (every insert evicts), as a flood would, and prints the
// peak RSS of the process (VmHWM), the RSS at the end, the Go heap, and the
// bytes per key. Run it in a fresh process: VmHWM is the process's peak.
func runBenchMemory(ctx context.Context, args []string, _ env, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("memory", flag.ContinueOnError)
	fs.SetOutput(stderr)
	maxKeys := fs.Int("max-keys", memory.DefaultMaxKeys, "the store's key cap (sluice serve --memory-max-keys)")
	keyBytes := fs.Int("key-bytes", 90, "length of each key (an engine key is about 60 bytes plus the descriptor's entries)")
	churn := fs.Float64("churn", 1, "new keys inserted after the fill, as a multiple of the cap")
	alg := fs.String("algorithm", "fixed_window", "algorithm of the limit (state size differs; sliding_log and concurrency add 24 bytes per logged hit)")
	if done, err := parseFlags(fs, args); done || err != nil {
		return err
	}
	a, err := sluice.ParseAlgorithm(*alg)
	if err != nil {
		return fmt.Errorf("%w: --algorithm: %w", errUsage, err)
	}
	if *maxKeys < 1 || *keyBytes < 24 || *churn < 0 {
		return fmt.Errorf("%w: --max-keys ≥ 1, --key-bytes ≥ 24, --churn ≥ 0", errUsage)
	}
	before := readRSS()
	// The stack `sluice serve --store memory` builds (store/compose): the
	// memory store alone.
	c := compose.DefaultConfig()
	c.Memory = memory.Options{MaxKeys: *maxKeys}
	st, err := compose.New(c)
	if err != nil {
		return fmt.Errorf("bench-memory: %w", err)
	}
	defer st.Close()
	limit := sluice.Limit{Algorithm: a, Quota: 1000, Window: time.Hour} // mid-window all run long
	ops := make([]sluice.Op, 1)
	res := make([]sluice.Result, 1)
	key := make([]byte, 0, *keyBytes)
	total := *maxKeys + int(float64(*maxKeys)**churn)
	start := time.Now()
	for i := range total {
		if i%65536 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		key = benchKey(key[:0], i, *keyBytes)
		ops[0] = sluice.Op{Key: string(key), Limit: limit, Cost: 1}
		if err := st.Take(ctx, ops, res); err != nil {
			return fmt.Errorf("bench-memory: %w", err)
		}
	}
	took := time.Since(start)
	after := readRSS()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	runtime.GC()
	var live runtime.MemStats
	runtime.ReadMemStats(&live)
	s := st.Memory().Stats()
	fmt.Fprintf(stdout, "keys %d (cap %d), %d-byte keys, %s, %d inserts in %v (%d evictions)\n",
		s.Keys, *maxKeys, *keyBytes, a, total, took.Round(time.Millisecond), s.Evictions)
	fmt.Fprintf(stdout, "RSS before %s, at the end %s, peak (VmHWM) %s\n", mib(before.rss), mib(after.rss), mib(after.hwm))
	fmt.Fprintf(stdout, "Go heap: in use %s at the end, %s live after a GC, %s obtained from the OS\n", mib(ms.HeapInuse), mib(live.HeapInuse), mib(ms.Sys))
	fmt.Fprintf(stdout, "bytes per key: peak RSS %d, live heap %d\n",
		(after.hwm-before.rss)/uint64(max(s.Keys, 1)), live.HeapInuse/uint64(max(s.Keys, 1)))
	return nil
}

// benchKey appends a key of n bytes, unique for i, shaped like the engine's.
func benchKey(b []byte, i, n int) []byte {
	b = append(b, "{edge|remote_address="...)
	b = strconv.AppendInt(b, int64(i), 16)
	b = append(b, "}|r:remote_address|fixed_window:1000:3600000000|remote_address="...)
	b = strconv.AppendInt(b, int64(i), 16)
	for len(b) < n {
		b = append(b, 'x')
	}
	return b[:n:n]
}

type rss struct{ rss, hwm uint64 }

// readRSS reads VmRSS and VmHWM from /proc/self/status (zero elsewhere).
func readRSS() rss {
	var r rss
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return r
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			r.rss = kb << 10
		case "VmHWM":
			r.hwm = kb << 10
		}
	}
	return r
}

func mib(b uint64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
