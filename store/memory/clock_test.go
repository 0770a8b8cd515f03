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
	deadline := time.Now().Add(5 * time.Second)
	for c.running.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("clock still running 5s after the last read, want it stopped after %d idle ticks", clockIdleTicks)
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
	// While read, it keeps ticking.
	for range 50 {
		c.load()
		time.Sleep(time.Millisecond)
	}
	if !c.running.Load() {
		t.Fatal("clock stopped while being read")
	}
	if now := time.Now().UnixMicro(); now-c.load() > 50_000 {
		t.Fatalf("clock %dµs behind time.Now while read, want within a few ticks", now-c.load())
	}
}
