package rules

import (
	"math"
	"slices"
	"strings"
)

// wildSet holds the wildcard values of one key at one level, compiled so
// that matching a value costs time in proportion to the value's length,
// not to the number of patterns.
//
// A pattern splits at its '*'s into a literal prefix, the literal middles
// and a literal suffix: "/api/*/v*/action" is prefix "/api/", middles
// ["v"], suffix "/action". The prefixes form a radix tree walked along the
// value from its first byte; each node where some prefix ends holds a
// radix tree of those patterns' suffixes, walked from the value's last
// byte. A pattern without middles (envoyproxy/ratelimit's "foo*", and
// "*.example.com", "a*z") matches exactly when both walks reach its nodes
// without the prefix and suffix overlapping, so a node keeps only the first
// such pattern in file order that ends there (a pattern with an empty
// suffix, "foo*", at its prefix node, with no suffix tree to walk).
// Patterns with middles (two or more
// '*' around a literal) are kept, in file order, at the suffix node that
// ends their suffix and are checked one by one there: only those sharing
// both the prefix and the suffix of the value are looked at.
//
// The first pattern in file order that matches wins, as with a scan of
// the patterns in file order.
type wildSet struct {
	pats []*mnode // in file order: the index is a pattern's order
	root wnode    // the prefix tree
}

// noMatch is the order of no pattern.
const noMatch = math.MaxInt32

// wnode is a node of a prefix tree (label read forward) or of a suffix
// tree (label holds the suffix's bytes from the last one back).
type wnode struct {
	label string
	first []byte   // sorted; first[i] == kids[i].label[0]
	kids  []*wnode // in the order of first
	// tab, when the first bytes of the labels are close together (digits,
	// letters), indexes the children by first byte - base.
	tab  []*wnode
	base byte
	// best is the first pattern in file order that ends here without
	// more to check: in the prefix tree, a pattern "P*" (nothing after its
	// one '*'); in the suffix tree, a pattern "P*S" without middles.
	best int32
	// sfx (prefix tree) holds the suffixes of the other patterns whose
	// prefix ends here.
	sfx *wnode
	// multi (suffix tree) holds the patterns with middles whose suffix
	// ends here, in file order.
	multi []wmulti
}

// wmulti is a pattern with literal middles.
type wmulti struct {
	order int32
	mids  []string
}

// newWildSet compiles nodes' patterns, in file order; each holds a '*'
// (the parser makes a value without one MatchExact).
func newWildSet(nodes []*mnode) *wildSet {
	w := &wildSet{pats: nodes, root: wnode{best: noMatch}}
	for i, n := range nodes {
		segs := strings.Split(n.pattern, "*")
		prefix, suffix := segs[0], segs[len(segs)-1]
		var mids []string
		if len(segs) > 2 {
			for _, m := range segs[1 : len(segs)-1] {
				if m != "" {
					mids = append(mids, m)
				}
			}
		}
		p := w.root.insert(prefix)
		s := p
		if suffix != "" || mids != nil {
			if p.sfx == nil {
				p.sfx = &wnode{best: noMatch}
			}
			s = p.sfx.insert(reverse(suffix))
		}
		if mids == nil {
			s.best = min(s.best, int32(i))
		} else {
			s.multi = append(s.multi, wmulti{order: int32(i), mids: mids})
		}
	}
	w.root.freeze()
	return w
}

// freeze indexes the children of n and of every node below it by first
// byte, where a table of the span of their first bytes costs at most four
// pointers a child (and 16 in all for a node with few).
func (n *wnode) freeze() {
	if len(n.first) > 1 {
		span := int(n.first[len(n.first)-1]) - int(n.first[0]) + 1
		if span <= max(16, 4*len(n.first)) {
			n.base = n.first[0]
			n.tab = make([]*wnode, span)
			for i, b := range n.first {
				n.tab[b-n.base] = n.kids[i]
			}
		}
	}
	for _, c := range n.kids {
		c.freeze()
	}
	if n.sfx != nil {
		n.sfx.freeze()
	}
}

