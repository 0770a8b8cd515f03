package redis

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/internal/redistest"
	"github.com/sluice-rl/sluice/store/stack"
)

// TestBlob: versions only go up, the bound is kept on the Redis side, the
// expiry is set, and the key cannot be a counter's. A Get over the bound
// allocates a fraction of the blob, counted in the whole process's
// TotalAlloc: the test runs in a process of its own (proctest.Alone),
// beside the others (it mostly waits for its Cluster to form).
func TestBlob(t *testing.T) {
	if !proctest.Alone(t) {
		return
	}
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"single", false}, {"cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := ""
			if tc.cluster {
				url = redistest.StartCluster(t).URL()
			} else {
				url = redistest.Start(t).URL()
			}
			s, err := New(Options{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			b, err := s.Blob("tenants:0123456789abcdef", time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := b.Key(), "sluice:{sluice:tenants:0123456789abcdef}"; got != want {
				t.Errorf("Key() = %q, want %q", got, want)
			}
			if v, err := b.Version(ctx); v != 0 || err != nil {
				t.Errorf("Version of no blob = %d, %v; want 0, nil", v, err)
			}
			if v, d, err := b.Get(ctx, 100); v != 0 || d != nil || err != nil {
				t.Errorf("Get of no blob = %d, %q, %v; want 0, nil, nil", v, d, err)
			}
			steps := []struct {
				v      int64
				data   string
				stored bool
				held   string
			}{
				{100, "first", true, "first"},
				{99, "older", false, "first"},
				{100, "same version", false, "first"},
				{101, "newer\x00binary\xff", true, "newer\x00binary\xff"},
			}
			for i, st := range steps {
				stored, err := b.Put(ctx, st.v, []byte(st.data))
				if err != nil || stored != st.stored {
					t.Fatalf("step %d: Put(%d) = %v, %v; want %v, nil", i, st.v, stored, err, st.stored)
				}
				v, d, err := b.Get(ctx, 100)
				if err != nil || string(d) != st.held {
					t.Fatalf("step %d: Get = %d, %q, %v; want %q", i, v, d, err, st.held)
				}
			}
			if v, err := b.Version(ctx); v != 101 || err != nil {
				t.Errorf("Version = %d, %v; want 101", v, err)
			}
			if _, err := b.Put(ctx, 0, []byte("x")); err == nil {
				t.Error("Put with version 0: no error")
			}
			// Over the bound: refused by the script, not transferred.
			big := bytes.Repeat([]byte("x"), 1<<20)
			if stored, err := b.Put(ctx, 200, big); !stored || err != nil {
				t.Fatalf("Put 1 MiB = %v, %v", stored, err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			v, d, err := b.Get(ctx, 1<<20-1)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrBlobTooLarge) || d != nil || v != 200 || !strings.Contains(err.Error(), "1048576 bytes") {
				t.Errorf("Get over the bound = %d, %d bytes, %v; want 200, none, ErrBlobTooLarge naming the size", v, len(d), err)
			}
			if got := after.TotalAlloc - before.TotalAlloc; got > 256<<10 {
				t.Errorf("Get over the bound allocated %d bytes; want < 256 KiB (the blob is 1 MiB: it must not be sent)", got)
			}
			if v, d, err := b.Get(ctx, 1<<20); err != nil || len(d) != 1<<20 || v != 200 {
				t.Errorf("Get at the bound = %d, %d bytes, %v; want 200, 1 MiB", v, len(d), err)
			}
			c := s.client
			ttl, err := c.Do(ctx, c.B().Pttl().Key(b.Key()).Build()).AsInt64()
			if err != nil || ttl <= 0 || ttl > time.Hour.Milliseconds() {
				t.Errorf("PTTL = %d, %v; want within an hour", ttl, err)
			}
			// No counter can have a blob's key: they are prefix + one
			// algorithm letter + the op key.
			for _, a := range stack.Algorithms() {
				if k := redisKey(s.prefix, a, "{sluice:tenants:0123456789abcdef}"); k == b.Key() {
					t.Errorf("counter key %q is the blob's", k)
				}
			}
		})
	}
}

func TestBlobName(t *testing.T) {
	s := &Store{prefix: "p:"}
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"tenants:abc-1_2.3", true},
		{"", false},
		{"a{b}", false},
		{"a b", false},
		{strings.Repeat("a", 201), false},
	} {
		if _, err := s.Blob(tc.name, 0); (err == nil) != tc.ok {
			t.Errorf("Blob(%q): err %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}
