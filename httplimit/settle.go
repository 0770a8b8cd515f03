package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluice-rl/sluice/algorithm"
	"github.com/sluice-rl/sluice/service"
)

// Costs known only after the response: the check charges an estimate
// (Config.Cost), and once the handler has returned the middleware charges
// or refunds the difference from the real cost (ReportCost,
// Config.ActualCost), through the Checker's Charge.

// costKey is the context key of a request's costReport.
type costKey struct{}

// costReport holds the cost a handler reported with ReportCost.
type costReport struct {
	cost atomic.Uint64
	set  atomic.Bool
}

// ReportCost tells the middleware what request r really cost, once known
// (a GraphQL query's points, tokens served): when the handler returns, the
// difference from what the check charged (Config.Cost) is charged, or
// refunded. Call it from the handler with the request it was given (or one
// derived from it), before the handler returns; the last report wins. It
// reports whether a middleware with Config.CostReports heard it. Safe for
// concurrent use.
func ReportCost(r *http.Request, cost uint64) bool {
	rep, ok := r.Context().Value(costKey{}).(*costReport)
	if !ok {
		return false
	}
	rep.cost.Store(cost)
	rep.set.Store(true)
	return true
}

// recorder notes the status and body size a handler writes, for
// Config.ActualCost. It unwraps for http.ResponseController and passes
// Flush on.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *recorder) WriteHeader(code int) {
	if w.status == 0 && code >= 200 { // 1xx are informational
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Flush implements http.Flusher when the wrapped writer can flush.
func (w *recorder) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Unwrap returns the wrapped writer, for http.ResponseController.
func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// written is what the handler wrote.
func (w *recorder) written() Written {
	st := w.status
	if st == 0 {
		st = http.StatusOK
	}
	return Written{Status: st, Bytes: w.bytes}
}

// serveSettled runs the handler of an admitted request whose real cost is
// settled once it returns (not when it panics: the estimate stands), and
// then gives back its concurrency slots. It owns sc and returns it to the
// pool.
func (h *Handler) serveSettled(w http.ResponseWriter, r *http.Request, sc *scratch) {
	var rep *costReport
	if h.cfg.CostReports {
		rep = new(costReport)
		r = r.WithContext(context.WithValue(r.Context(), costKey{}, rep))
	}
	var rec *recorder
	if h.cfg.ActualCost != nil {
		rec = &recorder{ResponseWriter: w}
		w = rec
	}
	returned := false
	defer func() {
		if returned {
			h.settleCharge(r, sc, rep, rec)
		}
		h.releaseAll(r, sc.leases)
		sc.reset()
		scratchPool.Put(sc)
	}()
	h.next.ServeHTTP(w, r)
	returned = true
}

// settleCharge charges or refunds, on each descriptor the check decided,
// the difference between the request's real cost and what the check
// charged it.
func (h *Handler) settleCharge(r *http.Request, sc *scratch, rep *costReport, rec *recorder) {
	var actual uint64
	switch {
	case rep != nil && rep.set.Load():
		actual = rep.cost.Load()
	case rec != nil:
		c, ok := h.cfg.ActualCost(r, rec.written())
		if !ok {
			return
		}
		actual = c
	default:
		return
	}
	cost := int64(min(actual, algorithm.MaxExact))
	h.charge(r, sc, func(charged int64) int64 { return cost - charged })
}

// refundCheck gives back what the check charged a request that was
// admitted but then refused (a leaky_bucket delay over MaxDelay) or
// dropped (its client left during the delay) before the handler ran.
func (h *Handler) refundCheck(r *http.Request, sc *scratch) {
	if sc.charged {
		h.charge(r, sc, func(charged int64) int64 { return -charged })
	}
}

// settleTimeout bounds one settlement's store call.
const settleTimeout = 5 * time.Second

// charge settles, for each descriptor the check charged (or would have,
// for one a shadow-mode rule denied, which is charged nothing), the cost
// delta(charged) returns. It runs after the response, when the request's
// context may be cancelled, so it uses one of its own.
func (h *Handler) charge(r *http.Request, sc *scratch, delta func(charged int64) int64) {
	for i := range sc.resp.Statuses {
		st := &sc.resp.Statuses[i]
		if st.CurrentLimit == nil || st.Unlimited || st.Degraded != service.NotDegraded || i >= len(sc.descs) {
			continue // no counter, or not the store's: a failure mode decided
		}
		charged := int64(sc.hits)
		if st.Shadowed {
			charged = 0 // only looked: see service.Engine.Check
		}
		if c := delta(charged); c != 0 {
			sc.costs = append(sc.costs, service.ChargeDescriptor{Entries: sc.descs[i].Entries, Cost: c})
		}
	}
	if len(sc.costs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), settleTimeout)
	defer cancel()
	if _, err := h.charger.Charge(ctx, service.ChargeRequest{Domain: h.cfg.Domain, Descriptors: sc.costs}); err != nil && h.cfg.OnError != nil {
		h.cfg.OnError(r, fmt.Errorf("httplimit: charge: %w", err))
	}
}
