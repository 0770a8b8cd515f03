package redis

import (
	"testing"

	"github.com/sluice-rl/sluice/store/stack"
)

// Every op key maps to a Redis key and back, except a key that is a whole
// hash tag, which shares its Redis key with the tag; keys the store did not
// write map to nothing.
func TestOpKey(t *testing.T) {
	s := &Store{prefix: "p:"}
	for _, k := range []string{"", "a", "{t}:a", "a:{t}", "kl:{", "kl:}{}", "{}", "{{x}}", "*?[x]\\", "{", "}"} {
		for _, a := range stack.Algorithms() {
			rk := redisKey(s.prefix, a, k)
			if got, ok := s.opKey(rk); !ok || got != k {
				t.Errorf("opKey(%q) = %q, %v; want %q (the key of %q under %v)", rk, got, ok, k, k, a)
			}
		}
	}
	for rk, want := range map[string]string{
		"p:g{x}":      "x", // also op key "{x}": the same Redis key
		"p:g{x}:a":    "{x}:a",
		"p:g{{x}}":    "{{x}}", // tagged ("{x"): stored as it is
		"p:t{a}{b}":   "a}{b",  // wrapped: "a}{b" has no tag of its own
		"p:s{}":       "",
		"p:o{t}:rest": "{t}:rest",
	} {
		if got, ok := s.opKey(rk); !ok || got != want {
			t.Errorf("opKey(%q) = %q, %v; want %q", rk, got, ok, want)
		}
	}
	for _, rk := range []string{"p:", "q:g{x}", "p:zx", "p:gx", "p:g{x", "p:gab"} {
		if got, ok := s.opKey(rk); ok {
			t.Errorf("opKey(%q) = %q, want no op key (not written by the store)", rk, got)
		}
	}
}

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{
		"plain:{tag}": "plain:{tag}",
		`*?[a-z]\^`:   `\*\?\[a\-z\]\\\^`,
	} {
		if got := globEscape(in); got != want {
			t.Errorf("globEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
