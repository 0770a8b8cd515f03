package rules

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Reasons a rule change is held back (Hold.Reasons; the reason label of
// sluice_rules_reload_held).
const (
	// HoldDomainRemoved: the new rules lack a domain the rules in force have.
	HoldDomainRemoved = "domain_removed"
	// HoldRuleInUse: the new rules lack a rule that saw traffic recently.
	HoldRuleInUse = "rule_in_use"
)

// AllowRemovalFile is the marker file, in a rule directory, that confirms
// the removal of domains and rules a guarded reload holds back. See
// ParseAllowRemoval for its format.
const AllowRemovalFile = ".sluice-allow-removal"

// MaxAllowRemovalBytes bounds the size of the AllowRemovalFile.
const MaxAllowRemovalBytes = 64 << 10

// RuleRef names one rule: its domain and ID.
type RuleRef struct {
	Domain string `json:"domain"`
	ID     string `json:"id"`
}

// String returns "domain/id".
func (r RuleRef) String() string { return r.Domain + "/" + r.ID }

// Removal is what a new snapshot takes away from the one in force.
type Removal struct {
	// Domains lost entirely, sorted.
	Domains []string
	// Rules lost, of domains that stay (the rules of a lost domain are
	// not listed), sorted by domain and ID.
	Rules []RuleRef
}

// Removed returns what next lacks of cur: whole domains, and the rules of
// the domains both have (by domain and ID; a rule whose limit changes is
// not removed).
func Removed(cur, next *Snapshot) Removal {
	var out Removal
	for _, d := range cur.Domains() {
		if !next.HasDomain(d) {
			out.Domains = append(out.Domains, d)
		}
	}
	have := map[RuleRef]bool{}
	for _, r := range next.Rules() {
		have[RuleRef{r.Domain, r.ID}] = true
	}
	for _, r := range cur.Rules() {
		ref := RuleRef{r.Domain, r.ID}
		if !have[ref] && next.HasDomain(r.Domain) {
			out.Rules = append(out.Rules, ref)
		}
	}
	return out
}

// Hold describes a reload held back by a guard: the rules in force stay,
// and these are the removals waiting for the operator's confirmation.
type Hold struct {
	// Since is when the first reload with this removal was held.
	Since time.Time `json:"since"`
	// Reasons are HoldDomainRemoved and/or HoldRuleInUse, sorted.
	Reasons []string `json:"reasons"`
	// Domains are the domains the new rules would remove.
	Domains []string `json:"domains,omitempty"`
	// Rules are the rules the new rules would remove that saw traffic
	// recently (in domains that stay).
	Rules []RuleRef `json:"rules,omitempty"`
}

// Key is a stable spelling of what the hold is about: two holds with the
// same Key hold back the same removal.
func (h *Hold) Key() string {
	var b strings.Builder
	for _, d := range h.Domains {
		b.WriteString("d\x00" + d + "\x00")
	}
	for _, r := range h.Rules {
		b.WriteString("r\x00" + r.Domain + "\x00" + r.ID + "\x00")
	}
	return b.String()
}

// AllowRemoval is the content of an AllowRemovalFile: the removals the
// operator confirmed. The zero value allows nothing.
type AllowRemoval struct {
	all     bool
	domains map[string]bool
	rules   map[RuleRef]bool
}

// ParseAllowRemoval reads an AllowRemovalFile. Each line is one of:
//
//   - every removal is confirmed
//     <domain>            the removal of the domain, or of any of its rules
//     <domain> <rule ID>  the removal of that rule (the ID is the rest of the
//     line, as /debug/rules spells it)
//
// Blank lines and lines starting with # are ignored; leading and trailing
// spaces are trimmed. file names the file in errors, which are Errors with
// the line of each problem. A file above MaxAllowRemovalBytes is an error.
func ParseAllowRemoval(file string, data []byte) (AllowRemoval, error) {
	var a AllowRemoval
	if len(data) > MaxAllowRemovalBytes {
		return a, Errors{{File: file, Msg: fmt.Sprintf("%d bytes, above the limit of %d", len(data), MaxAllowRemovalBytes)}}
	}
	var probs Errors
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), MaxAllowRemovalBytes+1)
	line := 0
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if !isPrintable(s) {
			probs = append(probs, Problem{File: file, Line: line, Msg: "not printable text"})
			continue
		}
		if s == "*" {
			a.all = true
			continue
		}
		domain, id, ok := strings.Cut(s, " ")
		if !ok {
			if a.domains == nil {
				a.domains = map[string]bool{}
			}
			a.domains[domain] = true
			continue
		}
		id = strings.TrimSpace(id)
		if a.rules == nil {
			a.rules = map[RuleRef]bool{}
		}
		a.rules[RuleRef{domain, id}] = true
	}
	if err := sc.Err(); err != nil {
		probs = append(probs, Problem{File: file, Line: line + 1, Msg: err.Error()})
	}
	if len(probs) > 0 {
		return AllowRemoval{}, probs
	}
	return a, nil
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Domain reports whether the removal of domain is confirmed.
func (a AllowRemoval) Domain(domain string) bool { return a.all || a.domains[domain] }

// Rule reports whether the removal of rule r is confirmed.
func (a AllowRemoval) Rule(r RuleRef) bool { return a.all || a.domains[r.Domain] || a.rules[r] }

// Empty reports whether a allows nothing.
func (a AllowRemoval) Empty() bool { return !a.all && len(a.domains) == 0 && len(a.rules) == 0 }

// Guard decides which removals hold a reload back: every removed domain
// whose removal a does not confirm, and every removed rule that inUse says
// saw traffic recently and a does not confirm. inUse may be nil (no rule
// counts as in use). It returns nil when nothing holds the reload; Since is
// left zero for the caller to fill.
func Guard(rm Removal, a AllowRemoval, inUse func(RuleRef) bool) *Hold {
	h := &Hold{}
	for _, d := range rm.Domains {
		if !a.Domain(d) {
			h.Domains = append(h.Domains, d)
		}
	}
	for _, r := range rm.Rules {
		if inUse != nil && inUse(r) && !a.Rule(r) {
			h.Rules = append(h.Rules, r)
		}
	}
	if len(h.Domains) > 0 {
		h.Reasons = append(h.Reasons, HoldDomainRemoved)
	}
	if len(h.Rules) > 0 {
		h.Reasons = append(h.Reasons, HoldRuleInUse)
	}
	if len(h.Reasons) == 0 {
		return nil
	}
	slices.Sort(h.Reasons)
	return h
}
