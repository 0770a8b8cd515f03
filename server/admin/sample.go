package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// sample serves GET /admin/v1/sample.
func (h *handler) sample(w http.ResponseWriter, _ *http.Request, _ string) {
	if h.opts.Sample == nil {
		problem(w, http.StatusServiceUnavailable, "the server keeps no sample of checks (sluice serve --sample-size 0)", nil)
		return
	}
	reply(w, http.StatusOK, SampleToJSON(h.opts.Sample))
}

// SampleJSON is the answer of GET /admin/v1/sample: the server's sample
// of recent checks, oldest first (service.Sample).
type SampleJSON struct {
	// Size is how many checks the sample keeps at most; Every, that one
	// check in Every is recorded.
	Size     int                  `json:"size"`
	Every    int                  `json:"every"`
	Requests []SampledRequestJSON `json:"requests"`
}

// SampledRequestJSON is one sampled check.
type SampledRequestJSON struct {
	Domain      string                  `json:"domain"`
	Hits        uint64                  `json:"hits,omitempty"`
	Descriptors []SampledDescriptorJSON `json:"descriptors"`
}

// SampledDescriptorJSON is one descriptor of a sampled check and the rule
// that matched it then.
type SampledDescriptorJSON struct {
	Entries []EntryJSON `json:"entries"`
	Hits    *uint64     `json:"hits,omitempty"`
	// Limit is a limit the descriptor gave itself (envoy's limit): a
	// rules.Spec of requests_per_unit and unit (rules.RequestLimit).
	Limit *rules.Spec `json:"limit,omitempty"`
	// Rule is the ID of the rule that matched; absent when none did.
	Rule      string `json:"rule,omitempty"`
	Unlimited bool   `json:"unlimited,omitempty"`
	// RuleLimit is the rule's limit, absent when Rule is or it is unlimited.
	RuleLimit *RuleLimitJSON `json:"rule_limit,omitempty"`
	Denied    bool           `json:"denied,omitempty"`
}

// RuleLimitJSON is a rule's limit.
type RuleLimitJSON struct {
	Algorithm string `json:"algorithm"`
	Quota     int64  `json:"quota"`
	Burst     int64  `json:"burst,omitempty"`
	Window    string `json:"window"`
}

// SampleToJSON renders a sample.
func SampleToJSON(s *service.Sample) SampleJSON {
	out := SampleJSON{Size: s.Size(), Every: s.Every(), Requests: []SampledRequestJSON{}}
	for _, sr := range s.Requests() {
		rj := SampledRequestJSON{Domain: sr.Request.Domain, Hits: sr.Request.Hits}
		for i, d := range sr.Request.Descriptors {
			dj := SampledDescriptorJSON{Hits: d.Hits}
			for _, e := range d.Entries {
				dj.Entries = append(dj.Entries, EntryJSON{Key: e.Key, Value: e.Value})
			}
			if d.Limit != nil {
				dj.Limit = &rules.Spec{RequestsPerUnit: int64(d.Limit.RequestsPerUnit), Unit: d.Limit.Unit}
			}
			if i < len(sr.Matched) {
				m := sr.Matched[i]
				dj.Rule, dj.Unlimited, dj.Denied = m.Rule, m.Unlimited, m.Denied
				if m.Rule != "" && !m.Unlimited {
					dj.RuleLimit = &RuleLimitJSON{Algorithm: m.Limit.Algorithm.String(), Quota: m.Limit.Quota, Burst: m.Limit.Burst, Window: m.Limit.Window.String()}
				}
			}
			rj.Descriptors = append(rj.Descriptors, dj)
		}
		out.Requests = append(out.Requests, rj)
	}
	return out
}

// Sampled returns the sample as the engine's types, for service.Preview.
// Every field is checked; the first bad one is named in the error.
func (s SampleJSON) Sampled() ([]service.SampledRequest, error) {
	out := make([]service.SampledRequest, 0, len(s.Requests))
	for i, rj := range s.Requests {
		sr := service.SampledRequest{Request: service.Request{Domain: rj.Domain, Hits: rj.Hits}}
		for j, dj := range rj.Descriptors {
			field := fmt.Sprintf("requests[%d].descriptors[%d]", i, j)
			d := service.Descriptor{Hits: dj.Hits}
			for _, e := range dj.Entries {
				d.Entries = append(d.Entries, rules.Entry{Key: e.Key, Value: e.Value})
			}
			if dj.Limit != nil {
				tl, err := dj.Limit.TierLimit(rules.RequestLimit)
				if err != nil {
					var se rules.SpecErrors
					if errors.As(err, &se) {
						err = se.At(field + ".limit")
					}
					return nil, err
				}
				d.Limit = &service.LimitOverride{RequestsPerUnit: tl.RequestsPerUnit, Unit: tl.Unit}
			}
			m := service.SampledMatch{Rule: dj.Rule, Unlimited: dj.Unlimited, Denied: dj.Denied}
			if rl := dj.RuleLimit; rl != nil {
				alg, err := sluice.ParseAlgorithm(rl.Algorithm)
				if err != nil {
					return nil, fmt.Errorf("%s.rule_limit.algorithm: %w", field, err)
				}
				win, err := time.ParseDuration(rl.Window)
				if err != nil {
					return nil, fmt.Errorf("%s.rule_limit.window: %w", field, err)
				}
				m.Limit = sluice.Limit{Algorithm: alg, Quota: rl.Quota, Burst: rl.Burst, Window: win}
			}
			sr.Request.Descriptors = append(sr.Request.Descriptors, d)
			sr.Matched = append(sr.Matched, m)
		}
		out = append(out, sr)
	}
	return out, nil
}
