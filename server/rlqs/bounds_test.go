package rlqs

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/store/storetest"
)

// maxMessage is the largest message `sluice serve` takes by default
// (--max-request-bytes, grpc.MaxRecvMsgSize).
const maxMessage = 256 << 10

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// inUse returns the heap in use after a collection.
func inUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// fill returns a report of buckets made by id(i), as many as fit in
// maxMessage bytes on the wire (at most max).
func fill(max int, id func(i int) map[string]string) *rlqspb.RateLimitQuotaUsageReports {
	m := &rlqspb.RateLimitQuotaUsageReports{Domain: simDomain}
	size := proto.Size(m)
	for i := range max {
		u := usage(id(i), 1, 0)
		size += protowire.SizeTag(2) + protowire.SizeBytes(proto.Size(u))
		if size > maxMessage {
			break
		}
		m.BucketQuotaUsages = append(m.BucketQuotaUsages, u)
	}
	return m
}

// entries returns a bucket id of n entries, keys of kb bytes and values of
// vb bytes, distinct for each i.
func entries(i, n, kb, vb int) map[string]string {
	id := make(map[string]string, n)
	for j := range n {
		k := fmt.Sprintf("%d-%d-", j, i)
		v := ""
		if vb > 0 {
			v = fmt.Sprintf("%d-", i)
		}
		id[k+strings.Repeat("k", max(kb-len(k), 0))] = v + strings.Repeat("v", max(vb-len(v), 0))
	}
	return id
}

