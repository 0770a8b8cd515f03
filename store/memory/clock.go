package memory

import (
	"sync/atomic"
	"time"
)

// clockIdleTicks is how many ticks without a read stop the coarse clock.
const clockIdleTicks = 20

// coarseClock is the default clock: µs since the epoch, read with one
// atomic load because time.Now costs more than a whole decision. A ticker
// advances it every res, but only while it is read: it starts on the first
// read after a pause and stops after clockIdleTicks ticks without a read,
// so an idle store (or one a service keeps only as a fallback) costs no
// CPU. While stopped, a read takes time.Now itself.
type coarseClock struct {
	now     atomic.Int64
	read    atomic.Bool // read since the last tick
	running atomic.Bool
	res     time.Duration
	stop    chan struct{}
}

func (c *coarseClock) init(res time.Duration, stop chan struct{}) {
	c.res, c.stop = res, stop
	c.now.Store(time.Now().UnixMicro())
}

// load returns the time in µs.
func (c *coarseClock) load() int64 {
	if c.running.Load() {
		if !c.read.Load() { // a write per tick, not per read
			c.read.Store(true)
		}
		return c.now.Load()
	}
	return c.wake()
}

// wake reads the real clock and starts the ticker unless the store is
// closed.
func (c *coarseClock) wake() int64 {
	t := time.Now().UnixMicro()
	for {
		old := c.now.Load()
		if old >= t || c.now.CompareAndSwap(old, t) {
			break
		}
	}
	select {
	case <-c.stop:
		return t
	default:
	}
	c.read.Store(true)
	if c.running.CompareAndSwap(false, true) {
		go c.tick()
	}
	return t
}

func (c *coarseClock) tick() {
	t := time.NewTicker(c.res)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-c.stop:
			c.running.Store(false)
			return
		case now := <-t.C:
			c.now.Store(now.UnixMicro())
			if c.read.Swap(false) {
				idle = 0
				continue
			}
			if idle++; idle >= clockIdleTicks {
				c.running.Store(false)
				return
			}
		}
	}
}
