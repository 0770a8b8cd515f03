package httplimit

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/sluice-rl/sluice/headers"
	"github.com/sluice-rl/sluice/shed"
)

// DefaultPriorityHeader is the request header ShedConfig reads the caller's
// priority class from when Priority is nil.
const DefaultPriorityHeader = "Sluice-Priority"

// ShedConfig configures load shedding in front of a handler (see Shed).
type ShedConfig struct {
	// Shedder decides. Required.
	Shedder *shed.Shedder
	// Priority gives the class the caller asks for: the value of the entry
	// it returns ("critical", "default", "sheddable", "test"). Any KeyFunc
	// works, so the class can come from a header, a descriptor entry's
	// source or a static value. The Shedder's routes decide how high a
	// caller may go. nil reads the Sluice-Priority header.
	Priority KeyFunc
	// Route returns what the Shedder's route prefixes are matched against;
	// nil means the URL path.
	Route func(*http.Request) string
}

// ShedHandler sheds load in front of a handler. It is safe for concurrent
// use.
type ShedHandler struct {
	next http.Handler
	cfg  ShedConfig
}

// Shed returns a handler that asks cfg.Shedder about every request before
// next sees it. A shed request gets 503 with Retry-After and a problem+json
// body naming the layer that shed it ("layer": "worker_utilization",
// "adaptive_concurrency" or "fleet_usage") and its class; next never runs.
//
// Put it outside the rate-limit middleware (Shed(New(app, …), …)): a
// request is then shed before any rate limit is charged, so a shed request
// costs its caller no quota. A request the rate limits refuse (429) gives
// its shedding slot back without counting its latency, and so does one they
// answer 503 (Config.Shed, FailClosed, MaxDelay). A 5xx of next is a
// Dropped request: not a latency sample (a backend failing fast would look
// unloaded) but a sign to lower the adaptive limit (shed.Outcome).
func Shed(next http.Handler, cfg ShedConfig) (*ShedHandler, error) {
	var errs []error
	if next == nil {
		errs = append(errs, errors.New("next handler is nil"))
	}
	if cfg.Shedder == nil {
		errs = append(errs, errors.New("ShedConfig.Shedder is nil"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.Priority == nil {
		cfg.Priority = Header("priority", DefaultPriorityHeader)
	}
	return &ShedHandler{next: next, cfg: cfg}, nil
}

// ServeHTTP implements http.Handler.
func (h *ShedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	route := r.URL.Path
	if h.cfg.Route != nil {
		route = h.cfg.Route(r)
	}
	claimed := ""
	if e, ok := h.cfg.Priority(r); ok {
		claimed = e.Value
	}
	p := h.cfg.Shedder.Classify(route, claimed)
	t, refused := h.cfg.Shedder.Admit(r.Context(), p)
	if refused != nil {
		WriteShed(w, refused)
		return
	}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		// A refusal by the rate limits (429, or their own 503), or a client
		// that left, says nothing about the capacity behind us; a 5xx of
		// the handler says it is failing, however fast it answered.
		refused := sw.refused || sw.status == http.StatusTooManyRequests
		t.Done(context.WithoutCancel(r.Context()), shed.OutcomeOf(r.Context().Err(), sw.status >= 500, refused))
	}()
	h.next.ServeHTTP(sw, r)
}

// noteRefused tells the ShedHandler around w, if any, that the rate limits
// refused the request: its status (a 503 among them) is not the handler's.
func noteRefused(w http.ResponseWriter) {
	for {
		switch v := w.(type) {
		case *statusWriter:
			v.refused = true
			return
		case interface{ Unwrap() http.ResponseWriter }:
			w = v.Unwrap()
		default:
			return
		}
	}
}

// WriteShed answers a shed request: 503, Retry-After in whole seconds (at
// least 1), Cache-Control: no-store and a problem+json body with the layer
// and the class.
func WriteShed(w http.ResponseWriter, r *shed.Refusal) {
	w.Header()["Retry-After"] = []string{strconv.FormatInt(max(headers.Seconds(r.RetryAfter), 1), 10)}
	headers.WriteProblem(w, headers.Shed(r.Layer.String(), r.Priority.String(), r.Detail))
}

// statusWriter remembers the status a handler sent, and whether the rate
// limits refused the request (noteRefused).
type statusWriter struct {
	http.ResponseWriter
	status  int
	refused bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes on to the underlying writer when it can flush.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
