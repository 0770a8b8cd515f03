package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluice-rl/sluice/store/stack"
)

// topologyRefresh is how often the store asks a cluster which master owns
// each slot (and a Sentinel client which master it uses), to key breakers
// by node. The client follows MOVED redirects by itself; this table only
// says whose breaker a call counts against, so a few seconds of lag after a
// resharding or failover only blames the wrong breaker meanwhile.
const topologyRefresh = 2 * time.Second

// slotTable maps each cluster slot to the node owning it.
type slotTable [numSlots]*node

// nodes holds the store's breakers: one per node.
type nodes struct {
	opts BreakerOptions

	mu     sync.Mutex
	byAddr map[string]*node

	single *node                     // single node, Sentinel
	slots  atomic.Pointer[slotTable] // cluster
}

// get returns the node named addr, creating it.
func (ns *nodes) get(addr string) *node {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if n, ok := ns.byAddr[addr]; ok {
		return n
	}
	n := newNode(addr, ns.opts)
	if ns.byAddr == nil {
		ns.byAddr = map[string]*node{}
	}
	ns.byAddr[addr] = n
	return n
}

// nodeFor returns the node owning slot (cluster) or the single node; a
// slot no master owns counts against a node named "unknown".
func (s *Store) nodeFor(slot int) *node {
	if !s.cluster {
		return s.nodes.single
	}
	if t := s.nodes.slots.Load(); t != nil {
		if n := t[slot]; n != nil {
			return n
		}
	}
	return s.nodes.get("unknown")
}

// Health implements stack.HealthReporter: the breaker of each node the
// store sends calls to, sorted by address. With a single node or Sentinel it
// is one entry; with a Cluster, one per master owning slots now.
func (s *Store) Health() []stack.NodeHealth {
	if !s.cluster {
		return []stack.NodeHealth{s.nodes.single.health()}
	}
	var all []*node
	if t := s.nodes.slots.Load(); t != nil {
		seen := map[*node]bool{}
		for _, n := range t {
			if n != nil && !seen[n] {
				seen[n] = true
				all = append(all, n)
			}
		}
	}
	out := make([]stack.NodeHealth, len(all))
	for i, n := range all {
		out[i] = n.health()
	}
	slices.SortFunc(out, func(a, b stack.NodeHealth) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// initNodes sets up the breakers after the client connected: for a
// cluster, the slot table, read synchronously so that New fails when no
// node can say who owns what.
func (s *Store) initNodes(addr string) error {
	if !s.cluster {
		if a := s.sentinelMaster(); a != "" {
			addr = a
		}
		s.nodes.single = newNode(addr, s.nodes.opts)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, time.Second))
	defer cancel()
	return s.refreshSlots(ctx)
}

// watchTopology refreshes the slot table (or the Sentinel master's name)
// every topologyRefresh until the store closes.
func (s *Store) watchTopology() {
	t := time.NewTicker(topologyRefresh)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if !s.cluster {
			if a := s.sentinelMaster(); a != "" {
				s.nodes.single.addr.Store(&a)
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), max(s.timeout, time.Second))
		_ = s.refreshSlots(ctx) // keep the old table; the next tick tries again
		cancel()
	}
}

// sentinelMaster returns the master a Sentinel client talks to, or "".
func (s *Store) sentinelMaster() string {
	if s.client.Mode() != rueidis.ClientModeSentinel {
		return ""
	}
	for a := range s.client.Nodes() {
		return a
	}
	return ""
}

// refreshSlots asks the cluster's nodes, one at a time (those with a closed
// breaker first), for CLUSTER SLOTS until one answers, and installs the
// table.
func (s *Store) refreshSlots(ctx context.Context) error {
	clients := s.client.Nodes()
	addrs := make([]string, 0, len(clients))
	for a := range clients {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	slices.SortStableFunc(addrs, func(a, b string) int {
		return boolInt(s.nodeOpen(a)) - boolInt(s.nodeOpen(b))
	})
	var errs []error
	for _, a := range addrs {
		c := clients[a]
		cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		vals, err := c.Do(cctx, c.B().ClusterSlots().Build()).ToArray()
		cancel()
		if err == nil {
			var t *slotTable
			if t, err = s.parseSlots(vals, a); err == nil {
				s.nodes.slots.Store(t)
				return nil
			}
		}
		errs = append(errs, fmt.Errorf("%s: %w", a, err))
		if ctx.Err() != nil {
			break
		}
	}
	return fmt.Errorf("redis: CLUSTER SLOTS: %w", errors.Join(errs...))
}

func (s *Store) nodeOpen(addr string) bool {
	s.nodes.mu.Lock()
	n := s.nodes.byAddr[addr]
	s.nodes.mu.Unlock()
	return n != nil && n.open()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parseSlots reads a CLUSTER SLOTS reply, given by the node at from: entries
// of start, end, then the master as [host, port, …] (an empty host means
// from's host).
func (s *Store) parseSlots(vals []rueidis.RedisMessage, from string) (*slotTable, error) {
	fromHost, _, _ := net.SplitHostPort(from)
	t := new(slotTable)
	for _, v := range vals {
		e, err := v.ToArray()
		if err != nil || len(e) < 3 {
			return nil, fmt.Errorf("bad CLUSTER SLOTS entry: %v", err)
		}
		lo, err1 := e[0].AsInt64()
		hi, err2 := e[1].AsInt64()
		m, err3 := e[2].ToArray()
		if err := errors.Join(err1, err2, err3); err != nil || len(m) < 2 || lo < 0 || hi >= numSlots || lo > hi {
			return nil, fmt.Errorf("bad CLUSTER SLOTS entry %d-%d: %v", lo, hi, err)
		}
		host, err := m[0].ToString()
		if err != nil {
			return nil, fmt.Errorf("bad CLUSTER SLOTS host: %w", err)
		}
		if host == "" || host == "?" {
			host = fromHost
		}
		port, err := m[1].AsInt64()
		if err != nil {
			return nil, fmt.Errorf("bad CLUSTER SLOTS port: %w", err)
		}
		n := s.nodes.get(net.JoinHostPort(host, strconv.FormatInt(port, 10)))
		for sl := lo; sl <= hi; sl++ {
			t[sl] = n
		}
	}
	return t, nil
}
