package shed

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/store/memory"
)

// BenchmarkAdmit is one admission and its Done through each layer, against
// a baseline: the cheapest admission control there is, a mutex-guarded
// in-flight counter (BenchmarkAdmit/baseline_mutex_counter).
func BenchmarkAdmit(b *testing.B) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	b.Cleanup(func() { st.Close() })
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"classify_only", Config{}},
		{"worker", Config{Worker: &WorkerConfig{MaxInFlight: 1 << 20}}},
		{"adaptive", Config{Adaptive: &AdaptiveConfig{InitialLimit: 500_000, MaxLimit: 1_000_000, MinLimit: 500_000, ProbeInterval: time.Hour}}},
		{"fleet_rate_memory", Config{Fleet: &FleetConfig{Capacity: 1_000_000_000, Window: time.Hour}}},
		{"worker+adaptive", Config{Worker: &WorkerConfig{MaxInFlight: 1 << 20},
			Adaptive: &AdaptiveConfig{InitialLimit: 500_000, MaxLimit: 1_000_000, MinLimit: 500_000, ProbeInterval: time.Hour}}},
	} {
		s, err := New(tc.cfg, Options{Store: st})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				t, r := s.Admit(ctx, Default)
				if r != nil {
					b.Fatalf("shed: %+v", r)
				}
				t.Done(ctx, Succeeded)
			}
		})
		b.Run(tc.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					t, r := s.Admit(ctx, Default)
					if r != nil {
						b.Errorf("shed: %+v", r)
						return
					}
					t.Done(ctx, Succeeded)
				}
			})
		})
	}
	var mu sync.Mutex
	n := 0
	step := func() {
		mu.Lock()
		n++
		mu.Unlock()
		mu.Lock()
		n--
		mu.Unlock()
	}
	b.Run("baseline_mutex_counter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			step()
		}
	})
	b.Run("baseline_mutex_counter/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				step()
			}
		})
	})
}
