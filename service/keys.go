package service

import (
	"strconv"

	"github.com/sluice-rl/sluice"
	"github.com/sluice-rl/sluice/rules"
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
