package client

import (
	"context"
	"time"
)

// SetSleepHook makes t call sleep instead of waiting on a timer, for tests
// of the external package that check the waits the Transport computes
// without spending them.
func SetSleepHook(t *Transport, sleep func(ctx context.Context, d time.Duration) error) {
	t.sleep = sleep
}
