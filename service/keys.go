package service

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/store/stack"
)

// Store keys.
//
// The engine names the counter of one descriptor under one limit as
//
//	{<domain>|<key1>=<value1>}|r:<rule ID>|<limit>|<key2>=<value2>|…
//
// for a rule from the rule files, and as
//
//	{<domain>|<key1>=<value1>}|o|<limit>|<key2>=<value2>|…
//
// for a limit given in the request itself (envoy's descriptor limit
// override), where <limit> is "<algorithm>:<quota>:<window in µs>", followed
// by ":b<burst>" when the limit has a burst; for example
//
//	{edge|remote_address=1.2.3.4}|r:remote_address|fixed_window:10:1000000
//	{edge|tenant=acme}|r:tenant=acme.user|fixed_window:5:1000000|user=alice
//
// Choices, and why:
//   - The Redis Cluster hash tag {…} is the domain and the descriptor's first
//     entry, usually the client or tenant, so every descriptor of a request
//     that starts with the same entry lands in one slot and one request is
//     one round trip. The Redis store keeps a key's hash tag as it is.
//   - The limit is part of the key: a store keeps one state per key and must
//     see one Limit per key, so a reload that changes a rule's limit starts
//     fresh counters instead of reading state kept for another algorithm or
//     window. (envoyproxy/ratelimit keeps counts across such a change; Sluice
//     trades that for never misreading state.)
//   - The rule ID, not its name, identifies the rule: IDs are unique in a
//     domain and stable across reloads.
//   - A wildcard descriptor with share_threshold counts under its pattern,
//     so every matching value shares one counter; otherwise each value has
//     its own.
//   - '%', '|', '{', '}' and '=' inside domains, keys and values, and all
//     but '=' inside rule IDs, are percent-escaped, so distinct descriptors
//     never share a key and a value cannot open or close a hash tag.

// appendEscaped appends s with the key layout's special bytes escaped.
func appendEscaped(b []byte, s string) []byte { return appendEscapedBut(b, s, 0) }

// appendEscapedBut is appendEscaped leaving the byte keep as it is (the rule
// ID segment keeps its '=', which there separates nothing).
func appendEscapedBut(b []byte, s string, keep byte) []byte {
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case keep:
			b = append(b, c)
		case '%', '|', '{', '}', '=':
			b = append(b, '%', hex[c>>4], hex[c&0xF])
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendLimit appends the <limit> part of a key.
func appendLimit(b []byte, l sluice.Limit) []byte {
	b = append(b, l.Algorithm.String()...)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.Quota, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, l.Window.Microseconds(), 10)
	if l.Burst != 0 {
		b = append(b, ":b"...)
		b = strconv.AppendInt(b, l.Burst, 10)
	}
	return b
}

// ruleMiddle is the part of a rule's keys after the hash tag, up to the
// second entry: "}|r:<rule ID>|<limit>".
func ruleMiddle(r *rules.Rule) string {
	b := append([]byte(nil), "}|r:"...)
	b = appendEscapedBut(b, r.ID, '=')
	b = append(b, '|')
	return string(appendLimit(b, r.Limit))
}

// overrideMiddle is ruleMiddle for a limit override.
func overrideMiddle(l sluice.Limit) []byte {
	b := append([]byte(nil), "}|o|"...)
	return appendLimit(b, l)
}

// appendKey appends the key of one descriptor: entries as the request gave
// them, path the matched rule's steps (nil for an override), middle from
// ruleMiddle or overrideMiddle.
func appendKey(b []byte, domain string, entries []rules.Entry, path []rules.Step, middle string) []byte {
	value := func(i int) string {
		if i < len(path) {
			return path[i].Counted(entries[i].Value)
		}
		return entries[i].Value
	}
	b = append(b, '{')
	b = appendEscaped(b, domain)
	b = append(b, '|')
	b = appendEscaped(b, entries[0].Key)
	b = append(b, '=')
	b = appendEscaped(b, value(0))
	b = append(b, middle...)
	for i := 1; i < len(entries); i++ {
		b = append(b, '|')
		b = appendEscaped(b, entries[i].Key)
		b = append(b, '=')
		b = appendEscaped(b, value(i))
	}
	return b
}

// storedKey is a store key taken apart: what ResetTenant and TenantEntries
// read from the keys a stack.KeyLister lists. Strings stay escaped as in the
// key, except in entries.
type storedKey struct {
	key   string
	first string // the first entry, "<key>=<value>" as escaped in the tag
	sub   bool   // the tag ends with a sub-counter's "|s<i>"
	rule  string // the escaped rule ID; "" for a limit given in a request
	limit sluice.Limit
	rest  []string // the entries after the limit, escaped "<key>=<value>"
}

// parseKey takes apart a key of the layout above (with or without a
// placement byte); ok is false for a key of any other shape, which the
// engine did not make.
func parseKey(key string) (k storedKey, ok bool) {
	k.key = key
	s := key
	if s != "" && (s[0] == 'h' || s[0] == 'l') {
		s = s[1:]
	}
	end := strings.IndexByte(s, '}')
	if len(s) == 0 || s[0] != '{' || end < 0 {
		return k, false
	}
	tag := strings.Split(s[1:end], "|")
	switch {
	case len(tag) == 3 && len(tag[2]) > 1 && tag[2][0] == 's':
		k.sub = true
	case len(tag) != 2:
		return k, false
	}
	k.first = tag[1]
	var segs []string
	switch after := s[end+1:]; {
	case strings.HasPrefix(after, "|r:"):
		segs = strings.Split(after[3:], "|")
		if len(segs) < 2 || segs[0] == "" {
			return k, false
		}
		k.rule, segs = segs[0], segs[1:]
	case strings.HasPrefix(after, "|o|"):
		segs = strings.Split(after[3:], "|")
	default:
		return k, false
	}
	k.limit, ok = parseLimit(segs[0])
	k.rest = segs[1:]
	return k, ok
}

// parseLimit reads the <limit> part of a key (appendLimit's output); ok is
// false unless it is a valid limit.
func parseLimit(s string) (sluice.Limit, bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 && len(parts) != 4 {
		return sluice.Limit{}, false
	}
	var l sluice.Limit
	var err error
	if l.Algorithm, err = sluice.ParseAlgorithm(parts[0]); err != nil {
		return l, false
	}
	q, err1 := strconv.ParseInt(parts[1], 10, 64)
	w, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || w <= 0 || w > int64(stack.MaxWindow/time.Microsecond) {
		return l, false
	}
	l.Quota, l.Window = q, time.Duration(w)*time.Microsecond
	if len(parts) == 4 {
		b, ok := strings.CutPrefix(parts[3], "b")
		if !ok {
			return l, false
		}
		if l.Burst, err = strconv.ParseInt(b, 10, 64); err != nil {
			return l, false
		}
	}
	return l, l.Validate() == nil
}

// unescape undoes appendEscaped.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b = append(b, byte(v))
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

// entry reads an escaped "<key>=<value>" back into an Entry.
func entry(kv string) (rules.Entry, bool) {
	k, v, ok := strings.Cut(kv, "=")
	return rules.Entry{Key: unescape(k), Value: unescape(v)}, ok && k != ""
}

// escapedEntry is an entry as keys spell it: "<key>=<value>", escaped.
func escapedEntry(key, value string) string {
	b := appendEscaped(nil, key)
	b = append(b, '=')
	return string(appendEscaped(b, value))
}
