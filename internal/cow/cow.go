// Package cow holds Map, a read-mostly cache: readers take no lock, a writer
// copies the map. It suits values derived from configuration (rules,
// limits), which are few and rarely new.
package cow

import (
	"sync"
	"sync/atomic"
)

// MaxEntries bounds a Map: a Put into a full map starts it over, so keys
// that come from outside (a reload's new rules, say) cannot grow it forever.
const MaxEntries = 4096

// Map is a copy-on-write map. The zero value is empty and ready; a Map must
// not be copied after first use. It is safe for concurrent use.
type Map[K comparable, V any] struct {
	mu sync.Mutex // serializes writers
	m  atomic.Pointer[map[K]V]
}

// Get returns the value stored for k.
func (c *Map[K, V]) Get(k K) (V, bool) {
	if m := c.m.Load(); m != nil {
		v, ok := (*m)[k]
		return v, ok
	}
	var zero V
	return zero, false
}

// Put stores v for k, in a new copy of the map (a new, empty one when the
// map holds MaxEntries already).
func (c *Map[K, V]) Put(k K, v V) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.m.Load()
	n := 1
	if old != nil && len(*old) < MaxEntries {
		n += len(*old)
	}
	next := make(map[K]V, n)
	if n > 1 {
		for k2, v2 := range *old {
			next[k2] = v2
		}
	}
	next[k] = v
	c.m.Store(&next)
}

// Load returns the value for k, computing it with f and storing it when
// absent. f may run more than once for one key when callers race; the
// values must be interchangeable.
func (c *Map[K, V]) Load(k K, f func() V) V {
	if v, ok := c.Get(k); ok {
		return v
	}
	v := f()
	c.Put(k, v)
	return v
}
