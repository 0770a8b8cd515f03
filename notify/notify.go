// Package notify tells people when a budget crosses a level of its
// rule's notify_at (rules.Rule.NotifyAt): the engine reports each crossing
// it sees (service.Notifier), and a Notifier claims it in the store the
// fleet shares (stack.Claimer), so that one instance only tells it once
// per period; the winner counts it, writes it to a Log (PostgreSQL's audit
// table, or the last ones in memory), and posts it to a webhook, signed
// and retried with backoff.
//
// Nothing of it runs on the request path beyond a non-blocking send to a
// bounded queue: the claim, the log and the webhook happen on the
// Notifier's own goroutines, and what a full queue drops is counted.
package notify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/service"
	"github.com/sluice-rl/sluice/store/stack"
)

// Fired is one level told: a crossing whose claim this instance won.
type Fired struct {
	// ID identifies the firing: the same for every instance and retry
	// (a hash of domain, rule, key, level and period end), so a receiver
	// can drop a repeat.
	ID string `json:"id"`
	// Domain, Rule (the rule's ID) and Key (the request's entries,
	// "k1=v1.k2=v2") name the budget.
	Domain string `json:"domain"`
	Rule   string `json:"rule"`
	Key    string `json:"key"`
	// Level is the level crossed, in percent of Limit; Used what the
	// counter had used just after.
	Level int   `json:"level"`
	Limit int64 `json:"limit"`
	Used  int64 `json:"used"`
	// PeriodEnd is when the budget's full quota is back; FiredAt when the
	// crossing was decided.
	PeriodEnd time.Time `json:"period_end"`
	FiredAt   time.Time `json:"fired_at"`
}

