package service

import (
	"context"
	"regexp"
	"testing"
)

// BenchmarkCheckMoney: the request-path look and the stream-end charge of
// a money budget (key and team), beside the same two descriptors counted
// in hits, on the memory store.
func BenchmarkCheckMoney(b *testing.B) {
	// The same rules counting hits: moneyRules without usage and budget.
	plain := regexp.MustCompile(`usage: \{[^}]*\}, budget: "[0-9.]+"`).ReplaceAllString(moneyRules, "requests_per_unit: 4000000000")
	for _, bc := range []struct {
		name, yaml string
	}{{"hits", plain}, {"money", moneyRules}} {
		h := newHarnessSnap(b, moneySnapOf(b, bc.yaml, moneyPrices), DefaultConfig(), nil)
		for _, call := range []struct {
			name    string
			in, out int64
		}{{"look", 0, 0}, {"charge", 10, 1}} {
			req := call2(bc.name == "money", call.in, call.out)
			b.Run(bc.name+"/"+call.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := h.eng.Check(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// call2 is call("k", "t", "m1", in, out), each descriptor with hits of
// in+out when not money (a money budget ignores hits).
func call2(money bool, in, out int64) Request {
	r := call("k", "t", "m1", in, out)
	if !money {
		for i := range r.Descriptors {
			r.Descriptors[i].Hits = u64(uint64(in + out))
		}
	}
	return r
}
