package compose

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sluice-rl/sluice/store/redis"
)

// DefaultMemoryWatch is the default Config.MemoryWatch.
const DefaultMemoryWatch = 10 * time.Second

// Eviction is what the stack last read from the Redis nodes about
// eviction (see Config.MemoryWatch).
type Eviction struct {
	// Nodes are every node read since the stack connected, sorted by
	// address.
	Nodes []NodeEviction
	// Allowed: Config.Redis.AllowEviction accepted policies that evict.
	Allowed bool
	// Checked is when the nodes were last read; zero before the first
	// read (and with KindMemory).
	Checked time.Time
}

// NodeEviction is one Redis node's eviction.
type NodeEviction struct {
	// Node is the node's host:port.
	Node string
	// Policy is its maxmemory-policy at the last read; "" when it could
	// not be read (CONFIG and INFO refused, or the node did not answer).
	Policy string
	// Evicts reports whether Policy can evict Sluice's keys.
	Evicts bool
	// EvictedKeys counts the keys the node evicted (any keys, not only
	// Sluice's) since the stack first read it: the growth of its INFO
	// stats evicted_keys, with a drop (the node restarted, or CONFIG
	// RESETSTAT) counted as a new start. Evictions before the first read
	// are not counted (they are logged).
	EvictedKeys uint64
	// Known reports whether the last read of evicted_keys succeeded.
	Known bool
}

// watcher follows the Redis nodes' maxmemory-policy and evicted_keys.
type watcher struct {
	allow bool
	every time.Duration
	log   logger

	mu      sync.Mutex
	nodes   map[string]*nodeWatch
	checked time.Time
}

// logger is the part of *slog.Logger the watcher uses.
type logger interface {
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}

type nodeWatch struct {
	NodeEviction
	last    int64  // evicted_keys at the last read; -1 before the first
	alarmed string // the evicting policy last logged as an error
}

// run reads the nodes of rs every w.every until done is closed (first
// at once, unless the caller just did).
func (w *watcher) run(rs *redis.Store, done <-chan struct{}, readNow bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-done
		cancel()
	}()
	if readNow {
		w.read(ctx, rs)
	}
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		w.read(ctx, rs)
	}
}

// read reads every node once and logs what changed for the worse.
func (w *watcher) read(ctx context.Context, rs *redis.Store) {
	ms := rs.Memory(ctx)
	if ctx.Err() != nil {
		return
	}
	type entry struct {
		error bool
		msg   string
		args  []any
	}
	var logs []entry
	w.mu.Lock()
	if w.nodes == nil {
		w.nodes = map[string]*nodeWatch{}
	}
	for _, m := range ms {
		n := w.nodes[m.Node]
		if n == nil {
			n = &nodeWatch{NodeEviction: NodeEviction{Node: m.Node}, last: -1}
			w.nodes[m.Node] = n
		}
		n.Policy, n.Evicts, n.Known = m.Policy, redis.Evicts(m.Policy), m.EvictedKeys >= 0
		if v := m.EvictedKeys; v >= 0 {
			var grew int64
			switch {
			case n.last < 0:
				if v > 0 {
					logs = append(logs, entry{msg: "Redis node evicted keys before this instance watched it (since it started or its last CONFIG RESETSTAT): Sluice's counters may have been among them",
						args: []any{"node", m.Node, "evicted_keys", v, "maxmemory_policy", m.Policy}})
				}
			case v >= n.last:
				grew = v - n.last
			default: // restarted, or CONFIG RESETSTAT
				grew = v
			}
			if grew > 0 {
				n.EvictedKeys += uint64(grew)
				logs = append(logs, entry{msg: "Redis evicted keys: Sluice's counters may be among them, and a limit whose counter was evicted admits more than its quota; set maxmemory-policy noeviction (docs/operations.md)",
					args: []any{"node", m.Node, "evicted", grew, "evicted_since_start", n.EvictedKeys, "maxmemory_policy", m.Policy,
						"used_memory", m.UsedMemory, "maxmemory", m.MaxMemory}})
			}
			n.last = v
		}
		switch {
		case n.Evicts && !w.allow && n.alarmed != m.Policy:
			// New refused such a node: its policy changed since, or the
			// node is new (a failover, a resharding).
			n.alarmed = m.Policy
			logs = append(logs, entry{error: true, msg: "Redis node's maxmemory-policy now evicts Sluice's keys: once its memory is full, limits whose counters are evicted admit more than their quota; set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf)",
				args: []any{"node", m.Node, "maxmemory_policy", m.Policy}})
		case !n.Evicts:
			n.alarmed = ""
		}
	}
	w.checked = time.Now()
	w.mu.Unlock()
	for _, l := range logs {
		if l.error {
			w.log.Error(l.msg, l.args...)
		} else {
			w.log.Warn(l.msg, l.args...)
		}
	}
}

// state returns what the watcher last read.
func (w *watcher) state() Eviction {
	w.mu.Lock()
	defer w.mu.Unlock()
	e := Eviction{Allowed: w.allow, Checked: w.checked}
	for _, k := range slices.Sorted(maps.Keys(w.nodes)) {
		e.Nodes = append(e.Nodes, w.nodes[k].NodeEviction)
	}
	return e
}

// Evicted returns the keys evicted on every node since the stack began
// watching them.
func (e Eviction) Evicted() uint64 {
	var n uint64
	for _, x := range e.Nodes {
		n += x.EvictedKeys
	}
	return n
}

// Policies returns the distinct policies of the nodes, sorted, "" (not
// read) as "unknown".
func (e Eviction) Policies() []string {
	var ps []string
	for _, x := range e.Nodes {
		p := x.Policy
		if p == "" {
			p = "unknown"
		}
		if !slices.Contains(ps, p) {
			ps = append(ps, p)
		}
	}
	slices.SortFunc(ps, strings.Compare)
	return ps
}
