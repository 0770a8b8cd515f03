package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// ErrEvictionPolicy is wrapped by the error of New when a node's
// maxmemory-policy can evict Sluice's keys and Options.AllowEviction is
// not set. Every policy but noeviction can: the allkeys-* policies evict
// any key, and the volatile-* policies any key with a TTL, which every key
// Sluice writes has. An evicted counter starts again from zero, so its
// limit admits more than its quota, and nothing in Redis says so.
var ErrEvictionPolicy = errors.New("redis: maxmemory-policy can evict Sluice's keys")

// PolicyNoEviction is the only maxmemory-policy that never evicts a key:
// with it, a Redis whose memory is full refuses writes ("OOM command not
// allowed"), so a script call fails and each limit's failure mode
// decides, instead of a counter vanishing.
const PolicyNoEviction = "noeviction"

// Evicts reports whether the maxmemory-policy policy can evict Sluice's
// keys: every policy but noeviction ("" means unknown: false).
func Evicts(policy string) bool { return policy != "" && policy != PolicyNoEviction }

// NodeMemory is what one Redis node says about its memory and evictions.
type NodeMemory struct {
	// Node is the node's host:port.
	Node string
	// Policy is its maxmemory-policy (CONFIG GET, or INFO memory where
	// CONFIG is refused); "" when neither answered.
	Policy string
	// MaxMemory is its maxmemory in bytes (0: no limit); -1 unknown.
	MaxMemory int64
	// UsedMemory is its used_memory in bytes; -1 unknown.
	UsedMemory int64
	// EvictedKeys is its INFO stats evicted_keys: the keys it evicted,
	// any keys (not only Sluice's), since it started or since CONFIG
	// RESETSTAT; -1 unknown.
	EvictedKeys int64
	// Err says why something is unknown (nil when all is known).
	Err error
}

// Memory asks every node the store knows (the server; with Sentinel the
// master; with Cluster every master and replica) for its maxmemory-policy,
// memory and evicted_keys, each within the store's timeout (at least 1s),
// and returns one NodeMemory per node, sorted by address. A node that does
// not answer, or refuses CONFIG and INFO (a managed Redis may), is
// reported with Err set and the unknown fields at their unknown values.
func (s *Store) Memory(ctx context.Context) []NodeMemory {
	clients := s.client.Nodes()
	out := make([]NodeMemory, 0, len(clients))
	for addr, c := range clients {
		out = append(out, readMemory(ctx, addr, c, max(s.timeout, time.Second)))
	}
	slices.SortFunc(out, func(a, b NodeMemory) int { return strings.Compare(a.Node, b.Node) })
	return out
}

// readMemory reads one node: CONFIG GET maxmemory-policy, INFO memory and
// INFO stats, in one round trip.
func readMemory(ctx context.Context, addr string, c rueidis.Client, timeout time.Duration) NodeMemory {
	m := NodeMemory{Node: addr, MaxMemory: -1, UsedMemory: -1, EvictedKeys: -1}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := c.DoMulti(ctx,
		c.B().ConfigGet().Parameter("maxmemory-policy").Build(),
		c.B().Info().Section("memory").Build(),
		c.B().Info().Section("stats").Build())
	var errs []error
	cfg, cfgErr := res[0].AsStrMap()
	if cfgErr == nil {
		m.Policy = cfg["maxmemory-policy"]
	}
	mem, memErr := res[1].ToString()
	if memErr == nil {
		f := infoFields(mem)
		if m.Policy == "" {
			m.Policy = f["maxmemory_policy"]
		}
		m.MaxMemory = infoInt(f, "maxmemory")
		m.UsedMemory = infoInt(f, "used_memory")
	} else {
		errs = append(errs, fmt.Errorf("INFO memory: %w", memErr))
	}
	if stats, err := res[2].ToString(); err == nil {
		m.EvictedKeys = infoInt(infoFields(stats), "evicted_keys")
	} else if memErr == nil || err.Error() != memErr.Error() {
		errs = append(errs, fmt.Errorf("INFO stats: %w", err))
	}
	if m.Policy == "" {
		if cfgErr != nil {
			errs = append([]error{fmt.Errorf("CONFIG GET maxmemory-policy: %w", cfgErr)}, errs...)
		} else {
			errs = append(errs, errors.New("neither CONFIG GET nor INFO memory gave maxmemory-policy"))
		}
	}
	m.Err = errors.Join(errs...)
	return m
}

// infoFields parses an INFO reply's name:value lines.
func infoFields(info string) map[string]string {
	f := map[string]string{}
	for line := range strings.Lines(info) {
		line = strings.TrimRight(line, "\r\n")
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(k, "#") {
			f[k] = v
		}
	}
	return f
}

