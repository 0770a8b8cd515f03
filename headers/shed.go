package headers

// Shed is the problem for a 503 sent by a load-shedding layer: Unavailable
// with the layer that shed the request and the request's priority class as
// extension members, so a client (or an operator reading logs) can tell
// which protection refused it.
func Shed(layer, priority, detail string) Problem {
	p := Unavailable(detail)
	p.Layer, p.Priority = layer, priority
	return p
}