// insert adds key below n, splitting a label where key leaves it, and
// returns the node where key ends.
func (n *wnode) insert(key string) *wnode {
	for key != "" {
		i, found := slices.BinarySearch(n.first, key[0])
		if !found {
			c := &wnode{label: key, best: noMatch}
			n.first = slices.Insert(n.first, i, key[0])
			n.kids = slices.Insert(n.kids, i, c)
			return c
		}
		c := n.kids[i]
		l := 0
		for l < len(c.label) && l < len(key) && c.label[l] == key[l] {
			l++
		}
		if l < len(c.label) {
			mid := &wnode{label: c.label[:l], best: noMatch, first: []byte{c.label[l]}, kids: []*wnode{c}}
			c.label = c.label[l:]
			n.kids[i] = mid
			c = mid
		}
		n, key = c, key[l:]
	}
	return n
}

// child returns the child whose label starts with b, or nil.
func (n *wnode) child(b byte) *wnode {
	if n.tab != nil {
		if i := int(b) - int(n.base); uint(i) < uint(len(n.tab)) {
			return n.tab[i]
		}
		return nil
	}
	f := n.first
	lo, hi := 0, len(f)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if f[m] < b {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(f) && f[lo] == b {
		return n.kids[lo]
	}
	return nil
}

func reverse(s string) string {
	b := []byte(s)
	slices.Reverse(b)
	return string(b)
}

// match returns the first pattern in file order that v matches, or nil.
// It does not allocate.
func (w *wildSet) match(v string) *mnode {
	best := int32(noMatch)
	n, d := &w.root, 0
	for {
		best = min(best, n.best)
		if n.sfx != nil {
			best = n.sfx.matchSuffix(v, d, best)
		}
		if d == len(v) {
			break
		}
		var c *wnode
		if n.tab != nil { // child's table path, here to save the call
			if i := int(v[d]) - int(n.base); uint(i) < uint(len(n.tab)) {
				c = n.tab[i]
			}
		} else {
			c = n.child(v[d])
		}
		if c == nil || !hasLabelAt(v, d, c.label) {
			break
		}
		n, d = c, d+len(c.label)
	}
	if best == noMatch {
		return nil
	}
	return w.pats[best]
}

// hasLabelAt reports whether v holds label at d, given that its first byte
// is there: short labels are compared here, without the call.
func hasLabelAt(v string, d int, label string) bool {
	if len(label) > len(v)-d {
		return false
	}
	if len(label) > 8 {
		return v[d+1:d+len(label)] == label[1:]
	}
	for j := 1; j < len(label); j++ {
		if label[j] != v[d+j] {
			return false
		}
	}
	return true
}

// matchSuffix walks the suffix tree s back from v's end, not past lo (where
// the prefix ended), and returns the lower of best and the order of the
// first pattern whose suffix and middles v has.
func (s *wnode) matchSuffix(v string, lo int, best int32) int32 {
	n, e := s, len(v)
	for {
		best = min(best, n.best)
		for _, m := range n.multi {
			if m.order >= best {
				break
			}
			if hasMiddles(v[lo:e], m.mids) {
				best = m.order
				break
			}
		}
		if e == lo {
			return best
		}
		c := n.child(v[e-1])
		if c == nil || len(c.label) > e-lo {
			return best
		}
		for j := 1; j < len(c.label); j++ {
			if c.label[j] != v[e-1-j] {
				return best
			}
		}
		n, e = c, e-len(c.label)
	}
}

// hasMiddles reports whether s holds mids in order without overlap: taking
// each at its leftmost place after the one before is enough.
func hasMiddles(s string, mids []string) bool {
	for _, m := range mids {
		i := strings.Index(s, m)
		if i < 0 {
			return false
		}
		s = s[i+len(m):]
	}
	return true
}
