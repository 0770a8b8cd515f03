// Package shedload is the real-time counterpart of shedsim: an HTTP backend
// of fixed capacity whose latency grows with its queue, and an open-loop load
// generator with a priority mix, for the end-to-end test and the benchmark
// command of the load shedder. Every run is bounded in time and sends
// traffic only to the URL it is given (a loopback server).
package shedload

import (
	"context"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/shed"
)

// Backend serves each request with one of Workers workers, for a service
// time drawn uniformly from [0.8, 1.2] × Service; requests beyond the
// workers wait in a FIFO queue without bound, and do not notice a client
// that gave up (as most servers do not). Its capacity is Workers / Service
// requests per second. It is safe for concurrent use.
type Backend struct {
	service time.Duration

	mu      sync.Mutex
	workers int
	busy    int
	queue   []chan struct{}
	closed  bool
	rng     *rand.Rand
}

// NewBackend returns a backend of workers workers and mean service time
// service.
func NewBackend(workers int, service time.Duration) *Backend {
	return &Backend{service: service, workers: workers, rng: rand.New(rand.NewPCG(1, 2))}
}

// SetWorkers changes the number of workers (a step change of capacity).
func (b *Backend) SetWorkers(n int) {
	b.mu.Lock()
	b.workers = n
	b.wakeLocked()
	b.mu.Unlock()
}

// Close answers every queued and later request at once with 503, so a run
// ends without waiting for the queue to drain.
func (b *Backend) Close() {
	b.mu.Lock()
	b.closed = true
	for _, ch := range b.queue {
		close(ch)
	}
	b.queue = nil
	b.mu.Unlock()
}

func (b *Backend) wakeLocked() {
	for b.busy < b.workers && len(b.queue) > 0 {
		close(b.queue[0])
		b.queue = b.queue[1:]
		b.busy++
	}
}

// ServeHTTP implements http.Handler.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	d := time.Duration(float64(b.service) * (0.8 + 0.4*b.rng.Float64()))
	if b.busy < b.workers {
		b.busy++
		b.mu.Unlock()
	} else {
		ch := make(chan struct{})
		b.queue = append(b.queue, ch)
		b.mu.Unlock()
		<-ch
		b.mu.Lock()
		closed := b.closed
		b.mu.Unlock()
		if closed {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
	}
	time.Sleep(d)
	b.mu.Lock()
	b.busy--
	b.wakeLocked()
	b.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

// Load is one open-loop run.
type Load struct {
	// URL to send GET requests to.
	URL string
	// Rate is arrivals per second (Poisson).
	Rate float64
	// Duration of the arrivals; Warmup of them are left out of the totals.
	Duration, Warmup time.Duration
	// Mix is the share of each class (indexed by shed.Priority), sent in
	// the PriorityHeader.
	Mix            [shed.NumPriorities]float64
	PriorityHeader string
	// Timeout is when a client gives up.
	Timeout time.Duration
	// Bucket is the width of the time series. Default 500ms.
	Bucket time.Duration
	// At, if set, is called once at each of the given offsets from the start
	// (for a step change of capacity).
	At map[time.Duration]func()
	// Sample, if set, is called at the end of each bucket; its value is
	// recorded in Point.Limit.
	Sample func() int
	Seed   uint64
}

// Class are the outcomes of one class.
type Class struct{ Offered, OK, Shed, Other, TimedOut int }

// SuccessRatio is the share of offered requests answered 200 in time.
func (c Class) SuccessRatio() float64 {
	if c.Offered == 0 {
		return 1
	}
	return float64(c.OK) / float64(c.Offered)
}

// Point is one bucket of the time series (by arrival time).
type Point struct {
	At            time.Duration
	Goodput, Shed float64 // per second
	P50, P99      time.Duration
	Limit         int
}

// Result is what a run measured.
type Result struct {
	Classes  [shed.NumPriorities]Class
	P50, P99 time.Duration // of the requests answered 200 in time
	Goodput  float64       // 200s in time per second, after the warmup
	Series   []Point
}

type outcome struct {
	at      time.Duration
	p       shed.Priority
	code    int
	latency time.Duration
	timeout bool
}

// Run sends the load and waits for every answer (or timeout).
func Run(ctx context.Context, l Load, client *http.Client) Result {
	if l.Bucket == 0 {
		l.Bucket = 500 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(l.Seed, l.Seed^0x10ad))
	var sum float64
	for _, m := range l.Mix {
		sum += m
	}
	var mu sync.Mutex
	var outs []outcome
	var wg sync.WaitGroup
	nb := int(l.Duration/l.Bucket) + 1
	limits := make([]int, nb)
	start := time.Now()
	var sampleWG sync.WaitGroup
	sctx, stopSample := context.WithCancel(ctx)
	sampleWG.Go(func() {
		t := time.NewTicker(l.Bucket)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if l.Sample != nil && i < nb {
					limits[i] = l.Sample()
				}
			}
		}
	})
	for at, f := range l.At {
		time.AfterFunc(at, f)
	}
	next := time.Duration(0)
	for next < l.Duration && ctx.Err() == nil {
		if d := time.Until(start.Add(next)); d > 0 {
			time.Sleep(d)
		}
		x := rng.Float64() * sum
		p := shed.Default
		for q, m := range l.Mix {
			if x < m {
				p = shed.Priority(q)
				break
			}
			x -= m
		}
		at := next
		wg.Go(func() {
			o := outcome{at: at, p: p}
			rctx, cancel := context.WithTimeout(ctx, l.Timeout)
			defer cancel()
			req, _ := http.NewRequestWithContext(rctx, "GET", l.URL, nil)
			req.Header.Set(l.PriorityHeader, p.String())
			t0 := time.Now()
			resp, err := client.Do(req)
			o.latency = time.Since(t0)
			if err != nil {
				o.timeout = rctx.Err() != nil
			} else {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				o.code = resp.StatusCode
			}
			mu.Lock()
			outs = append(outs, o)
			mu.Unlock()
		})
		next += time.Duration(rng.ExpFloat64() / l.Rate * float64(time.Second))
	}
	wg.Wait()
	stopSample()
	sampleWG.Wait()
	return summarize(l, outs, limits)
}

