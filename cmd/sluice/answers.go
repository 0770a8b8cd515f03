package main

import (
	"fmt"

	"github.com/sluice-rl/sluice/internal/strictjson"
	"github.com/sluice-rl/sluice/server/admin"
	"github.com/sluice-rl/sluice/server/api"
)

// maxAnswerItems bounds each list the commands decode from a server's
// answer (statuses of a check, switches, rules in force): far above what a
// server holds, and what keeps a 16 MiB answer of empty objects from
// costing gigabytes (an empty object is 3 bytes, its Go value up to 200).
const maxAnswerItems = 1 << 16

// ruleInForce is a rule as /debug/rules shows it, for what switch needs.
type ruleInForce struct{ Domain, ID, Switch string }

var answers = strictjson.New(
	strictjson.MaxItems[api.CheckStatus](maxAnswerItems, tooManyItems),
	strictjson.MaxItems[admin.SwitchJSON](maxAnswerItems, tooManyItems),
	strictjson.MaxItems[ruleInForce](maxAnswerItems, tooManyItems),
)

func tooManyItems(n int) string {
	return fmt.Sprintf("%d items, more than the %d this command reads", n, maxAnswerItems)
}

// decodeAnswer decodes a server's answer (read at most maxAdminAnswer
// bytes) into v: leniently, since a newer server may add members, and in
// memory linear in the answer and within maxAnswerItems per list.
func decodeAnswer(b []byte, v any) error { return answers.DecodeLenient(b, v) }
