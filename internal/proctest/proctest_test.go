package proctest

import (
	"errors"
	"testing"
	"time"
)

func TestFreePortNeverRepeats(t *testing.T) {
	seen := map[int]bool{}
	for range 20 {
		p, err := FreePort(1)
		if err != nil {
			t.Fatalf("FreePort: got error %v, want nil", err)
		}
		if seen[p] {
			t.Fatalf("FreePort: got port %d twice, want a new port each call", p)
		}
		seen[p] = true
	}
}

func TestWaitReady(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	notReady := errors.New("not yet")
	tests := []struct {
		name    string
		exited  chan struct{}
		readyAt int // the call that succeeds; 0: never
		want    func(error) bool
	}{
		{"ready at once", make(chan struct{}), 1, func(err error) bool { return err == nil }},
		{"ready at the third try", make(chan struct{}), 3, func(err error) bool { return err == nil }},
		{"exited", closed, 0, func(err error) bool { return errors.Is(err, ErrExited) }},
		{"timeout", make(chan struct{}), 0, func(err error) bool { return errors.Is(err, notReady) && !errors.Is(err, ErrExited) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := WaitReady(tt.exited, 20*time.Millisecond, time.Millisecond, func() error {
				calls++
				if calls == tt.readyAt {
					return nil
				}
				return notReady
			})
			if !tt.want(err) {
				t.Errorf("WaitReady: got %v after %d calls", err, calls)
			}
		})
	}
}
