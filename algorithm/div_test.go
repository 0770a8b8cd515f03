package algorithm

import (
	"math/rand/v2"
	"testing"
)

// FloorDiv must equal exact floor division over the whole range the stores
// use, including the values where a double quotient rounds across an integer.
func TestFloorDivExact(t *testing.T) {
	exact := func(a, b int64) int64 {
		q := a / b
		if a%b != 0 && a < 0 {
			q--
		}
		return q
	}
	const lim = 1<<53 - 1
	cases := [][2]int64{{0, 1}, {-1, 1}, {-1, 3}, {lim, 1}, {lim, 3}, {-lim, 7}, {lim, lim}, {lim - 1, lim}, {1 << 52, 3}}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 2_000_000; i++ {
		b := 1 + rng.Int64N(lim)
		if i%2 == 0 {
			b = 1 + rng.Int64N(1<<20)
		}
		q := rng.Int64N(lim/b + 1)
		a := q*b + rng.Int64N(3) - 1 // near a multiple, where rounding bites
		if rng.IntN(2) == 0 {
			a = -a
		}
		if a > lim || a < -lim {
			continue
		}
		cases = append(cases[:9], [2]int64{a, b})
		for _, c := range cases[len(cases)-1:] {
			if got, want := FloorDiv(c[0], c[1]), exact(c[0], c[1]); got != want {
				t.Fatalf("FloorDiv(%d, %d) = %d, want %d", c[0], c[1], got, want)
			}
		}
	}
	for _, c := range cases[:9] {
		if got, want := FloorDiv(c[0], c[1]), exact(c[0], c[1]); got != want {
			t.Fatalf("FloorDiv(%d, %d) = %d, want %d", c[0], c[1], got, want)
		}
	}
}
