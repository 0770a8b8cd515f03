package headers

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Reasons a refusal gives, in the "reason" member of problem+json bodies and
// of Sluice's JSON answers.
const (
	// ReasonLimited: over a limit now; Retry-After says when to come back.
	ReasonLimited = "limited"
	// ReasonCostTooHigh: the request costs more than a limit can ever admit.
	// Waiting does not help, so no Retry-After is sent.
	ReasonCostTooHigh = "cost_too_high"
	// ReasonPenalty: the key went over its limit lately and is kept out for
	// the rule's penalty time; Retry-After says when it ends.
	ReasonPenalty = "penalty"
	// ReasonDenyList: the request names an entry on a deny list; waiting
	// does not help, so no Retry-After is sent.
	ReasonDenyList = "deny_list"
	// ReasonUnknownModel: a money budget applies, and the price table
	// prices no model the request names; waiting does not help, so no
	// Retry-After is sent.
	ReasonUnknownModel = "unknown_model"
	// ReasonUnavailable: the limit could not be decided (its store is down
	// and it fails closed) or the server is shedding load: a 503.
	ReasonUnavailable = "unavailable"
)

// QuotaExceededType is the problem type of draft-10 for a 429.
const QuotaExceededType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// Problem is an RFC 9457 problem details object. Status must equal the HTTP
// status it is sent with. The zero value is not a useful problem; use
// QuotaExceeded or Unavailable.
type Problem struct {
	Type     string `json:"type,omitempty"`
	Title    string `json:"title,omitempty"`
	Status   int    `json:"status,omitempty"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	// ViolatedPolicies names the RateLimit-Policy members that refused the
	// request (draft-10's quota-exceeded extension member).
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
	// Layer names the load-shedding layer that refused the request, and
	// Priority the request's class (extension members of a 503 from package
	// shed; see Shed).
	Layer    string `json:"layer,omitempty"`
	Priority string `json:"priority,omitempty"`
	// Reason is Sluice's extension member saying why: ReasonLimited,
	// ReasonCostTooHigh (retrying cannot help) or ReasonUnavailable.
	Reason string `json:"reason,omitempty"`
}

// QuotaExceeded is the problem for a 429: the quota-exceeded type with the
// policies that refused the request.
func QuotaExceeded(violated []string, detail string) Problem {
	return Problem{
		Type:             QuotaExceededType,
		Title:            "Request cannot be satisfied as assigned quota has been exceeded",
		Status:           http.StatusTooManyRequests,
		Detail:           detail,
		ViolatedPolicies: violated,
	}
}

// Unavailable is the problem for a 503 sent while shedding load: not this
// client's fault, so the type is about:blank (the HTTP status says it all).
func Unavailable(detail string) Problem {
	return Problem{
		Type:   "about:blank",
		Title:  http.StatusText(http.StatusServiceUnavailable),
		Status: http.StatusServiceUnavailable,
		Detail: detail,
	}
}

// Marshal renders p as JSON. It is append-based and allocation-light, so a
// 429 costs little to produce; the output is what encoding/json would decode
// back into an equal Problem.
func (p Problem) Marshal() []byte { return p.Append(make([]byte, 0, 256)) }

// Append appends the JSON of p to dst.
func (p Problem) Append(dst []byte) []byte {
	dst = append(dst, '{')
	first := true
	str := func(k, v string) {
		if v == "" {
			return
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendJSONString(dst, k)
		dst = append(dst, ':')
		dst = appendJSONString(dst, v)
	}
	str("type", p.Type)
	str("title", p.Title)
	if p.Status != 0 {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, `"status":`...)
		dst = strconv.AppendInt(dst, int64(p.Status), 10)
	}
	str("detail", p.Detail)
	str("instance", p.Instance)
	if len(p.ViolatedPolicies) > 0 {
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = append(dst, `"violated-policies":[`...)
		for i, v := range p.ViolatedPolicies {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, v)
		}
		dst = append(dst, ']')
	}
	str("layer", p.Layer)
	str("priority", p.Priority)
	str("reason", p.Reason)
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string. Printable ASCII is copied as
// it is (escaping only '"' and '\\'); anything else takes encoding/json's path.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s) // a string always marshals
			return append(dst, b...)
		}
	}
	return appendQuoted(dst, s)
}

// WriteProblem sends p with status p.Status (500 if unset) as
// application/problem+json. It sets Cache-Control: no-store, since a 429 must
// not be cached (RFC 6585 §4).
func WriteProblem(w http.ResponseWriter, p Problem) {
	if p.Status == 0 {
		p.Status = http.StatusInternalServerError
	}
	body := p.Marshal()
	h := w.Header()
	h["Content-Type"] = []string{ContentTypeProblem}
	h["Cache-Control"] = []string{"no-store"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body) // the client may be gone; nothing to do about it
}

// ParseProblem decodes a problem+json body. It is lenient: unknown members are
// ignored.
func ParseProblem(body []byte) (Problem, error) {
	var p Problem
	err := json.Unmarshal(body, &p)
	return p, err
}
