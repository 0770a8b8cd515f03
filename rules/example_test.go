package rules_test

import (
	"fmt"

	"github.com/sluice-rl/sluice/rules"
)

func ExampleParse() {
	file := `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {name: per_user, algorithm: gcra, window: 90s, requests_per_unit: 30, burst: 5}
`
	snap, err := rules.Parse("edge.yaml", []byte(file), rules.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	r := snap.Match("edge", []rules.Entry{{Key: "tenant", Value: "acme"}, {Key: "user", Value: "alice"}})
	fmt.Println(r.ID, r.Name, r.Limit)
	fmt.Println(snap.Match("edge", []rules.Entry{{Key: "tenant", Value: "other"}, {Key: "user", Value: "alice"}}) == nil)

	_, err = rules.Parse("bad.yaml", []byte("domain: edge\ndescriptors:\n  - key: ip\n    rate_limit: {unit: fortnight}\n"), rules.Options{})
	fmt.Println(err)
	// Output:
	// tenant=acme.user per_user 30/1m30s gcra burst 5
	// true
	// bad.yaml:4: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want one of second, minute, hour, day, week, month, year)
}
