package xds

import (
	"errors"
	"testing"

	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-rl/sluice/rules"
)

// FuzzCompile feeds arbitrary bytes to Compile as one resource: it never
// panics, and a configuration it renders reads back as the rule file it
// was rendered as (Render's output is YAML the rules package takes or
// refuses with problems, never garbage). Seeds include nested descriptors
// at and past MaxDepth.
func FuzzCompile(f *testing.F) {
	rl := &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_MINUTE, RequestsPerUnit: 3, Name: "n: \"q\"", Replaces: []*rlconf.RateLimitReplace{{Name: "r"}}}
	for _, depth := range []int{1, 2, MaxDepth, MaxDepth + 1} {
		d := &rlconf.RateLimitDescriptor{Key: "k", Value: "v*", RateLimit: rl}
		for range depth - 1 {
			d = &rlconf.RateLimitDescriptor{Key: "k\n", Value: "- x", ShadowMode: true, DetailedMetric: true, Descriptors: []*rlconf.RateLimitDescriptor{d}}
		}
		b, err := proto.Marshal(&rlconf.RateLimitConfig{Name: "f", Domain: "d", Descriptors: []*rlconf.RateLimitDescriptor{d, {Key: "u", RateLimit: &rlconf.RateLimitPolicy{Unlimited: true}}}})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Compile([]*anypb.Any{{TypeUrl: TypeURL, Value: b}}, rules.Options{})
		var cfg rlconf.RateLimitConfig
		if unmarshal(b, &cfg) != nil {
			return
		}
		out, err := Render(&cfg)
		if err != nil {
			return
		}
		if _, err := rules.Parse("fuzz.yaml", out, rules.Options{}); err != nil {
			var errs rules.Errors
			if !errors.As(err, &errs) {
				t.Fatalf("rendering of %v does not parse as YAML rules: %v\n%s", &cfg, err, out)
			}
			for _, p := range errs {
				if len(p.Msg) > 11 && p.Msg[:11] == "YAML syntax" {
					t.Fatalf("rendering of %v is not YAML: %v\n%s", &cfg, p, out)
				}
			}
		}
	})
}
