package cow

import (
	"sync"
	"testing"
)

func TestMap(t *testing.T) {
	var m Map[int, int]
	if _, ok := m.Get(1); ok {
		t.Fatal("Get on the zero Map found a value")
	}
	m.Put(1, 10)
	if v, ok := m.Get(1); !ok || v != 10 {
		t.Fatalf("Get(1) = %d, %v; want 10, true", v, ok)
	}
	calls := 0
	if v := m.Load(2, func() int { calls++; return 20 }); v != 20 || calls != 1 {
		t.Fatalf("Load(2) = %d after %d calls, want 20 after 1", v, calls)
	}
	if v := m.Load(2, func() int { calls++; return 0 }); v != 20 || calls != 1 {
		t.Fatalf("Load(2) again = %d after %d calls, want the stored 20 without calling", v, calls)
	}
}

// TestMapBounded: a full map starts over instead of growing.
func TestMapBounded(t *testing.T) {
	var m Map[int, int]
	for i := range MaxEntries + 1 {
		m.Put(i, i)
	}
	if n := len(*m.m.Load()); n != 1 {
		t.Errorf("after %d Puts: %d entries, want 1 (the map starts over at MaxEntries)", MaxEntries+1, n)
	}
	if _, ok := m.Get(MaxEntries); !ok {
		t.Errorf("the newest entry is gone")
	}
}

func TestMapConcurrent(t *testing.T) {
	var m Map[int, int]
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				m.Put(g*1000+i, i)
				if v, ok := m.Get(g*1000 + i); !ok || v != i {
					t.Errorf("Get(%d) = %d, %v right after Put", g*1000+i, v, ok)
					return
				}
			}
		}()
	}
	wg.Wait()
}
