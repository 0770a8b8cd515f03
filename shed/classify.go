package shed

import (
	"sort"
	"strconv"
	"strings"
)

// Route gives the requests whose route starts with Prefix their priority.
//
// A request's class is what its caller asked for (a header, gRPC metadata or
// a descriptor entry), capped at Max; a caller that asks for nothing, or for
// a class the server does not know, gets Default. A caller may always ask
// for a lower class than the route's default (a batch job marking itself
// sheddable), but never for one above Max: the route decides whether callers
// may raise their priority, by setting Max above Default. With Max left
// empty, Max is Default, so callers can lower their class and never raise it.
type Route struct {
	// Prefix is matched against the route: the URL path for HTTP, the full
	// method ("/pkg.Service/Method") for gRPC. The longest matching prefix
	// wins; "" matches everything.
	Prefix string `yaml:"prefix" json:"prefix"`
	// Default is the class of requests that ask for none. Zero: Default.
	Default Priority `yaml:"default" json:"default"`
	// Max is the highest class a caller may ask for on this route. Zero: the
	// route's Default.
	Max Priority `yaml:"max" json:"max"`
}

// PriorityConfig configures a Classifier.
type PriorityConfig struct {
	// Default is the class of requests on no route that ask for none. Zero:
	// Default.
	Default Priority `yaml:"default" json:"default"`
	// Max is the highest class a caller may ask for on no route. Zero: the
	// Default above.
	Max Priority `yaml:"max" json:"max"`
	// Routes override Default and Max for route prefixes.
	Routes []Route `yaml:"routes" json:"routes"`
}

// MaxRoutes bounds the number of routes of a Classifier.
const MaxRoutes = 10_000

func (c PriorityConfig) validate(path string, errs *FieldErrors) {
	if len(c.Routes) > MaxRoutes {
		errs.add(path+".routes", "%d routes, more than the maximum %d", len(c.Routes), MaxRoutes)
	}
	check := func(p string, def, mx Priority) {
		if mx != Unspecified && mx.norm() < def.norm() {
			errs.add(p+".max", "%v is below the route's default %v (callers may always lower their class; max is how high they may raise it)", mx, def.norm())
		}
	}
	check(path, c.Default, c.Max)
	seen := map[string]bool{}
	for i, r := range c.Routes {
		p := path + ".routes[" + strconv.Itoa(i) + "]"
		if seen[r.Prefix] {
			errs.add(p+".prefix", "%q is given twice", r.Prefix)
		}
		seen[r.Prefix] = true
		check(p, r.Default, r.Max)
	}
}

// Classifier gives requests their class. The zero value classifies every
// request as Default and lets no caller raise it. A Classifier is immutable
// and safe for concurrent use.
type Classifier struct {
	routes []Route // longest prefix first; Default and Max resolved
	def    Route
}

// NewClassifier returns the Classifier of a configuration; it reports the
// configuration's problems, if any.
func NewClassifier(c PriorityConfig) (*Classifier, error) {
	var errs FieldErrors
	c.validate("priority", &errs)
	if err := errs.err(); err != nil {
		return nil, err
	}
	resolve := func(r Route) Route {
		r.Default = r.Default.norm()
		if r.Max == Unspecified {
			r.Max = r.Default
		}
		return r
	}
	cl := &Classifier{def: resolve(Route{Default: c.Default, Max: c.Max})}
	for _, r := range c.Routes {
		cl.routes = append(cl.routes, resolve(r))
	}
	sort.SliceStable(cl.routes, func(i, j int) bool { return len(cl.routes[i].Prefix) > len(cl.routes[j].Prefix) })
	return cl, nil
}

// Classify returns the class of a request on route whose caller asked for
// claimed ("" when it asked for nothing).
func (c *Classifier) Classify(route, claimed string) Priority {
	r := Route{Default: Default, Max: Default}
	if c != nil {
		r = c.def
		for _, rr := range c.routes {
			if strings.HasPrefix(route, rr.Prefix) {
				r = rr
				break
			}
		}
	}
	p, ok := ParsePriority(claimed)
	if !ok {
		return r.Default
	}
	return min(p, r.Max)
}
