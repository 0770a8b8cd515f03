package algorithm

import "testing"

func TestFloorCeilDiv(t *testing.T) {
	tests := []struct{ a, b, floor, ceil int64 }{
		{0, 3, 0, 0},
		{1, 3, 0, 1},
		{3, 3, 1, 1},
		{1000000, 3, 333333, 333334},
		{-1, 3, -1, 0},
		{-3, 3, -1, -1},
		{-4, 3, -2, -1},
		{1<<53 - 1, 1, 1<<53 - 1, 1<<53 - 1},
	}
	for _, tt := range tests {
		if got := FloorDiv(tt.a, tt.b); got != tt.floor {
			t.Errorf("FloorDiv(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.floor)
		}
		if tt.a >= 0 {
			if got := CeilDiv(tt.a, tt.b); got != tt.ceil {
				t.Errorf("CeilDiv(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.ceil)
			}
		}
	}
}
