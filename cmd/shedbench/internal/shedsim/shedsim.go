// Package shedsim runs package shed against a simulated backend on a
// simulated clock: a discrete-event simulation, deterministic for a seed, so
// the load-shedding experiments are tests and reproducible figures rather
// than timings of a busy machine.
//
// The backend has Workers workers and a FIFO queue without bound; each
// request needs a service time drawn uniformly from [0.8, 1.2] × Service, so
// its capacity is C = Workers / Service requests per second and latency grows
// with the queue. Clients send Poisson arrivals at Offered × C and give up
// after Timeout; the backend does not notice a client that gave up and still
// does the work (as most servers do). Goodput counts responses that reached
// their client in time.
package shedsim

import (
	"container/heap"
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sluice-rl/sluice/shed"
)

// Scenario is one simulated run.
type Scenario struct {
	// Workers is the backend's parallelism; Service its mean service time.
	Workers int
	Service time.Duration
	// StepAt, if positive, changes the number of workers to StepWorkers at
	// that time (a step change of capacity).
	StepAt      time.Duration
	StepWorkers int
	// Offered is the arrival rate as a multiple of the initial capacity.
	Offered float64
	// Mix is the share of arrivals of each class (indexed by shed.Priority;
	// normalized).
	Mix [shed.NumPriorities]float64
	// Duration of the run; Warmup is left out of the totals.
	Duration, Warmup time.Duration
	// Timeout is when a client gives up.
	Timeout time.Duration
	// Shed configures the shedder in front of the backend; nil runs without.
	Shed *shed.Config
	// Bucket is the width of the time series' buckets. Default 500ms.
	Bucket time.Duration
	// Seed of the arrivals and service times.
	Seed uint64
}

// Capacity is the backend's initial capacity in requests per second.
func (s Scenario) Capacity() float64 { return float64(s.Workers) / s.Service.Seconds() }

// Class are the outcomes of one class over a run (after the warmup).
type Class struct {
	Offered, Shed, OK, TimedOut int
}

// SuccessRatio is the share of offered requests answered in time.
func (c Class) SuccessRatio() float64 {
	if c.Offered == 0 {
		return 1
	}
	return float64(c.OK) / float64(c.Offered)
}

// Point is one bucket of the time series.
type Point struct {
	At time.Duration
	// Limit is the adaptive limit at the end of the bucket (0 without one).
	Limit int
	// Capacity is the backend's workers / service time at the end of the bucket.
	Capacity float64
	// Goodput is responses in time per second; Shed, shed per second.
	Goodput, Shed float64
	// P50 and P99 are latencies of the responses in the bucket.
	P50, P99 time.Duration
	// InFlight is the number of requests at the backend at the end of the bucket.
	InFlight int
}

// Result is what a run measured.
type Result struct {
	Classes [shed.NumPriorities]Class
	// P50, P99 of the latencies of the requests answered in time.
	P50, P99 time.Duration
	// ServerP50 is the median latency of every request the backend
	// answered, in time for its client or not.
	ServerP50 time.Duration
	// Goodput is responses in time per second.
	Goodput float64
	Series  []Point
	Stats   shed.Stats
}

// Total sums the classes.
func (r Result) Total() Class {
	var t Class
	for _, c := range r.Classes {
		t.Offered += c.Offered
		t.Shed += c.Shed
		t.OK += c.OK
		t.TimedOut += c.TimedOut
	}
	return t
}

type event struct {
	at   time.Duration
	kind int // 0 arrival, 1 completion, 2 step
	req  *request
	seq  uint64
}

