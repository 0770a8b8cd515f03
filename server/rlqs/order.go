package rlqs

import (
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// The order of a bucket's entries.
//
// A BucketId is a map: its keys have no order, but a rule's descriptors are
// nested, so a descriptor's entries do. A bucket is matched in the key order
// of the rule tree: among the rules of the stream's domain whose path has
// exactly the bucket's keys (in any order), the first (by rule ID) whose
// path order makes the bucket match a rule gives the order. A bucket whose
// key set is no rule's path is matched with its keys sorted (bytewise),
// which then matches no rule: the bucket is unmatched. So a rules file may
// nest descriptors in whatever order reads best, and a bucket with the same
// keys finds the rule; two rules with the same key set in different orders
// are both reachable only by buckets whose values tell them apart.

// keyOrders indexes the key orders of one snapshot's rule paths by
// domain and key set.
type keyOrders struct {
	by map[string]map[string][][]string // domain → sorted keys joined → orders
}

func newKeyOrders(snap *rules.Snapshot) *keyOrders {
	k := &keyOrders{by: map[string]map[string][][]string{}}
	if snap == nil {
		return k
	}
	for _, r := range snap.Rules() { // sorted by domain, then ID
		order := make([]string, len(r.Path))
		for i, s := range r.Path {
			order[i] = s.Key
		}
		set := slices.Clone(order)
		slices.Sort(set)
		if len(slices.Compact(set)) != len(order) {
			continue // a path repeating a key cannot come from a map
		}
		id := strings.Join(set, "\x00")
		m := k.by[r.Domain]
		if m == nil {
			m = map[string][][]string{}
			k.by[r.Domain] = m
		}
		if !slices.ContainsFunc(m[id], func(o []string) bool { return slices.Equal(o, order) }) {
			m[id] = append(m[id], order)
		}
	}
	return k
}

// entries returns the bucket's entries in the order that matches a rule
// (see above), or in sorted key order when none does.
func (k *keyOrders) entries(e *service.Engine, domain string, m map[string]string) []rules.Entry {
	keys := sortedKeys(m)
	build := func(order []string) []rules.Entry {
		es := make([]rules.Entry, len(order))
		for i, key := range order {
			es[i] = rules.Entry{Key: key, Value: m[key]}
		}
		return es
	}
	orders := k.by[domain][strings.Join(keys, "\x00")]
	for _, o := range orders {
		es := build(o)
		if q, err := e.Quota(domain, es); err == nil && q.Rule != nil {
			return es
		}
	}
	return build(keys)
}
