package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/memory"
)

// discardWriter is a ResponseWriter that keeps nothing, so the benchmarks
// measure the middleware, not a recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

const benchRules = `
domain: bench
descriptors:
  - key: remote_address
    rate_limit: {name: per_ip, algorithm: gcra, unit: second, requests_per_unit: 1000000, burst: 1000000}
  - key: blocked
    rate_limit: {name: blocked, algorithm: gcra, unit: hour, requests_per_unit: 1}
`

func benchEngine(b *testing.B) *service.Engine {
	snap, err := rules.Parse("bench.yaml", []byte(benchRules), rules.Options{})
	if err != nil {
		b.Fatal(err)
	}
	mem := memory.New(memory.Options{})
	b.Cleanup(func() { mem.Close() })
	e, err := service.New(service.DefaultConfig(), service.StaticRules{Snapshot: snap}, mem, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// cpuTime is the process's user+system CPU time so far. On a machine shared
// with other work, CPU per op is not inflated by waiting for a core, as wall
// time per op is.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU adds cpu-ns/op to a benchmark that started at start.
func reportCPU(b *testing.B, start time.Duration) {
	if b.N > 0 {
		b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
	}
}

type fixedChecker struct{ resp service.Response }

func (f fixedChecker) Check(context.Context, service.Request) (service.Response, error) {
	return f.resp, nil
}

// BenchmarkMiddleware compares a bare handler with the same handler behind
// the middleware (in-process engine, memory store, one client-IP limit), in
// one run: the difference is the middleware's overhead per request.
func BenchmarkMiddleware(b *testing.B) {
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	e := benchEngine(b)
	allowed := mustNew(b, bare, Config{Checker: e, Domain: "bench", Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}}})
	denied := mustNew(b, bare, Config{Checker: e, Domain: "bench", Descriptors: [][]KeyFunc{{Static("blocked", "x")}}})
	run := func(name string, h http.Handler, keys int) {
		b.Run(name, func(b *testing.B) {
			reqs := make([]*http.Request, keys)
			for i := range reqs {
				reqs[i] = httptest.NewRequest("GET", "/v1/things", nil)
				reqs[i].RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1234"
			}
			w := &discardWriter{h: make(http.Header, 8)}
			b.ReportAllocs()
			i := 0
			start := cpuTime()
			for b.Loop() {
				clear(w.h)
				h.ServeHTTP(w, reqs[i%keys])
				i++
			}
			reportCPU(b, start)
		})
	}
	run("bare", bare, 1)
	b.Run("engine-only", func(b *testing.B) {
		// What the middleware asks the engine, without the middleware: the
		// rest of "allowed/1key" is the middleware's own work.
		entries := []rules.Entry{{Key: "remote_address", Value: "10.0.0.0"}}
		req := service.Request{Domain: "bench", Descriptors: []service.Descriptor{{Entries: entries}}}
		ctx := httptest.NewRequest("GET", "/", nil).Context()
		b.ReportAllocs()
		start := cpuTime()
		for b.Loop() {
			if _, err := e.Check(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		reportCPU(b, start)
	})
	// The middleware alone, with a Checker that answers at once from a
	// prepared response: what httplimit itself costs per request.
	fixed, err := e.Check(context.Background(), service.Request{Domain: "bench", Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: "remote_address", Value: "10.0.0.0"}}}}})
	if err != nil {
		b.Fatal(err)
	}
	own := mustNew(b, bare, Config{Checker: fixedChecker{fixed}, Domain: "bench", Descriptors: [][]KeyFunc{{ClientIP("remote_address", nil)}}})
	run("middleware-only", own, 1)
	run("allowed/1key", allowed, 1)
	run("allowed/10k-keys", allowed, 10_000)
	denied.ServeHTTP(&discardWriter{h: http.Header{}}, httptest.NewRequest("GET", "/", nil)) // use the one unit
	run("denied-429", denied, 1)
	b.Run("allowed/parallel", func(b *testing.B) {
		b.ReportAllocs()
		start := cpuTime()
		defer reportCPU(b, start)
		b.RunParallel(func(pb *testing.PB) {
			r := httptest.NewRequest("GET", "/v1/things", nil)
			r.RemoteAddr = "10.9.9.9:1"
			w := &discardWriter{h: make(http.Header, 8)}
			for pb.Next() {
				clear(w.h)
				allowed.ServeHTTP(w, r)
			}
		})
	})
}
