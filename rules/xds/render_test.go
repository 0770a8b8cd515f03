package xds

import (
	"strings"
	"testing"

	rlconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-rl/sluice/rules"
)

func mustAny(t *testing.T, cfgs ...*rlconf.RateLimitConfig) []*anypb.Any {
	t.Helper()
	out := make([]*anypb.Any, len(cfgs))
	for i, c := range cfgs {
		a, err := anypb.New(c)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = a
	}
	return out
}

// TestCompileFields: every field of a RateLimitConfig reaches the rule.
func TestCompileFields(t *testing.T) {
	cfg := &rlconf.RateLimitConfig{Name: "shop", Domain: "shop", Descriptors: []*rlconf.RateLimitDescriptor{
		{Key: "path", Value: "/cart", DetailedMetric: true, Descriptors: []*rlconf.RateLimitDescriptor{
			{Key: "user", ShadowMode: true, RateLimit: &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_SECOND, RequestsPerUnit: 4, Name: "cart-user",
				Replaces: []*rlconf.RateLimitReplace{{Name: "all"}}}},
		}},
		{Key: "path", RateLimit: &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_DAY, RequestsPerUnit: 1000, Name: "all"}},
		{Key: "health", RateLimit: &rlconf.RateLimitPolicy{Unlimited: true, Name: "free"}},
	}}
	snap, err := Compile(mustAny(t, cfg), rules.Options{})
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	r := snap.RuleByName("shop", "cart-user")
	if r == nil {
		t.Fatal("rule cart-user missing")
	}
	if r.Unit != "second" || r.RequestsPerUnit != 4 || !r.ShadowMode || strings.Join(r.Replaces, ",") != "all" {
		t.Errorf("cart-user = unit %q, rpu %d, shadow %v, replaces %v; want second, 4, true, [all]", r.Unit, r.RequestsPerUnit, r.ShadowMode, r.Replaces)
	}
	if r.File != "xds:shop" {
		t.Errorf("File = %q, want xds:shop", r.File)
	}
	if m := snap.Match("shop", []rules.Entry{{Key: "path", Value: "/cart"}, {Key: "user", Value: "u"}}); m != r {
		t.Errorf("nested match = %v, want cart-user", m)
	}
	if r := snap.RuleByName("shop", "all"); r == nil || r.Unit != "day" || r.RequestsPerUnit != 1000 {
		t.Errorf("all = %+v, want 1000 per day", r)
	}
	if r := snap.RuleByName("shop", "free"); r == nil || !r.Unlimited {
		t.Errorf("free = %+v, want unlimited", r)
	}
}

// TestCompileRejects: what does not compile names the resource and field.
func TestCompileRejects(t *testing.T) {
	deep := &rlconf.RateLimitDescriptor{Key: "k"}
	for range MaxDepth + 1 {
		deep = &rlconf.RateLimitDescriptor{Key: "k", Descriptors: []*rlconf.RateLimitDescriptor{deep}}
	}
	for _, tc := range []struct {
		name string
		cfgs []*rlconf.RateLimitConfig
		want string
	}{
		{"empty set", nil, "no rule files"},
		{"no domain", []*rlconf.RateLimitConfig{{Name: "x", Descriptors: []*rlconf.RateLimitDescriptor{{Key: "k"}}}}, "xds:x:1: domain"},
		{"unknown unit", []*rlconf.RateLimitConfig{{Name: "u", Domain: "d", Descriptors: []*rlconf.RateLimitDescriptor{{Key: "k",
			RateLimit: &rlconf.RateLimitPolicy{RequestsPerUnit: 1}}}}}, `descriptors[0].rate_limit.unit: unknown unit "unknown"`},
		{"replaces nothing", []*rlconf.RateLimitConfig{{Name: "r", Domain: "d", Descriptors: []*rlconf.RateLimitDescriptor{{Key: "k",
			RateLimit: &rlconf.RateLimitPolicy{Unit: rlconf.RateLimitUnit_HOUR, RequestsPerUnit: 1, Replaces: []*rlconf.RateLimitReplace{{Name: "ghost"}}}}}}}, "ghost"},
		{"too deep", []*rlconf.RateLimitConfig{{Name: "deep", Domain: "d", Descriptors: []*rlconf.RateLimitDescriptor{deep}}}, "nested deeper than 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(mustAny(t, tc.cfgs...), rules.Options{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Compile error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
	other, err := anypb.New(&rlconf.RateLimitPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile([]*anypb.Any{other}, rules.Options{}); err == nil || !strings.Contains(err.Error(), "resources[0]: type") {
		t.Errorf("Compile of another type = %v, want a type error naming resources[0]", err)
	}
}
