package rules

import (
	"errors"
	"fmt"
	"math/bits"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-rl/sluice/algorithm"
)

// TokenType is one kind of token a model is priced by.
type TokenType uint8

// The token types of a price table, in its file's key order.
const (
	// Input: prompt tokens read at the full price.
	Input TokenType = iota
	// Output: completion tokens.
	Output
	// CachedRead: prompt tokens served from the provider's cache.
	CachedRead
	// CacheWrite: prompt tokens written to the provider's cache.
	CacheWrite
	// Reasoning: reasoning ("thinking") tokens, when the provider counts
	// them apart from output.
	Reasoning
	// NumTokenTypes is the number of token types.
	NumTokenTypes
)

// tokenTypeNames are the keys of the token types, in a price table and in
// a rule's usage.
var tokenTypeNames = [NumTokenTypes]string{"input", "output", "cached_read", "cache_write", "reasoning"}

// String returns the token type's key ("input", "cached_read", …).
func (t TokenType) String() string {
	if t < NumTokenTypes {
		return tokenTypeNames[t]
	}
	return "unknown"
}

// Price is one model's prices: Price[t] is what a million tokens of type t
// cost, in micro-units of the table's currency (2500000 is 2.50 a
// million). A type the table does not give costs 0.
type Price [NumTokenTypes]int64

// MaxPricePerMillion bounds one price in a table: 10^12 micro-units
// (a million of the currency) per million tokens.
const MaxPricePerMillion = 1_000_000_000_000

// MaxPricesBytes bounds the size of a price table file.
const MaxPricesBytes = 1 << 20

// ErrCostOverflow is the error of Price.Cost when a call's cost would be
// more than algorithm.MaxExact micro-units (no counter can hold it).
var ErrCostOverflow = errors.New("rules: cost above the largest count a counter holds")

// Cost returns what tokens (tokens[t] of type t, each at most
// algorithm.MaxExact) cost at these prices, in micro-units of the
// currency: ⌈Σ tokens[t] × p[t] / 10^6⌉, computed exactly in 128-bit
// integers, so that no call that used a token is charged nothing. A cost
// above algorithm.MaxExact returns ErrCostOverflow.
func (p *Price) Cost(tokens *[NumTokenTypes]int64) (int64, error) {
	var hi, lo uint64
	for t := range NumTokenTypes {
		n, c := tokens[t], p[t]
		if n < 0 || n > algorithm.MaxExact {
			return 0, fmt.Errorf("rules: %d %s tokens: want 0 to %d", n, TokenType(t), int64(algorithm.MaxExact))
		}
		if c < 0 || c > MaxPricePerMillion {
			return 0, fmt.Errorf("rules: %s price %d: want 0 to %d", TokenType(t), c, int64(MaxPricePerMillion))
		}
		h, l := bits.Mul64(uint64(n), uint64(c))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry // tokens and prices ≤ 2^53 and 2^40: no wrap of hi
	}
	const million = 1_000_000
	if hi >= million { // the quotient would not fit 64 bits
		return 0, ErrCostOverflow
	}
	q, r := bits.Div64(hi, lo, million)
	if r > 0 {
		q++
	}
	if q > algorithm.MaxExact {
		return 0, ErrCostOverflow
	}
	return int64(q), nil
}

// Prices is a compiled price table: a currency and the Price of each
// model. It is immutable once built; share it freely. A nil *Prices
// prices nothing.
type Prices struct {
	// Currency is the table's currency (an ISO 4217 code such as USD):
	// the unit of every budget counted with it.
	Currency string
	// File names the table's file.
	File string
	// DefaultModel, when not "", names the model whose prices a model
	// absent from the table pays (the table's default_model); "" refuses
	// such a model.
	DefaultModel string
	models       map[string]Price
}

// Price returns the prices of model: its own, else DefaultModel's; ok is
// false when the table has neither (or p is nil). It does not allocate.
func (p *Prices) Price(model string) (price Price, ok bool) {
	if p == nil {
		return Price{}, false
	}
	if pr, ok := p.models[model]; ok {
		return pr, true
	}
	if p.DefaultModel != "" {
		return p.models[p.DefaultModel], true
	}
	return Price{}, false
}

