package service

import (
	"sync"
	"sync/atomic"

	"github.com/sluice-rl/sluice/rules"
)

// detailedLabels remembers the label values detailed_metric rules have
// created, up to RequestBounds.MaxDetailedMetricValues, so that request values
// cannot grow the metric series without bound. The zero value is ready;
// safe for concurrent use.
type detailedLabels struct {
	seen     sync.Map // domain + "\x00" + label → struct{}
	n        atomic.Int64
	overflow atomic.Uint64
}

// label returns the rule label for one decision of a detailed_metric rule:
// the request's entries when that label value is already in use or there is
// room for one more, else the rule's ID (its series without
// detailed_metric), counting the overflow.
func (d *detailedLabels) label(lim RequestBounds, domain, ruleID string, entries []rules.Entry) string {
	l := detailedLabel(entries)
	key := domain + "\x00" + l
	if _, ok := d.seen.Load(key); ok {
		return l
	}
	max := int64(lim.withDefaults().MaxDetailedMetricValues)
	if max >= 0 && d.n.Add(1) > max {
		d.n.Add(-1)
		d.overflow.Add(1)
		return ruleID
	}
	if max < 0 {
		d.n.Add(1)
	}
	if _, loaded := d.seen.LoadOrStore(key, struct{}{}); loaded {
		d.n.Add(-1)
	}
	return l
}

// DetailedMetricValues returns how many distinct label values rules with
// detailed_metric: true have created so far (at most
// RequestBounds.MaxDetailedMetricValues). Safe for concurrent use.
func (e *Engine) DetailedMetricValues() int { return int(e.detailed.n.Load()) }

// DetailedMetricOverflow returns how many decisions of detailed_metric rules
// were counted under their rule's own label because
// RequestBounds.MaxDetailedMetricValues label values were already in use. Safe for
// concurrent use.
func (e *Engine) DetailedMetricOverflow() uint64 { return e.detailed.overflow.Load() }