// infoInt returns field name of f as an integer, -1 when absent or bad.
func infoInt(f map[string]string, name string) int64 {
	v, err := strconv.ParseInt(f[name], 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// checkNodes is New's look at every node: it fails (ErrEvictionPolicy)
// when a node's policy evicts and allowEviction is not set, and returns
// what the caller should be warned about: policies it could not read, an
// eviction accepted by allowEviction, and, on a Cluster, nodes with
// cluster-require-full-coverage yes (or that would not say).
func (s *Store) checkNodes(ctx context.Context, allowEviction bool) ([]string, error) {
	var warnings []string
	byPolicy := map[string][]string{}
	var unknown []string
	var unknownErr error
	for _, m := range s.Memory(ctx) {
		switch {
		case Evicts(m.Policy):
			byPolicy[m.Policy] = append(byPolicy[m.Policy], m.Node)
		case m.Policy == "":
			unknown = append(unknown, m.Node)
			if unknownErr == nil {
				unknownErr = m.Err
			}
		}
	}
	policies := make([]string, 0, len(byPolicy))
	for p := range byPolicy {
		policies = append(policies, p)
	}
	slices.Sort(policies)
	for _, p := range policies {
		nodes := strings.Join(byPolicy[p], ", ")
		if !allowEviction {
			return nil, fmt.Errorf("%w: node %s has maxmemory-policy %s, which evicts keys once memory is full (every Sluice key has a TTL, so volatile-* policies evict them too), "+
				"and a limit whose counter is evicted admits more than its quota: set maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in redis.conf so that a restart keeps it; "+
				"on a managed Redis, in its parameter group or configuration), or accept the risk with Options.AllowEviction", ErrEvictionPolicy, nodes, p)
		}
		warnings = append(warnings, fmt.Sprintf("Redis node %s has maxmemory-policy %s, accepted by AllowEviction: once its memory is full it evicts keys, Sluice's counters among them, and their limits admit more than their quota; watch evicted_keys (docs/operations.md)", nodes, p))
	}
	if len(unknown) > 0 {
		warnings = append(warnings, fmt.Sprintf("cannot read maxmemory-policy of Redis node %s (%v): make sure it is noeviction (on a managed Redis, in its parameter group or configuration); any other policy evicts Sluice's keys once memory is full, and their limits then admit more than their quota", strings.Join(unknown, ", "), unknownErr))
	}
	if s.cluster {
		warnings = append(warnings, s.checkCoverage(ctx)...)
	}
	return warnings, nil
}

// checkCoverage reads cluster-require-full-coverage on every node and
// returns the warnings for yes, and for nodes that would not say.
func (s *Store) checkCoverage(ctx context.Context) []string {
	var yes, unknown []string
	var unknownErr error
	for addr, c := range s.client.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, max(s.timeout, time.Second))
		m, err := c.Do(cctx, c.B().ConfigGet().Parameter("cluster-require-full-coverage").Build()).AsStrMap()
		cancel()
		v := m["cluster-require-full-coverage"]
		switch {
		case err == nil && v == "yes":
			yes = append(yes, addr)
		case err == nil && v == "no":
		default:
			unknown = append(unknown, addr)
			if unknownErr == nil {
				unknownErr = err
				if err == nil {
					unknownErr = fmt.Errorf("answered %q", v)
				}
			}
		}
	}
	slices.Sort(yes)
	slices.Sort(unknown)
	var out []string
	const consequence = "while a master is down, until its replica takes over (cluster-node-timeout, then the election), every master refuses every command (CLUSTERDOWN), so every limit is decided by its failure mode, not only those of the failed master's slots"
	if len(yes) > 0 {
		out = append(out, fmt.Sprintf("Redis Cluster node %s has cluster-require-full-coverage yes: %s; set it to no (CONFIG SET cluster-require-full-coverage no, and in redis.conf; docs/operations.md)", strings.Join(yes, ", "), consequence))
	}
	if len(unknown) > 0 {
		out = append(out, fmt.Sprintf("cannot read cluster-require-full-coverage of Redis Cluster node %s (%v): make sure it is no; with yes, %s", strings.Join(unknown, ", "), unknownErr, consequence))
	}
	return out
}

// Warnings returns what New found that its caller should log once: node
// policies it could not read (CONFIG and INFO refused), an evicting policy
// accepted by Options.AllowEviction, and on a Cluster the nodes with
// cluster-require-full-coverage yes. Nil when there is nothing to say.
func (s *Store) Warnings() []string { return slices.Clone(s.warnings) }