func summarize(l Load, outs []outcome, limits []int) Result {
	var res Result
	nb := len(limits)
	okLat := make([][]time.Duration, nb)
	shedN := make([]int, nb)
	var all []time.Duration
	for _, o := range outs {
		b := min(int(o.at/l.Bucket), nb-1)
		ok := o.code == http.StatusOK && o.latency <= l.Timeout
		if ok {
			okLat[b] = append(okLat[b], o.latency)
		}
		if o.code == http.StatusServiceUnavailable {
			shedN[b]++
		}
		if o.at < l.Warmup {
			continue
		}
		c := &res.Classes[o.p]
		c.Offered++
		switch {
		case ok:
			c.OK++
			all = append(all, o.latency)
		case o.timeout:
			c.TimedOut++
		case o.code == http.StatusServiceUnavailable:
			c.Shed++
		default:
			c.Other++
		}
	}
	for i := range nb {
		res.Series = append(res.Series, Point{
			At: time.Duration(i) * l.Bucket, Goodput: float64(len(okLat[i])) / l.Bucket.Seconds(),
			Shed: float64(shedN[i]) / l.Bucket.Seconds(), P50: Percentile(okLat[i], 0.5), P99: Percentile(okLat[i], 0.99),
			Limit: limits[i],
		})
	}
	res.P50, res.P99 = Percentile(all, 0.5), Percentile(all, 0.99)
	res.Goodput = float64(len(all)) / (l.Duration - l.Warmup).Seconds()
	return res
}

// Percentile returns the q-quantile of d (sorting it); 0 for none.
func Percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[max(int(math.Ceil(q*float64(len(d))))-1, 0)]
}

// Client returns an HTTP client for a run: enough idle connections for the
// load, so connection setup is not what is measured.
func Client() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 2000, MaxIdleConnsPerHost: 2000, IdleConnTimeout: 30 * time.Second}}
}
