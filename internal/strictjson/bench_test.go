package strictjson

import (
	"bytes"
	"fmt"
	"testing"
)

// checkRequest mirrors server/api's CheckRequest, the body of /v1/check.
type checkRequest struct {
	Domain      string            `json:"domain"`
	Descriptors []checkDescriptor `json:"descriptors"`
	Hits        *uint64           `json:"hits,omitempty"`
}

type checkDescriptor struct {
	Entries []entry `json:"entries"`
	Hits    *uint64 `json:"hits,omitempty"`
	Limit   *struct {
		RequestsPerUnit uint32 `json:"requests_per_unit"`
		Unit            string `json:"unit"`
	} `json:"limit,omitempty"`
}

// BenchmarkBrackets: a body of '[' only, decoded into /v1/check's request,
// by Decode and by the decoder it replaced (only at 10 KB: it needs memory
// quadratic in the size, 22 GiB at 100 KB).
func BenchmarkBrackets(b *testing.B) {
	for _, size := range []int{10_000, 100_000, 256 << 10} {
		body := bytes.Repeat([]byte("["), size)
		b.Run(fmt.Sprintf("new/%d", size), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Decode(body, &checkRequest{})
			}
		})
		b.Run(fmt.Sprintf("old/%d", size), func(b *testing.B) {
			if size > 10_000 {
				b.Skip("quadratic: 22 GiB at 100 KB (issue 28)")
			}
			b.ReportAllocs()
			for b.Loop() {
				_, _ = oldDecode(body, &checkRequest{})
			}
		})
	}
}

// BenchmarkCheckBody: a usual /v1/check body, by Decode and by the decoder
// it replaced.
func BenchmarkCheckBody(b *testing.B) {
	body := []byte(`{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"203.0.113.7"}]},{"entries":[{"key":"tenant","value":"acme"},{"key":"user","value":"alice"}],"hits":0},{"entries":[{"key":"route","value":"/upload"}],"limit":{"requests_per_unit":5,"unit":"minute"}}],"hits":1}`)
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v checkRequest
			if err := Decode(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("old", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var v checkRequest
			if _, err := oldDecode(body, &v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
