package rlsproto

import (
	"errors"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"

	"github.com/sluice-rl/sluice/service"
)

// FuzzFromProto: any RateLimitRequest on the wire converts to a valid
// service.Request or an ErrInvalidRequest error, never a panic.
func FuzzFromProto(f *testing.F) {
	seeds := []*rlsv3.RateLimitRequest{
		{Domain: "edge", HitsAddend: 2},
		{Domain: "edge", Descriptors: nil},
	}
	full := &rlsv3.RateLimitRequest{Domain: "edge"}
	full.Descriptors = append(full.Descriptors, desc("remote_address", "1.2.3.4"), desc("tenant", "acme", "user", ""), desc("", "x"))
	seeds = append(seeds, full)
	// Over the default limits: too many descriptors, a value too long.
	tooMany := &rlsv3.RateLimitRequest{Domain: "edge"}
	for range service.DefaultMaxDescriptors + 1 {
		tooMany.Descriptors = append(tooMany.Descriptors, desc("k", "v"))
	}
	seeds = append(seeds, tooMany, &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		desc("k", strings.Repeat("v", service.DefaultMaxValueBytes+1))}})
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		got, err := FromProto(&req)
		if err != nil {
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("FromProto error %v does not wrap ErrInvalidRequest", err)
			}
			return
		}
		if got.Domain == "" || len(got.Descriptors) != len(req.GetDescriptors()) {
			t.Fatalf("FromProto = %+v for %v: domain empty or descriptors lost", got, &req)
		}
		for i, d := range got.Descriptors {
			if len(d.Entries) != len(req.GetDescriptors()[i].GetEntries()) {
				t.Fatalf("descriptor %d: %d entries, want %d", i, len(d.Entries), len(req.GetDescriptors()[i].GetEntries()))
			}
		}
	})
}
