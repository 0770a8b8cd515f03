package memory

import (
	"hash/maphash"
	"math/rand/v2"
)

// table is an open-addressing hash map from string keys to V, built for
// the store's hot path: one hash per op (shared with shard selection), values
// stored inline (no allocation per key beyond the key's bytes), 1-byte tags so
// a probe rarely touches a key it does not want, linear probing with
// backward-shift deletion (no tombstones), and capacity grown by 1.5× rather
// than doubled so memory per key stays near the load factor's ideal.
//
// The zero value is an empty table. Not safe for concurrent use: the shard's
// mutex guards it.
type table[V any] struct {
	ctrl  []uint8 // 0: empty; else 0x80 | 7 bits of the key's hash
	slots []entry[V]
	n     int
}

type entry[V any] struct {
	key string
	v   V
}

// maxLoad is the load factor (13/16) past which a table grows.
const (
	maxLoadNum, maxLoadDen = 13, 16
	minCap                 = 8
)

func home(h uint64, n int) int { return int((uint64(uint32(h)) * uint64(n)) >> 32) }
func tagOf(h uint64) uint8     { return uint8(h>>32) | 0x80 }

// find returns the slot holding key and true, or the empty slot where key
// would go and false (-1 when the table has no slots).
func (t *table[V]) find(h uint64, key string) (int, bool) {
	n := len(t.ctrl)
	if n == 0 {
		return -1, false
	}
	tag := tagOf(h)
	for i := home(h, n); ; {
		c := t.ctrl[i]
		if c == 0 {
			return i, false
		}
		if c == tag && t.slots[i].key == key {
			return i, true
		}
		if i++; i == n {
			i = 0
		}
	}
}

// get is find that also returns the value held (the zero value when key is
// not there).
func (t *table[V]) get(h uint64, key string) (int, bool, V) {
	i, found := t.find(h, key)
	if !found {
		var zero V
		return i, false, zero
	}
	return i, true, t.slots[i].v
}

// insert adds key, which must not be in the table, and returns its slot.
func (t *table[V]) insert(seed maphash.Seed, h uint64, key string, v V) int {
	if (t.n+1)*maxLoadDen > len(t.ctrl)*maxLoadNum {
		t.resize(seed, max(minCap, len(t.ctrl)*3/2))
	}
	i, _ := t.find(h, key)
	t.ctrl[i] = tagOf(h)
	t.slots[i] = entry[V]{key: key, v: v}
	t.n++
	return i
}

// resize rehashes every entry into a table of capacity c.
func (t *table[V]) resize(seed maphash.Seed, c int) {
	old, oldCtrl := t.slots, t.ctrl
	t.ctrl = make([]uint8, c)
	t.slots = make([]entry[V], c)
	for i, tag := range oldCtrl {
		if tag == 0 {
			continue
		}
		h := maphash.String(seed, old[i].key)
		j, _ := t.find(h, old[i].key)
		t.ctrl[j] = tag
		t.slots[j] = old[i]
	}
}

// deleteAt empties slot i, shifting later entries of the same probe run back
// so that every key stays reachable from its home slot.
func (t *table[V]) deleteAt(seed maphash.Seed, i int) {
	n := len(t.ctrl)
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		if t.ctrl[j] == 0 {
			break
		}
		k := home(maphash.String(seed, t.slots[j].key), n)
		// The entry at j may fill the hole at i unless its home lies
		// cyclically in (i, j].
		if (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		t.ctrl[i], t.slots[i] = t.ctrl[j], t.slots[j]
		i = j
	}
	t.ctrl[i] = 0
	t.slots[i] = entry[V]{}
	t.n--
}

// sweep deletes every entry for which stale returns true and returns how
// many it deleted; it shrinks a table left mostly empty.
func (t *table[V]) sweep(seed maphash.Seed, stale func(*V) bool) int {
	deleted := 0
	for i := 0; i < len(t.ctrl); {
		if t.ctrl[i] != 0 && stale(&t.slots[i].v) {
			t.deleteAt(seed, i)
			deleted++
			continue // a later entry may have shifted into i
		}
		i++
	}
	if len(t.ctrl) > minCap && t.n*4 < len(t.ctrl) {
		t.resize(seed, max(minCap, t.n*2))
	}
	return deleted
}

// sample calls f on up to k occupied slots starting at a random one, so
// Go's lack of a random-access map does not bias eviction.
func (t *table[V]) sample(k int, f func(i int)) {
	n := len(t.ctrl)
	if t.n == 0 {
		return
	}
	i := rand.IntN(n)
	for seen := 0; seen < k && seen < t.n; {
		if t.ctrl[i] != 0 {
			f(i)
			seen++
		}
		if i++; i == n {
			i = 0
		}
	}
}
