package memory

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"testing"
)

// The table must behave exactly like a Go map under random inserts, updates,
// deletes, sweeps and resizes.
func TestTableMatchesMap(t *testing.T) {
	seed := maphash.MakeSeed()
	rng := rand.New(rand.NewPCG(1, 1))
	var tb table[int64]
	ref := map[string]int64{}
	for step := 0; step < 200_000; step++ {
		k := fmt.Sprint("k", rng.IntN(3000))
		h := maphash.String(seed, k)
		i, found := tb.find(h, k)
		_, inRef := ref[k]
		if found != inRef {
			t.Fatalf("step %d: find(%q) = %v, map has it = %v", step, k, found, inRef)
		}
		if found && tb.slots[i].v != ref[k] {
			t.Fatalf("step %d: value of %q = %d, want %d", step, k, tb.slots[i].v, ref[k])
		}
		switch op := rng.IntN(10); {
		case op < 5 && !found:
			tb.insert(seed, h, k, int64(step))
			ref[k] = int64(step)
		case op < 7 && found:
			tb.slots[i].v = int64(step)
			ref[k] = int64(step)
		case op < 9 && found:
			tb.deleteAt(seed, i)
			delete(ref, k)
		case op == 9 && step%1000 == 0:
			cut := int64(step - 5000)
			n := tb.sweep(seed, func(v *int64) bool { return *v < cut })
			want := 0
			for rk, v := range ref {
				if v < cut {
					delete(ref, rk)
					want++
				}
			}
			if n != want {
				t.Fatalf("step %d: sweep deleted %d, want %d", step, n, want)
			}
		}
		if tb.n != len(ref) {
			t.Fatalf("step %d: table holds %d, map %d", step, tb.n, len(ref))
		}
	}
	for k, v := range ref {
		i, found := tb.find(maphash.String(seed, k), k)
		if !found || tb.slots[i].v != v {
			t.Fatalf("final: %q = %v/%d, want %d", k, found, tb.slots[i].v, v)
		}
	}
}
