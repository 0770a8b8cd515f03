package memory

import (
	"testing"
	"time"
)

// The coarse clock ticks only while read: it stops after clockIdleTicks
// ticks without a read, and the next read starts it again with a fresh
// time.
func TestCoarseClockStopsWhenIdle(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	var c coarseClock
	c.init(time.Millisecond, stop)
	if c.running.Load() {
		t.Fatal("clock running before any read")
	}
	first := c.load()
	if !c.running.Load() {
		t.Fatal("clock not running after a read")
	}
	deadline := time.Now().Add(time.Minute)
	for c.running.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("clock still running a minute after the last read, want it stopped after %d idle ticks", clockIdleTicks)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	before := time.Now().UnixMicro()
	got := c.load()
	if got < before || got <= first {
		t.Fatalf("read after a pause = %d, want ≥ %d (time.Now at the read), > %d", got, before, first)
	}
	if !c.running.Load() {
		t.Fatal("clock not restarted by a read")
	}
	// While read, it keeps ticking: its value moves on without a wake.
	// Another clock, whose idle stop (20 ticks of 100ms: 2s) no pause
	// between reads of a loaded machine reaches.
	stop2 := make(chan struct{})
	defer close(stop2)
	var c2 coarseClock
	c2.init(100*time.Millisecond, stop2)
	start := c2.load()
	moved := false
	for deadline := time.Now().Add(time.Minute); !moved && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		if !c2.running.Load() {
			t.Fatal("clock stopped while being read")
		}
		moved = c2.load() > start
	}
	if !moved {
		t.Fatal("clock read for a minute never moved: it does not tick while read")
	}
	if now := time.Now().UnixMicro(); c2.load() > now {
		t.Fatalf("clock %dµs ahead of time.Now, want never ahead", c2.load()-now)
	}
}