type request struct {
	counted bool // arrived after the warmup
	arrive  time.Duration
	p       shed.Priority
	ticket  shed.Ticket
	service time.Duration
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	if e[i].at != e[j].at {
		return e[i].at < e[j].at
	}
	return e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

// epoch is the simulated clock's zero.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Run simulates s.
func Run(s Scenario) (Result, error) {
	if s.Bucket == 0 {
		s.Bucket = 500 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(s.Seed, s.Seed^0x5eed))
	var now time.Duration
	var sh *shed.Shedder
	if s.Shed != nil {
		var err error
		sh, err = shed.New(*s.Shed, shed.Options{Now: func() time.Time { return epoch.Add(now) }})
		if err != nil {
			return Result{}, err
		}
	}
	var mixSum float64
	for _, m := range s.Mix {
		mixSum += m
	}
	rate := s.Offered * s.Capacity() // arrivals per second
	workers := s.Workers
	busy := 0
	var queue []*request // FIFO
	var q events
	var seq uint64
	push := func(at time.Duration, kind int, r *request) {
		seq++
		heap.Push(&q, event{at: at, kind: kind, req: r, seq: seq})
	}
	nextArrival := func() time.Duration {
		return time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
	}
	push(nextArrival(), 0, nil)
	if s.StepAt > 0 {
		push(s.StepAt, 2, nil)
	}
	var res Result
	var lat, all []time.Duration
	nb := int(s.Duration/s.Bucket) + 1
	bucketLat := make([][]time.Duration, nb)
	bucketOK := make([]int, nb)
	bucketShed := make([]int, nb)
	res.Series = make([]Point, nb)
	start := func(r *request) {
		busy++
		push(now+r.service, 1, r)
	}
	ctx := context.Background()
	lastBucket := -1
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		if ev.at > s.Duration {
			break
		}
		now = ev.at
		b := int(now / s.Bucket)
		for lastBucket < b { // close the buckets before this event
			if lastBucket >= 0 {
				closeBucket(&res.Series[lastBucket], sh, float64(workers)/s.Service.Seconds(), busy+len(queue))
			}
			lastBucket++
			res.Series[lastBucket].At = time.Duration(lastBucket) * s.Bucket
		}
		counted := now >= s.Warmup
		switch ev.kind {
		case 2:
			workers = s.StepWorkers
			for busy < workers && len(queue) > 0 {
				r := queue[0]
				queue = queue[1:]
				start(r)
			}
		case 0:
			push(now+nextArrival(), 0, nil)
			r := &request{arrive: now, p: pick(rng, s.Mix, mixSum), counted: counted}
			r.service = time.Duration(float64(s.Service) * (0.8 + 0.4*rng.Float64()))
			if counted {
				res.Classes[r.p].Offered++
			}
			if sh != nil {
				t, refused := sh.Admit(ctx, r.p)
				if refused != nil {
					if counted {
						res.Classes[r.p].Shed++
					}
					bucketShed[b]++
					continue
				}
				r.ticket = t
			}
			if busy < workers {
				start(r)
			} else {
				queue = append(queue, r)
			}
		case 1:
			r := ev.req
			busy--
			for busy < workers && len(queue) > 0 {
				n := queue[0]
				queue = queue[1:]
				start(n)
			}
			l := now - r.arrive
			r.ticket.Done(ctx, shed.Succeeded)
			inTime := l <= s.Timeout
			if inTime {
				bucketOK[b]++
				bucketLat[b] = append(bucketLat[b], l)
			}
			if !r.counted {
				continue
			}
			all = append(all, l)
			if inTime {
				lat = append(lat, l)
				res.Classes[r.p].OK++
			} else {
				res.Classes[r.p].TimedOut++
			}
		}
	}
	// Requests still waiting at the end have had their time if they are
	// older than Timeout; the rest are left out (their fate is unknown).
	for _, r := range queue {
		if r.arrive >= s.Warmup && s.Duration-r.arrive > s.Timeout {
			res.Classes[r.p].TimedOut++
		}
	}
	if lastBucket >= 0 && lastBucket < nb {
		closeBucket(&res.Series[lastBucket], sh, float64(workers)/s.Service.Seconds(), busy+len(queue))
	}
	for i := range res.Series[:min(nb, lastBucket+1)] {
		p := &res.Series[i]
		p.Goodput = float64(bucketOK[i]) / s.Bucket.Seconds()
		p.Shed = float64(bucketShed[i]) / s.Bucket.Seconds()
		p.P50, p.P99 = percentile(bucketLat[i], 0.5), percentile(bucketLat[i], 0.99)
	}
	res.Series = res.Series[:min(nb, lastBucket+1)]
	res.P50, res.P99 = percentile(lat, 0.5), percentile(lat, 0.99)
	res.ServerP50 = percentile(all, 0.5)
	res.Goodput = float64(res.Total().OK) / (s.Duration - s.Warmup).Seconds()
	if sh != nil {
		res.Stats = sh.Stats()
	}
	return res, nil
}

func closeBucket(p *Point, sh *shed.Shedder, capacity float64, inflight int) {
	p.Capacity = capacity
	p.InFlight = inflight
	if sh != nil {
		if a := sh.Stats().Adaptive; a != nil {
			p.Limit = a.Limit
		}
	}
}

func pick(rng *rand.Rand, mix [shed.NumPriorities]float64, sum float64) shed.Priority {
	x := rng.Float64() * sum
	for p, m := range mix {
		if x < m {
			return shed.Priority(p)
		}
		x -= m
	}
	return shed.Default
}

// percentile returns the q-quantile of d (sorting it), 0 for none.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[max(i, 0)]
}

// Mix10 is 10% critical, 60% default, 20% sheddable and 10% test traffic.
var Mix10 = [shed.NumPriorities]float64{shed.Critical: 0.1, shed.Default: 0.6, shed.Sheddable: 0.2, shed.Test: 0.1}
