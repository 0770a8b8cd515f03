package tenant

import (
	"hash/maphash"

	"github.com/sluice-rl/sluice/rules"
)

// table is the snapshot's base: every tenant of a full load in memory the
// garbage collector need not scan (no pointers but the three slices), so a
// million tenants cost the collector nothing per cycle, unlike a Go map
// with a string key per tenant. Names live in one byte arena; records in
// one slice; an open-addressed index of uint32 (linear probing, at most
// half full) points into it. Overrides, rare, are kept in ovs.
type table struct {
	seed  maphash.Seed
	index []uint32 // record number + 1; 0 is empty
	recs  []trec
	names []byte
	ovs   []ovr
	n     int // distinct tenants
}

// trec is one tenant's record (40 bytes).
type trec struct {
	hash        uint64
	off         uint32 // name at names[off : off+nlen]
	nlen        uint16
	tier        rules.Tier
	from, until int64
	ovOff       uint32 // overrides at ovs[ovOff : ovOff+ovLen]
	ovLen       uint16
}

func newTable(n int) *table {
	return &table{seed: maphash.MakeSeed(), recs: make([]trec, 0, n), names: make([]byte, 0, n*8)}
}

// add appends a record; finish builds the index. A later record of the same
// tenant replaces an earlier one.
func (t *table) add(name string, e entry) {
	r := trec{hash: maphash.String(t.seed, name), off: uint32(len(t.names)), nlen: uint16(len(name)),
		tier: e.tier, from: e.from, until: e.until, ovOff: uint32(len(t.ovs)), ovLen: uint16(len(e.ovs))}
	t.names = append(t.names, name...)
	t.ovs = append(t.ovs, e.ovs...)
	t.recs = append(t.recs, r)
}

func (t *table) finish() {
	size := 16
	for size < 2*len(t.recs) {
		size *= 2
	}
	t.index = make([]uint32, size)
	mask := uint64(size - 1)
	kept := 0
	for i := range t.recs {
		r := &t.recs[i]
		for p := r.hash & mask; ; p = (p + 1) & mask {
			j := t.index[p]
			if j == 0 {
				t.index[p] = uint32(i + 1)
				kept++
				break
			}
			if o := &t.recs[j-1]; o.hash == r.hash && t.name(o) == t.name(r) {
				t.index[p] = uint32(i + 1) // last wins
				break
			}
		}
	}
	t.n = kept // duplicates: the replaced records stay in recs, unindexed
}

func (t *table) name(r *trec) string {
	return string(t.names[r.off : r.off+uint32(r.nlen)])
}

// get returns the entry of tenant name. It does not allocate (the name
// comparison converts without copying).
func (t *table) get(name string) (entry, bool) {
	if t == nil || len(t.index) == 0 {
		return entry{}, false
	}
	h := maphash.String(t.seed, name)
	mask := uint64(len(t.index) - 1)
	for p := h & mask; ; p = (p + 1) & mask {
		j := t.index[p]
		if j == 0 {
			return entry{}, false
		}
		r := &t.recs[j-1]
		if r.hash == h && int(r.nlen) == len(name) && string(t.names[r.off:r.off+uint32(r.nlen)]) == name {
			return entry{tier: r.tier, from: r.from, until: r.until, ovs: t.ovs[r.ovOff : r.ovOff+uint32(r.ovLen) : r.ovOff+uint32(r.ovLen)]}, true
		}
	}
}

// len returns the number of distinct tenants.
func (t *table) len() int {
	if t == nil {
		return 0
	}
	return t.n
}