// Models returns the models of the table, sorted.
func (p *Prices) Models() []string {
	if p == nil {
		return nil
	}
	out := make([]string, 0, len(p.models))
	for m := range p.models {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

var currencyCode = regexp.MustCompile(`^[A-Z]{3}$`)

// ParsePrices reads a price table file:
//
//	currency: USD
//	default_model: gpt-4o          # optional: the prices of a model not listed
//	models:
//	  gpt-4o: {input: 2500000, output: 10000000, cached_read: 1250000}
//
// Each price is a whole number of micro-units of the currency per million
// tokens, from 0 to MaxPricePerMillion; a token type not given costs 0.
// Unknown keys, unknown token types, a model given twice, a negative or
// fractional price and a default_model not in the table are errors. file
// names the table in problems; the error, if any, is an Errors with the
// line and field of each problem.
func ParsePrices(file string, data []byte) (*Prices, error) {
	p := &parser{file: file}
	t := p.prices(data)
	if len(p.probs) > 0 {
		p.probs.sort()
		return nil, p.probs
	}
	t.File = file
	return t, nil
}

// LoadPrices reads the price table file at path (see ParsePrices).
func LoadPrices(path string) (*Prices, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, Errors{{File: path, Msg: err.Error()}}
	}
	return ParsePrices(path, data)
}

// prices parses data as a price table, recording problems in p.probs.
func (p *parser) prices(data []byte) (t *Prices) {
	if len(data) > MaxPricesBytes {
		p.add(0, "", "file is %d bytes, more than the limit of %d (rules.MaxPricesBytes)", len(data), MaxPricesBytes)
		return nil
	}
	defer func() {
		if r := recover(); r != nil {
			p.add(0, "", "YAML parser failed: %v", r)
			t = nil
		}
	}()
	top := p.document(data, "a mapping with currency and models", "a price table is one")
	if top == nil {
		return nil
	}
	n := p.resolve(top)
	t = &Prices{models: map[string]Price{}}
	var haveCurrency, haveModels bool
	defLine := 0
	ok := p.fields(n, "", []string{"currency", "default_model", "models"}, func(key string, _, v *yaml.Node) {
		switch key {
		case "currency":
			haveCurrency = true
			if s, ok := p.str(v, key); ok {
				if !currencyCode.MatchString(s) {
					p.add(v.Line, key, "want an ISO 4217 code such as USD or EUR, got %q", echo(s))
				}
				t.Currency = s
			}
		case "default_model":
			if s, ok := p.str(v, key); ok {
				if s == "" {
					p.add(v.Line, key, "must not be empty")
				}
				t.DefaultModel, defLine = s, v.Line
			}
		case "models":
			haveModels = true
			p.models(v, t)
		}
	})
	if !ok {
		return nil
	}
	if !haveCurrency {
		p.add(n.Line, "currency", "required")
	}
	if !haveModels {
		p.add(n.Line, "models", "required")
	}
	if t.DefaultModel != "" {
		if _, ok := t.models[t.DefaultModel]; !ok && haveModels {
			p.add(defLine, "default_model", "%q is not in models", echo(t.DefaultModel))
		}
	}
	return t
}

// models reads the table's models mapping into t.
func (p *parser) models(n *yaml.Node, t *Prices) {
	if n.Kind != yaml.MappingNode {
		p.add(n.Line, "models", "want a mapping of model names to prices, got %s", kindName(n))
		return
	}
	if len(n.Content) == 0 {
		p.add(n.Line, "models", "want at least one model")
	}
	seen := map[string]int{}
	done := map[*yaml.Node]readPrice{} // by the prices' node: an alias reads it once
	for i := 0; i+1 < len(n.Content); i += 2 {
		if p.nodes > maxNodes {
			p.add(n.Line, "models", "file expands to more than %d YAML nodes (aliases?)", maxNodes)
			return
		}
		k, v := p.resolve(n.Content[i]), p.resolve(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			p.add(k.Line, "models", "want a model name, got %s", kindName(k))
			continue
		}
		name := k.Value
		field := "models." + name
		if first, dup := seen[name]; dup {
			p.add(k.Line, field, "model given twice (first at line %d)", first)
			continue
		}
		seen[name] = k.Line
		if d, again := done[v]; again {
			// An alias of prices read already: the same prices (and the
			// same problems, reported once, where they are written).
			if d.ok {
				t.models[name] = d.price
			}
			continue
		}
		var price Price
		good := true
		ok := p.fields(v, field, tokenTypeNames[:], func(key string, _, pv *yaml.Node) {
			f := join(field, key)
			x, ok := p.int64(pv, f, MaxPricePerMillion)
			if ok && (x < 0 || x > MaxPricePerMillion) {
				p.add(pv.Line, f, "want a whole number of micro-units per million tokens from 0 to %d, got %d", int64(MaxPricePerMillion), x)
				ok = false
			}
			good = good && ok
			price[tokenType(key)] = x
		})
		if ok && good {
			t.models[name] = price
		}
		done[v] = readPrice{price, ok && good}
	}
}

// readPrice is a model's prices as read, and whether they were valid.
type readPrice struct {
	price Price
	ok    bool
}

// tokenType returns the TokenType named key (NumTokenTypes when none).
func tokenType(key string) TokenType {
	for i, n := range tokenTypeNames {
		if n == key {
			return TokenType(i)
		}
	}
	return NumTokenTypes
}

// maxBudgetDecimals is how many decimals a budget may give: micro-units.
const maxBudgetDecimals = 6

// ParseBudget reads an amount of money written as a decimal ("250",
// "250.00", "0.000001") into micro-units, exactly: no sign, no exponent,
// at most 6 decimals, at most algorithm.MaxExact micro-units.
func ParseBudget(s string) (int64, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || !digits(whole) || (strings.Contains(s, ".") && (frac == "" || !digits(frac))) {
		return 0, fmt.Errorf("want an amount such as \"250.00\", got %q", echo(s))
	}
	if len(frac) > maxBudgetDecimals {
		return 0, fmt.Errorf("%q has more than %d decimals (a micro-unit is the smallest amount)", echo(s), maxBudgetDecimals)
	}
	frac += strings.Repeat("0", maxBudgetDecimals-len(frac))
	f, _ := strconv.ParseInt(frac, 10, 64)
	whole = strings.TrimLeft(whole, "0")
	w, err := strconv.ParseInt("0"+whole, 10, 64)
	if len(whole) > 12 || err != nil || w > (algorithm.MaxExact-f)/1_000_000 {
		return 0, fmt.Errorf("%q is more than %d micro-units, the most a counter holds", echo(s), int64(algorithm.MaxExact))
	}
	return w*1_000_000 + f, nil
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
