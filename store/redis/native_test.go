package redis

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/storetest"
)

// newNativeStore is newTestStore with Options.NativeFixedWindow.
func newNativeStore(t testing.TB, url string, c *storetest.Clock) *Store {
	t.Helper()
	opts := Options{URL: url, Prefix: fmt.Sprintf("t%x:", rand.Uint64()), Timeout: 2 * time.Second, NativeFixedWindow: true}
	if c != nil {
		opts.Now = c.Now
	}
	s, err := New(opts)
	if err != nil {
		t.Fatalf("New(%q) = %v", url, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// nativeSkips are the parts of the conformance suite the native path does
// not honour, and why.
var nativeSkips = map[string]string{
	"Steps/fixed_window":         "a clock that goes back reopens the earlier window's key (TestNativeClockBack states the result)",
	"Steps/fixed_window/actions": "a refund at an instant of an earlier window gives back into that window's key (TestNativeClockBack)",
	"ActionBatch":                "a batch mixing fixed_window takes with other algorithms' actions is refused (ErrNativeMixed; TestNativeMixed)",
}

func TestNativeConformanceSingle(t *testing.T) {
	srv := redistest.Start(t)
	storetest.RunWith(t, func(t *testing.T, c *storetest.Clock) sluice.Store {
		return newNativeStore(t, srv.URL(), c)
	}, storetest.Options{Skip: nativeSkips})
}
