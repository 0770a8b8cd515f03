package redis

import (
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/store/stack"
)

// A claim's Redis key is in the slot of the counter it names (so a
// Cluster serves it from the counter's node), and no counter of any
// algorithm, nor Keys's patterns, shares its first letter.
func TestClaimKey(t *testing.T) {
	for _, key := range []string{"{llm|team=a}|r:team|10/3600s|n50", "h{llm|team=a}|r:team|n80", "plain-key|n50"} {
		counter := strings.TrimSuffix(key, key[strings.LastIndex(key, "|"):])
		ck := redisClaimKey("p:", key)
		for _, a := range stack.Algorithms() {
			if _, tagged := hashTag(key); tagged && slotOf(ck) != slotOf(redisKey("p:", a, counter)) {
				t.Errorf("claim %q in slot %d, counter %q (%v) in %d", ck, slotOf(ck), counter, a, slotOf(redisKey("p:", a, counter)))
			}
			if algLetter[a] == claimLetter {
				t.Errorf("algorithm %v has the claim's letter", a)
			}
		}
		if !strings.HasPrefix(ck, "p:"+claimLetter) || strings.Contains(nativeLetters, claimLetter) {
			t.Errorf("claim key %q", ck)
		}
	}
}
