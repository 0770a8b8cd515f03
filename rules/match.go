package rules

import (
	"bytes"
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
// without the prefix and suffix overlapping, so each suffix node keeps only
// the first such pattern in file order. Patterns with middles (two or more
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
	first []byte   // first[i] == kids[i].label[0]
	kids  []*wnode // in no particular order; first indexes them
	// Prefix tree: the suffixes of the patterns whose prefix ends here.
	sfx *wnode
	// Suffix tree: the first pattern without middles whose suffix ends
	// here, and the patterns with middles, in file order.
	best  int32
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
		if p.sfx == nil {
			p.sfx = &wnode{best: noMatch}
		}
		s := p.sfx.insert(reverse(suffix))
		switch {
		case mids == nil:
			if s.best == noMatch {
				s.best = int32(i)
			}
		default:
			s.multi = append(s.multi, wmulti{order: int32(i), mids: mids})
		}
	}
	return w
}

// insert adds key below n, splitting a label where key leaves it, and
// returns the node where key ends.
func (n *wnode) insert(key string) *wnode {
	for key != "" {
		i := bytes.IndexByte(n.first, key[0])
		if i < 0 {
			c := &wnode{label: key, best: noMatch}
			n.first = append(n.first, key[0])
			n.kids = append(n.kids, c)
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
		if n.sfx != nil {
			best = n.sfx.matchSuffix(v, d, best)
		}
		if d == len(v) {
			break
		}
		i := bytes.IndexByte(n.first, v[d])
		if i < 0 {
			break
		}
		c := n.kids[i]
		if !strings.HasPrefix(v[d:], c.label) {
			break
		}
		n, d = c, d+len(c.label)
	}
	if best == noMatch {
		return nil
	}
	return w.pats[best]
}

// matchSuffix walks the suffix tree s back from v's end, not past lo (where
// the prefix ended), and returns the lower of best and the order of the
// first pattern whose suffix and middles v has.
func (s *wnode) matchSuffix(v string, lo int, best int32) int32 {
	n, e := s, len(v)
	for {
		if n.best < best {
			best = n.best
		}
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
		i := bytes.IndexByte(n.first, v[e-1])
		if i < 0 {
			return best
		}
		c := n.kids[i]
		if len(c.label) > e-lo {
			return best
		}
		for j := 0; j < len(c.label); j++ {
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
