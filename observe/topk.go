// Package observe keeps what operators look at live: the keys most often
// denied and checked per rule, in memory bounded whatever the traffic, and
// summaries that instances of a fleet can exchange and merge.
//
// It imports no metrics library: descriptor values never become Prometheus
// label values; they live here and are served by the admin API.
package observe

import (
	"container/heap"
	"sort"
)

// TopK estimates the heaviest keys of a stream with the Space-Saving
// algorithm (Metwally, Agrawal, El Abbadi 2005) in at most K counters.
//
// Guarantees, for a stream of total weight N (Total):
//   - every key's estimate is at least its true count and at most its true
//     count plus the entry's Err, and Err ≤ N/K;
//   - every key whose true count exceeds N/K is in the summary.
//
// Merging summaries (Merge) keeps both guarantees with N the sum of the
// merged streams' totals.
//
// The zero value is not usable; create one with NewTopK. A TopK is not safe
// for concurrent use.
type TopK struct {
	k     int
	total uint64
	index map[string]int // key → position in h
	h     itemHeap       // min-heap by count
}

// Entry is one key of a summary.
type Entry struct {
	Key string `json:"key"`
	// Count estimates the key's weight: never below the truth, at most Err
	// above it.
	Count uint64 `json:"count"`
	// Err bounds the overestimate of Count.
	Err uint64 `json:"err"`
}

type itemHeap []Entry

func (h itemHeap) Len() int { return len(h) }
func (h itemHeap) Less(i, j int) bool {
	if h[i].Count != h[j].Count {
		return h[i].Count < h[j].Count
	}
	return h[i].Key < h[j].Key
}
func (h itemHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)   { *h = append(*h, x.(Entry)) }
func (h *itemHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// NewTopK returns an empty summary of k counters (k ≥ 1; smaller values
// are raised to 1).
func NewTopK(k int) *TopK {
	k = max(k, 1)
	return &TopK{k: k, index: make(map[string]int, k)}
}

// K returns the number of counters.
func (t *TopK) K() int { return t.k }

// Total returns the weight of the stream summarised so far (N).
func (t *TopK) Total() uint64 { return t.total }

// Bound returns the largest overestimate any entry can carry: ⌈N/K⌉.
func (t *TopK) Bound() uint64 { return (t.total + uint64(t.k) - 1) / uint64(t.k) }

// Add counts n more of key. It does not retain key (the bytes are copied
// only when the key enters the summary) and does not allocate for a key
// already in it.
func (t *TopK) Add(key []byte, n uint64) {
	if n == 0 {
		return
	}
	t.total += n
	if i, ok := t.index[string(key)]; ok {
		t.h[i].Count += n
		t.fix(i)
		return
	}
	if len(t.h) < t.k {
		s := string(key)
		t.h = append(t.h, Entry{Key: s, Count: n})
		t.index[s] = len(t.h) - 1
		t.up(len(t.h) - 1)
		return
	}
	// Replace the smallest counter: the newcomer inherits its count as error.
	min := t.h[0]
	delete(t.index, min.Key)
	s := string(key)
	t.h[0] = Entry{Key: s, Count: min.Count + n, Err: min.Count}
	t.index[s] = 0
	t.fix(0)
}

// Top returns up to n entries, largest count first (ties by key).
func (t *TopK) Top(n int) []Entry {
	out := append([]Entry(nil), t.h...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// Lookup returns the entry of key, and whether the summary holds it. A key
// not held has a true count of at most Min.
func (t *TopK) Lookup(key string) (Entry, bool) {
	i, ok := t.index[key]
	if !ok {
		return Entry{}, false
	}
	return t.h[i], true
}

// Min returns the smallest counter when the summary is full, else 0: the
// most any key it does not hold can have been counted.
func (t *TopK) Min() uint64 {
	if len(t.h) < t.k {
		return 0
	}
	return t.h[0].Count
}

// Merge adds the summary o into t. A key that one side does not hold may
// have been counted there up to that side's Min, so it is credited with it,
// as error (Agarwal et al., "Mergeable summaries", 2012). The result keeps
// the K largest, so its guarantees hold for the union of both streams.
func (t *TopK) Merge(o *TopK) {
	if o == nil || o.total == 0 {
		return
	}
	tMin, oMin := t.Min(), o.Min()
	merged := make(map[string]Entry, len(t.h)+len(o.h))
	for _, e := range t.h {
		if oe, ok := o.index[e.Key]; ok {
			x := o.h[oe]
			e.Count += x.Count
			e.Err += x.Err
		} else {
			e.Count += oMin
			e.Err += oMin
		}
		merged[e.Key] = e
	}
	for _, e := range o.h {
		if _, ok := merged[e.Key]; ok {
			continue
		}
		e.Count += tMin
		e.Err += tMin
		merged[e.Key] = e
	}
	all := make([]Entry, 0, len(merged))
	for _, e := range merged {
		all = append(all, e)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].Count != all[j].Count {
			return all[i].Count > all[j].Count
		}
		return all[i].Key < all[j].Key
	})
	if len(all) > t.k {
		all = all[:t.k]
	}
	t.total += o.total
	t.h = itemHeap(all)
	heap.Init(&t.h)
	clear(t.index)
	for i, e := range t.h {
		t.index[e.Key] = i
	}
}

// Snapshot returns the summary's state, for exchange between instances.
func (t *TopK) Snapshot() Summary {
	return Summary{K: t.k, Total: t.total, Entries: append([]Entry(nil), t.h...)}
}

// Summary is a TopK's state in a form that travels (JSON).
type Summary struct {
	K       int     `json:"k"`
	Total   uint64  `json:"total"`
	Entries []Entry `json:"entries"`
}

// TopK rebuilds the summary s. Entries beyond K are dropped.
func (s Summary) TopK() *TopK {
	t := NewTopK(s.K)
	t.total = s.Total
	for _, e := range s.Entries {
		if len(t.h) == t.k {
			break
		}
		if _, dup := t.index[e.Key]; dup {
			continue
		}
		t.h = append(t.h, e)
		t.index[e.Key] = len(t.h) - 1
	}
	heap.Init(&t.h)
	for i, e := range t.h {
		t.index[e.Key] = i
	}
	return t
}

// fix restores the heap order after h[i]'s count grew, keeping index true.
func (t *TopK) fix(i int) { t.down(i) }

func (t *TopK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.h.Less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *TopK) down(i int) {
	n := len(t.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.h.Less(r, l) {
			m = r
		}
		if !t.h.Less(m, i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

func (t *TopK) swap(i, j int) {
	t.h[i], t.h[j] = t.h[j], t.h[i]
	t.index[t.h[i].Key] = i
	t.index[t.h[j].Key] = j
}