// fired makes the Fired of crossing c.
func fired(c service.Crossing) Fired {
	h := sha256.New()
	for _, s := range []string{c.Domain, c.Rule, c.Key, strconv.Itoa(c.Level), strconv.FormatInt(c.PeriodEnd.UnixMilli(), 10)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return Fired{ID: hex.EncodeToString(h.Sum(nil)[:12]), Domain: c.Domain, Rule: c.Rule, Key: c.Key, Level: c.Level,
		Limit: c.Limit, Used: c.Used, PeriodEnd: c.PeriodEnd.UTC(), FiredAt: c.At.UTC()}
}

// Log keeps what fired: a PostgreSQL audit table (cmd/sluice's, over
// tenant/pg), or Memory. Safe for concurrent use.
type Log interface {
	// Add records f.
	Add(ctx context.Context, f Fired) error
	// Page returns up to limit records, newest first, older than cursor
	// (a next of an earlier page, always a positive whole number; "" for
	// the newest), and the cursor of the next page ("" when none is
	// left).
	Page(ctx context.Context, cursor string, limit int) (page []Fired, next string, err error)
}

// MaxPage is the most records one Log.Page returns.
const MaxPage = 1000

// Defaults of Options.
const (
	DefaultQueue    = 1024
	DefaultKeep     = 1000
	DefaultAttempts = 6
	DefaultTimeout  = 5 * time.Second
)

// Options configure a Notifier. Claimer is required.
type Options struct {
	// Claimer is the store the fleet shares (the engine's store stack),
	// where each crossing is claimed once per period.
	Claimer stack.Claimer
	// Log keeps what fired; nil keeps the last DefaultKeep in memory
	// (NewMemory), per instance.
	Log Log
	// Webhook, when set, is told of each firing (see Webhook).
	Webhook *Webhook
	// Queue bounds the crossings waiting to be claimed (default
	// DefaultQueue); a crossing that finds it full is dropped and counted.
	Queue int
	// Timeout bounds each claim and each Log.Add (default DefaultTimeout).
	Timeout time.Duration
	// Logger receives failures (of claims, the log, the webhook), never a
	// secret. Default: none.
	Logger *slog.Logger
}

// Notifier is a service.Notifier: it claims each crossing it hears and,
// for those it wins, counts, logs and posts them. Create it with New,
// Close it when done. Safe for concurrent use.
type Notifier struct {
	o     Options
	log   *slog.Logger
	queue chan service.Crossing
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	heard, dropped, held, claimErrors, logErrors atomic.Uint64

	mu    sync.Mutex
	fires map[Level]uint64
}

var _ service.Notifier = (*Notifier)(nil)

// Level names a level of one rule, the labels of the fired counter:
// bounded by the rule files, never a request's values.
type Level struct {
	Domain, Rule string
	Level        int
}

// New starts a Notifier (and o.Webhook's sender, which Close stops).
func New(o Options) (*Notifier, error) {
	if o.Claimer == nil {
		return nil, errors.New("notify: Options.Claimer: nil, want the store the fleet shares")
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Log == nil {
		o.Log = NewMemory(DefaultKeep)
	}
	n := &Notifier{o: o, log: o.Logger, queue: make(chan service.Crossing, o.Queue), stop: make(chan struct{}), done: make(chan struct{}),
		fires: map[Level]uint64{}}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	go n.run()
	return n, nil
}

// Crossed implements service.Notifier: it queues c, or drops and counts
// it when the queue is full. It never blocks.
func (n *Notifier) Crossed(c service.Crossing) {
	n.heard.Add(1)
	select {
	case n.queue <- c:
	default:
		n.dropped.Add(1)
	}
}

// run claims the queued crossings one by one until Close.
func (n *Notifier) run() {
	defer close(n.done)
	for {
		select {
		case <-n.stop:
			return
		case c := <-n.queue:
			n.handle(c)
		}
	}
}

// handle claims c and, when won, counts, logs and posts it.
func (n *Notifier) handle(c service.Crossing) {
	ctx, cancel := context.WithTimeout(context.Background(), n.o.Timeout)
	defer cancel()
	ttl := c.PeriodEnd.Sub(c.At)
	won, err := n.o.Claimer.Claim(ctx, c.Claim, max(ttl, time.Millisecond))
	if err != nil {
		// Not told: with the store failing, another instance may have
		// told it, and telling it twice would teach people to ignore it.
		n.claimErrors.Add(1)
		n.log.Warn("notify: claim failed; the level is not told by this instance", "domain", c.Domain, "rule", c.Rule, "level", c.Level, "err", err)
		return
	}
	if !won {
		n.held.Add(1)
		return
	}
	f := fired(c)
	n.mu.Lock()
	n.fires[Level{c.Domain, c.Rule, c.Level}]++
	n.mu.Unlock()
	if err := n.o.Log.Add(ctx, f); err != nil {
		n.logErrors.Add(1)
		n.log.Warn("notify: log of a fired level failed", "domain", c.Domain, "rule", c.Rule, "level", c.Level, "err", err)
	}
	if n.o.Webhook != nil {
		n.o.Webhook.Send(f)
	}
}

// Page returns what fired, from the Log (see Log.Page; limit is clamped
// to 1 … MaxPage).
func (n *Notifier) Page(ctx context.Context, cursor string, limit int) ([]Fired, string, error) {
	return n.o.Log.Page(ctx, cursor, min(max(limit, 1), MaxPage))
}

// Stats are a Notifier's counters since New.
type Stats struct {
	// Heard counts crossings the engine reported; Dropped those a full
	// queue refused; Held those another instance (or an earlier crossing)
	// had claimed already; ClaimErrors those whose claim failed (not
	// told); LogErrors fired levels the Log failed to keep.
	Heard, Dropped, Held, ClaimErrors, LogErrors uint64
	// Fired counts the levels this instance told, by rule and level.
	Fired map[Level]uint64
	// Webhook is the webhook's (zero without one).
	Webhook WebhookStats
}

// Stats returns the counters.
func (n *Notifier) Stats() Stats {
	s := Stats{Heard: n.heard.Load(), Dropped: n.dropped.Load(), Held: n.held.Load(), ClaimErrors: n.claimErrors.Load(),
		LogErrors: n.logErrors.Load(), Fired: map[Level]uint64{}}
	n.mu.Lock()
	for k, v := range n.fires {
		s.Fired[k] = v
	}
	n.mu.Unlock()
	if n.o.Webhook != nil {
		s.Webhook = n.o.Webhook.Stats()
	}
	return s
}

// Close stops claiming (crossings still queued are left untold) and
// stops the webhook's sender (see Webhook.Close).
func (n *Notifier) Close() error {
	n.once.Do(func() {
		close(n.stop)
		<-n.done
		if n.o.Webhook != nil {
			n.o.Webhook.Close()
		}
	})
	return nil
}

// Memory is a Log that keeps the last records in this process (without
// PostgreSQL: each instance lists what it fired itself).
type Memory struct {
	mu   sync.Mutex
	keep int
	seq  int64
	recs []memRec // oldest first, at most keep
}

type memRec struct {
	seq int64
	f   Fired
}

// NewMemory returns a Memory keeping the last keep records (at least 1).
func NewMemory(keep int) *Memory {
	return &Memory{keep: max(keep, 1)}
}

// Add implements Log.
func (m *Memory) Add(_ context.Context, f Fired) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seq++
	if len(m.recs) == m.keep {
		copy(m.recs, m.recs[1:])
		m.recs = m.recs[:len(m.recs)-1]
	}
	m.recs = append(m.recs, memRec{m.seq, f})
	return nil
}

// Page implements Log; the cursor is a sequence number.
func (m *Memory) Page(_ context.Context, cursor string, limit int) ([]Fired, string, error) {
	before, err := parseCursor(cursor)
	if err != nil {
		return nil, "", err
	}
	if before == 0 {
		before = math.MaxInt64
	}
	limit = min(max(limit, 1), MaxPage)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Fired
	last := int64(0)
	for i := len(m.recs) - 1; i >= 0; i-- {
		r := m.recs[i]
		if r.seq >= before {
			continue
		}
		if len(out) == limit {
			return out, strconv.FormatInt(last, 10), nil
		}
		out, last = append(out, r.f), r.seq
	}
	return out, "", nil
}