// TestWorstReportMemory: the worst report a client can send within the
// message bound (256 KiB) and Options.MaxBuckets (1,000): the most buckets
// of the most entries, or the longest keys and values the limits allow
// (16 entries of 256-byte keys and 4,096-byte values) — decoded as gRPC
// decodes it, then handled — allocates at most reportBudget bytes per byte
// of the message; and a stream fed such reports of new buckets until it is
// refused holds at most Options.MaxBucketBytes of bucket ids (ids and their
// index: streamBudget bytes per byte of id).
func TestWorstReportMemory(t *testing.T) {
	const reportBudget = 40      // bytes allocated per byte of message
	const streamBudget = 8 << 20 // bytes a stream holds
	cases := []struct {
		name string
		id   func(i int) map[string]string
	}{
		{"1000 buckets of 1 entry", func(i int) map[string]string { return entries(i, 1, 120, 120) }},
		{"1000 buckets of 16 entries", func(i int) map[string]string { return entries(i, 16, 8, 4) }},
		{"longest entries", func(i int) map[string]string { return entries(i, 16, 256, 4096) }},
		{"1000 buckets of empty values", func(i int) map[string]string { return entries(i, 16, 12, 0) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := storetest.NewClock()
			st := newSimStore(t, "memory", clock.Now)
			eng, src := simEngineOn(t, st, simRules)
			srv, err := New(eng, src, Options{Allotter: st, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			m := fill(srv.opts.MaxBuckets, tc.id)
			wire, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			ss := srv.newSession()
			var herr error
			got := allocated(func() {
				var in rlqspb.RateLimitQuotaUsageReports
				if err := proto.Unmarshal(wire, &in); err != nil {
					herr = err
					return
				}
				_, herr = ss.handle(context.Background(), clock.Now(), &in)
			})
			t.Logf("%d buckets in %d bytes: %d bytes allocated (%.1f a byte)", len(m.BucketQuotaUsages), len(wire), got, float64(got)/float64(len(wire)))
			if herr != nil {
				t.Fatalf("handle: %v", herr)
			}
			if budget := uint64(reportBudget * len(wire)); got > budget {
				t.Errorf("a report of %d bytes allocated %d bytes, want at most %d (%d a byte)", len(wire), got, budget, reportBudget)
			}

			// One stream, new buckets in every report, until it is refused.
			ss = srv.newSession()
			base := inUse()
			var idBytes, sent int
			for r := 0; ; r++ {
				m := fill(srv.opts.MaxBuckets, func(i int) map[string]string { return tc.id(r*srv.opts.MaxBuckets + i) })
				_, err := ss.handle(context.Background(), clock.Now(), m)
				if err != nil {
					if status.Code(err) != codes.ResourceExhausted {
						t.Fatalf("report %d: %v, want ResourceExhausted at the stream's bound", r, err)
					}
					t.Logf("report %d refused: %v", r, err)
					break
				}
				sent += proto.Size(m)
				if r > 10_000 {
					t.Fatal("no bound on a stream's buckets")
				}
			}
			for _, b := range ss.buckets {
				for k, v := range b.id.GetBucket() {
					idBytes += len(k) + len(v)
				}
			}
			held := int64(inUse()) - int64(base)
			t.Logf("stream: %d buckets, %d bytes of ids, %d bytes sent, %d bytes held", len(ss.buckets), idBytes, sent, held)
			if idBytes > srv.opts.MaxBucketBytes || len(ss.buckets) > srv.opts.MaxBuckets {
				t.Errorf("the stream holds %d buckets of %d bytes of ids, want at most %d and %d", len(ss.buckets), idBytes, srv.opts.MaxBuckets, srv.opts.MaxBucketBytes)
			}
			if held > streamBudget {
				t.Errorf("a stream holding %d bytes of bucket ids holds %d bytes, want at most %d", idBytes, held, streamBudget)
			}
			runtime.KeepAlive(ss)
		})
	}
}

// TestMaxBucketBytes: a new bucket past Options.MaxBucketBytes ends the
// stream with ResourceExhausted naming the bound; buckets abandoned make
// room again.
func TestMaxBucketBytes(t *testing.T) {
	clock := storetest.NewClock()
	st := newSimStore(t, "memory", clock.Now)
	eng, src := simEngineOn(t, st, simRules)
	srv, err := New(eng, src, Options{Allotter: st, Now: clock.Now, MaxBucketBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	report := func(ss *session, ids ...map[string]string) error {
		m := &rlqspb.RateLimitQuotaUsageReports{Domain: simDomain}
		for _, id := range ids {
			m.BucketQuotaUsages = append(m.BucketQuotaUsages, usage(id, 1, 0))
		}
		_, err := ss.handle(context.Background(), clock.Now(), m)
		return err
	}
	id := func(i int) map[string]string { return entries(i, 1, 20, 20) } // 40 bytes
	ss := srv.newSession()
	if err := report(ss, id(0), id(1)); err != nil {
		t.Fatalf("80 bytes of ids: %v, want accepted", err)
	}
	if err := report(ss, id(0), id(1)); err != nil {
		t.Fatalf("the same buckets again: %v, want accepted", err)
	}
	err = report(ss, id(2))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "would hold 120 bytes, at most 100 (max bucket bytes)") {
		t.Fatalf("120 bytes of ids: %v, want ResourceExhausted naming 120 bytes and the bound", err)
	}

	ss = srv.newSession()
	if err := report(ss, id(0), id(1)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(srv.opts.AbandonAfter)
	resp := ss.tick(context.Background(), clock.Now())
	if n := len(resp.GetBucketAction()); n != 2 || len(ss.buckets) != 0 {
		t.Fatalf("tick after AbandonAfter: %d actions, %d buckets left; want 2 abandoned, none left", n, len(ss.buckets))
	}
	if err := report(ss, id(2), id(3)); err != nil {
		t.Errorf("new buckets after the old were abandoned: %v, want accepted", err)
	}
}

// FuzzHandle: any message a client can send is handled or refused with
// InvalidArgument or ResourceExhausted, never a panic, and a stream never
// holds more buckets or bucket bytes than its bounds. Seeds include the
// worst reports of TestWorstReportMemory and nested unknown fields.
func FuzzHandle(f *testing.F) {
	seed := func(m *rlqspb.RateLimitQuotaUsageReports) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(map[string]string{"tenant": "acme", "route": "api"}, 3, 1), usage(map[string]string{"tenant": "free", "route": "x"}, 1, 0)}})
	seed(fill(1000, func(i int) map[string]string { return entries(i, 16, 8, 4) }))
	seed(fill(1000, func(i int) map[string]string { return entries(i, 16, 256, 4096) }))
	seed(&rlqspb.RateLimitQuotaUsageReports{Domain: simDomain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		usage(map[string]string{"tenant": ""}, 1, 0), usage(map[string]string{}, 1, 0)}})
	// Unknown groups nested 5,000 deep, inside a usage and at the top.
	var nested []byte
	for range 5000 {
		nested = protowire.AppendTag(nested, 99, protowire.StartGroupType)
	}
	for range 5000 {
		nested = protowire.AppendTag(nested, 99, protowire.EndGroupType)
	}
	f.Add(nested)
	u := protowire.AppendTag(nil, 2, protowire.BytesType)
	f.Add(protowire.AppendBytes(u, nested))

	clock := storetest.NewClock()
	st := newSimStore(f, "memory", clock.Now)
	eng, src := simEngineOn(f, st, simRules)
	srv, err := New(eng, src, Options{Allotter: st, Now: clock.Now, MaxBuckets: 50, MaxBucketBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m rlqspb.RateLimitQuotaUsageReports
		if proto.Unmarshal(b, &m) != nil {
			return // gRPC refuses it before the server sees it
		}
		ss := srv.newSession()
		for range 2 { // a second report finds the first's buckets
			_, err := ss.handle(context.Background(), clock.Now(), &m)
			if c := status.Code(err); err != nil && c != codes.InvalidArgument && c != codes.ResourceExhausted {
				t.Fatalf("handle: %v, want InvalidArgument or ResourceExhausted", err)
			}
			if n := len(ss.buckets); n > srv.opts.MaxBuckets {
				t.Fatalf("%d buckets, at most %d", n, srv.opts.MaxBuckets)
			}
			held := 0
			for _, b := range ss.buckets {
				held += idSize(b.id.GetBucket())
			}
			if held > srv.opts.MaxBucketBytes {
				t.Fatalf("%d bytes of bucket ids, at most %d", held, srv.opts.MaxBucketBytes)
			}
		}
	})
}
