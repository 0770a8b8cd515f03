package xds

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-rl/sluice/rules"
)

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestWorstResourceMemory: the worst RateLimitConfig a management server
// may send (MaxMessageBytes) costs memory in proportion to the rule file
// it can become, not to its count of messages: one that could not become
// a rule file of rules.MaxFileBytes is refused before it is decoded or
// rendered. Measured on main before the bound: a 16 MiB message of empty
// descriptors allocated 1.2 GiB to decode, 1.8 GiB to compile.
func TestWorstResourceMemory(t *testing.T) {
	rl := &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Name: "n"}
	// A 16 MiB resource of empty descriptors (2 bytes each).
	empty := protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "d")
	for len(empty) < MaxMessageBytes-16 {
		empty = protowire.AppendVarint(protowire.AppendTag(empty, configDescriptors, protowire.BytesType), 0)
	}
	// Descriptors nested 10,000 deep, inside out.
	var deep []byte
	for range 10000 {
		deep = protowire.AppendBytes(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "k"), descriptorDescriptors, protowire.BytesType), deep)
	}
	deep = protowire.AppendBytes(protowire.AppendTag(protowire.AppendString(protowire.AppendTag(nil, 2, protowire.BytesType), "d"), configDescriptors, protowire.BytesType), deep)
	// Replaces by the hundred thousand.
	many := &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}
	for range maxMessages {
		many.Replaces = append(many.Replaces, &rlconf.RateLimitReplace{})
	}
	replaces, _ := proto.Marshal(&rlconf.RateLimitConfig{Domain: "d", Descriptors: []*rlconf.RateLimitDescriptor{{Key: "k", RateLimit: many}}})
	// The largest that compile: flat rules, and chains MaxDepth deep.
	flat := &rlconf.RateLimitConfig{Domain: "d"}
	for i := range 11000 {
		flat.Descriptors = append(flat.Descriptors, &rlconf.RateLimitDescriptor{Key: fmt.Sprintf("k%d", i), RateLimit: rl})
	}
	chains := &rlconf.RateLimitConfig{Domain: "d"}
	for i := range 100 {
		d := &rlconf.RateLimitDescriptor{Key: "k", RateLimit: rl}
		for range MaxDepth - 1 {
			d = &rlconf.RateLimitDescriptor{Key: "k", RateLimit: rl, Descriptors: []*rlconf.RateLimitDescriptor{d}}
		}
		d.Key = fmt.Sprintf("k%d", i)
		chains.Descriptors = append(chains.Descriptors, d)
	}
	flatB, _ := proto.Marshal(flat)
	chainsB, _ := proto.Marshal(chains)
	tests := []struct {
		name    string
		b       []byte
		wantErr string
		budget  uint64
	}{
		{"16 MiB of empty descriptors", empty, "more than 131072 descriptors", 1 << 20},
		{"nested 10,000 deep", deep, "nested deeper than 32", 1 << 20},
		{"131,072 replaces", replaces, "more than 131072", 1 << 20},
		{"11,000 rules", flatB, "", 64 << 20},
		{"100 chains 32 deep", chainsB, "", 64 << 20},
	}
	for _, tc := range tests {
		var err error
		res := []*anypb.Any{{TypeUrl: TypeURL, Value: tc.b}}
		got := allocated(func() { _, err = Compile(res, rules.Options{}) })
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: Compile = %.300v, want error %q", tc.name, err, tc.wantErr)
		}
		if got > tc.budget {
			t.Errorf("%s (%d bytes): %d bytes allocated, want at most %d", tc.name, len(tc.b), got, tc.budget)
		}
		t.Logf("%s: %d-byte resource, %d KiB allocated", tc.name, len(tc.b), got>>10)
	}
	// Strings of every kind render as the YAML library reads them back.
	for _, v := range []string{"", "plain", "with: colon", "#hash", "- dash", "'single'", "\"double\"", "back\\slash", "tab\tnew\nline", "\x00\x01\x7f", "ünïcode ✓ \u2028 \U0001F600", "* wild", "&anchor", "*alias", "!tag", "%percent", "@at", "`tick`", "{braces}", "[list]", "yes", "null", "~", "0x1F", "1e3"} {
		cfg := &rlconf.RateLimitConfig{Name: "s", Domain: "d" + v, Descriptors: []*rlconf.RateLimitDescriptor{{Key: "k" + v, Value: v,
			RateLimit: &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_SECOND, RequestsPerUnit: 1, Name: "n" + v}}}}
		snap, err := Compile(mustAny(t, cfg), rules.Options{})
		if err != nil {
			t.Errorf("value %q: Compile = %v", v, err)
			continue
		}
		r := snap.RuleByName("d"+v, "n"+v)
		if r == nil || len(r.Path) != 1 || r.Path[0].Key != "k"+v || r.Path[0].Value != v {
			t.Errorf("value %q: rule %+v, want key %q value %q", v, r, "k"+v, v)
		}
	}
}
