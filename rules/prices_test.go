package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/algorithm"
)

// TestParsePrices: a good table compiles to its prices; each broken one
// names file:line: field and what is wrong.
func TestParsePrices(t *testing.T) {
	good := "currency: USD\ndefault_model: a\nmodels:\n  a: {input: 2500000, output: 10000000}\n  b:\n    cached_read: 1\n    cache_write: 2\n    reasoning: 3\n"
	p, err := ParsePrices("p.yaml", []byte(good))
	if err != nil {
		t.Fatalf("ParsePrices(good): %v", err)
	}
	if p.Currency != "USD" || p.File != "p.yaml" || p.DefaultModel != "a" || strings.Join(p.Models(), ",") != "a,b" {
		t.Fatalf("table = %+v, models %v", p, p.Models())
	}
	if pr, ok := p.Price("b"); !ok || pr != (Price{0, 0, 1, 2, 3}) {
		t.Errorf("Price(b) = %v, %v; want [0 0 1 2 3]", pr, ok)
	}
	if pr, ok := p.Price("unlisted"); !ok || pr != (Price{Input: 2500000, Output: 10000000}) {
		t.Errorf("Price(unlisted) = %v, %v; want default_model a's prices", pr, ok)
	}
	var none *Prices
	if _, ok := none.Price("a"); ok {
		t.Error("a nil table priced a model")
	}

	tests := []struct {
		name, data string
		want       []string
	}{
		{"empty", "", []string{"p.yaml: file is empty; want a mapping with currency and models"}},
		{"not a mapping", "- a\n", []string{"p.yaml:1: want a mapping, got a list"}},
		{"missing both", "default_model: x\n", []string{"p.yaml:1: currency: required", "p.yaml:1: models: required"}},
		{"bad currency", "currency: dollars\nmodels: {a: {input: 1}}\n", []string{`p.yaml:1: currency: want an ISO 4217 code such as USD or EUR, got "dollars"`}},
		{"unknown key", "currency: USD\nmodels: {a: {input: 1}}\nvat: 19\n", []string{"p.yaml:3: vat: unknown key (want one of currency, default_model, models)"}},
		{"unknown token type", "currency: USD\nmodels:\n  a:\n    input: 1\n    audio: 5\n", []string{"p.yaml:5: models.a.audio: unknown key (want one of input, output, cached_read, cache_write, reasoning)"}},
		{"negative", "currency: USD\nmodels:\n  a:\n    output: -3\n", []string{"p.yaml:4: models.a.output: want a whole number of micro-units per million tokens from 0 to 1000000000000, got -3"}},
		{"fraction", "currency: USD\nmodels:\n  a:\n    output: 2.5\n", []string{`p.yaml:4: models.a.output: want a whole number from 0 to 1000000000000, got "2.5"`}},
		{"too dear", "currency: USD\nmodels:\n  a:\n    output: 1000000000001\n", []string{"p.yaml:4: models.a.output: want a whole number of micro-units per million tokens from 0 to 1000000000000, got 1000000000001"}},
		{"duplicate model", "currency: USD\nmodels:\n  a: {input: 1}\n  b: {input: 1}\n  a: {input: 2}\n", []string{"p.yaml:5: models.a: model given twice (first at line 3)"}},
		{"duplicate price", "currency: USD\nmodels:\n  a:\n    input: 1\n    input: 2\n", []string{"p.yaml:5: models.a.input: key given twice (first at line 4)"}},
		{"model not a mapping", "currency: USD\nmodels:\n  a: 5\n", []string{`p.yaml:3: models.a: want a mapping, got "5"`}},
		{"no models", "currency: USD\nmodels: {}\n", []string{"p.yaml:2: models: want at least one model"}},
		{"default not listed", "currency: USD\ndefault_model: z\nmodels: {a: {input: 1}}\n", []string{`p.yaml:2: default_model: "z" is not in models`}},
		{"two documents", "currency: USD\nmodels: {a: {input: 1}}\n---\ncurrency: EUR\n", []string{"p.yaml:3: a second YAML document; a price table is one"}},
		{"syntax", "currency: USD\nmodels: {a: [\n", []string{"p.yaml:2: YAML syntax: did not find expected node content"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePrices("p.yaml", []byte(tt.data))
			var errs Errors
			if !errors.As(err, &errs) || p != nil {
				t.Fatalf("ParsePrices = %v, %v; want nil and Errors", p, err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

// TestPriceCost: a call's cost is ⌈Σ tokens × price / 10^6⌉ micro-units,
// exact, and an overflow is an error, never a wrap.
func TestPriceCost(t *testing.T) {
	const maxPrice = MaxPricePerMillion
	tests := []struct {
		name    string
		price   Price
		tokens  [NumTokenTypes]int64
		want    int64
		wantErr bool
	}{
		{"nothing used", Price{2500000, 10000000}, [NumTokenTypes]int64{}, 0, false},
		{"gpt-4o call", Price{Input: 2500000, Output: 10000000, CachedRead: 1250000}, [NumTokenTypes]int64{Input: 1000, Output: 500, CachedRead: 200}, 2500 + 5000 + 250, false},
		{"rounds up", Price{Input: 1}, [NumTokenTypes]int64{Input: 1}, 1, false},
		{"exact stays", Price{Input: 1_000_000}, [NumTokenTypes]int64{Input: 7}, 7, false},
		{"sum then round", Price{Input: 500_000, Output: 500_000}, [NumTokenTypes]int64{Input: 1, Output: 1}, 1, false},
		{"every type", Price{1, 2, 3, 4, 5}, [NumTokenTypes]int64{1_000_000, 1_000_000, 1_000_000, 1_000_000, 1_000_000}, 15, false},
		{"free model", Price{}, [NumTokenTypes]int64{Input: algorithm.MaxExact}, 0, false},
		{"largest fits", Price{Input: 1_000_000}, [NumTokenTypes]int64{Input: algorithm.MaxExact}, algorithm.MaxExact, false},
		{"one over", Price{Input: 1_000_000, Output: 1}, [NumTokenTypes]int64{Input: algorithm.MaxExact, Output: 1}, 0, true},
		{"128-bit product", Price{maxPrice, maxPrice, maxPrice, maxPrice, maxPrice},
			[NumTokenTypes]int64{algorithm.MaxExact, algorithm.MaxExact, algorithm.MaxExact, algorithm.MaxExact, algorithm.MaxExact}, 0, true},
		{"too many tokens", Price{Input: 1}, [NumTokenTypes]int64{Input: algorithm.MaxExact + 1}, 0, true},
		{"negative tokens", Price{Input: 1}, [NumTokenTypes]int64{Input: -1}, 0, true},
		{"negative price", Price{Output: -1}, [NumTokenTypes]int64{Output: 1}, 0, true},
	}
	for _, tt := range tests {
		got, err := tt.price.Cost(&tt.tokens)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: Cost(%v at %v) = %d, %v; want %d, error %v", tt.name, tt.tokens, tt.price, got, err, tt.want, tt.wantErr)
		}
	}
	over := Price{Input: maxPrice}
	if _, err := over.Cost(&[NumTokenTypes]int64{Input: algorithm.MaxExact}); !errors.Is(err, ErrCostOverflow) {
		t.Errorf("overflow error %v, want ErrCostOverflow", err)
	}
}

// TestParseBudget: an amount is converted to micro-units exactly.
func TestParseBudget(t *testing.T) {
	for in, want := range map[string]int64{
		"250": 250_000_000, "250.00": 250_000_000, "0.000001": 1, "0": 0, "007.5": 7_500_000,
		"9007199254.740991": algorithm.MaxExact, "1234.567891": 1_234_567_891,
	} {
		if got, err := ParseBudget(in); err != nil || got != want {
			t.Errorf("ParseBudget(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "+1", "1e3", "1.", ".5", "1.0000001", "1,5", "9007199254.740992", "99999999999999999999", " 1", "ten"} {
		if got, err := ParseBudget(in); err == nil {
			t.Errorf("ParseBudget(%q) = %d, nil; want an error", in, got)
		}
	}
}

// FuzzParsePrices: any input is a table or Errors naming the file, never
// a panic; every price of a table it accepts is in range.
func FuzzParsePrices(f *testing.F) {
	if data, err := os.ReadFile("../examples/llm/prices.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte("currency: USD\nmodels: {a: {input: 1, output: -1, audio: 2}, a: {}}\n"))
	f.Add([]byte("currency: USD\nmodels: &m {a: *m}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePrices("fuzz.yaml", data)
		if err != nil {
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 || p != nil {
				t.Fatalf("ParsePrices = %v, %T %v; want nil and a non-empty Errors", p, err, err)
			}
			for _, e := range errs {
				if e.File != "fuzz.yaml" || e.Msg == "" {
					t.Fatalf("problem %+v must name the file and say something", e)
				}
			}
			return
		}
		for _, m := range p.Models() {
			pr, _ := p.Price(m)
			for _, c := range pr {
				if c < 0 || c > MaxPricePerMillion {
					t.Fatalf("model %q accepted with price %d", m, c)
				}
			}
		}
	})
}

// TestMoneyRules: a rule with usage and budget compiles to its usage
// indexes and a quota in micro-units, its usage entries are left out of
// the counter (Counted), and it needs a price table.
func TestMoneyRules(t *testing.T) {
	prices, err := LoadPrices("../examples/llm/prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := `domain: llm
descriptors:
  - key: api_key
    descriptors:
      - key: model
        descriptors:
          - key: in
            descriptors:
              - key: out
                rate_limit:
                  usage: {model: model, input: in, output: out}
                  budget: 12.5
                  calendar: month
                  settle: after
`
	snap, err := Parse("m.yaml", []byte(src), Options{Prices: prices})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Prices() != prices {
		t.Error("the snapshot does not carry its price table")
	}
	r := snap.Rules()[0]
	if r.Usage == nil || r.Usage.Model != 1 || r.Usage.Tokens[Input] != 2 || r.Usage.Tokens[Output] != 3 || r.Usage.Tokens[CachedRead] != -1 || r.Usage.Line != 11 {
		t.Fatalf("Usage = %+v", r.Usage)
	}
	if r.Limit.Quota != 12_500_000 || r.RequestsPerUnit != 12_500_000 || !r.SettleAfter || r.Calendar == nil {
		t.Errorf("rule = quota %d, rpu %d, settle after %v", r.Limit.Quota, r.RequestsPerUnit, r.SettleAfter)
	}
	for i, st := range r.Path {
		if got, want := st.Counted("v"), map[bool]string{true: "v", false: ""}[i == 0]; got != want {
			t.Errorf("step %d (%s) counts %q, want %q", i, st.Key, got, want)
		}
	}
	if got := snap.Match("llm", []Entry{{"api_key", "k"}, {"model", "gpt-4o"}, {"in", "0"}, {"out", "0"}}); got != r {
		t.Errorf("Match = %v", got)
	}

	_, err = Parse("m.yaml", []byte(src), Options{})
	if err == nil || err.Error() != "m.yaml:11: descriptors[0].descriptors[0].descriptors[0].descriptors[0].rate_limit.usage: a money budget needs a price table: start sluice serve with --prices FILE (rules.Options.Prices)" {
		t.Errorf("without prices: %v", err)
	}
}

// TestPricesFile: LoadDir reads Options.PricesFile with the rules (its
// problems among theirs) and skips it when it sits in the directory.
func TestPricesFile(t *testing.T) {
	dir := t.TempDir()
	rulesData, err := os.ReadFile("../examples/llm/rules/budgets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pricesData, err := os.ReadFile("../examples/llm/prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("budgets.yaml", rulesData)
	write("prices.yaml", pricesData)
	snap, err := LoadDir(dir, Options{PricesFile: filepath.Join(dir, "prices.yaml")})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	money := 0
	for _, r := range snap.Rules() {
		if r.Usage != nil {
			money++
		}
	}
	if snap.Prices().Currency != "USD" || money != 2 {
		t.Fatalf("prices %+v, %d money rules, want USD and 2", snap.Prices(), money)
	}
	write("prices.yaml", []byte("currency: USD\nmodels:\n  a: {input: -1}\n"))
	_, err = LoadDir(dir, Options{PricesFile: filepath.Join(dir, "prices.yaml")})
	if want := filepath.Join(dir, "prices.yaml") + ":3: models.a.input: want a whole number of micro-units per million tokens from 0 to 1000000000000, got -1"; err == nil || err.Error() != want {
		t.Errorf("LoadDir with a bad table: %v, want %s", err, want)
	}
	_, err = LoadDir(dir, Options{PricesFile: filepath.Join(dir, "gone.yaml")})
	if err == nil || !strings.Contains(err.Error(), "gone.yaml") {
		t.Errorf("LoadDir with a missing table: %v", err)
	}
}

// TestExamplePrices: the example price table and budgets load together.
func TestExamplePrices(t *testing.T) {
	snap, err := LoadDir("../examples/llm/rules", Options{PricesFile: "../examples/llm/prices.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	p := snap.Prices()
	if got := strings.Join(p.Models(), ","); got != "claude-sonnet-4,gpt-4o,gpt-4o-mini,o3" {
		t.Errorf("models %s", got)
	}
	money := 0
	for _, r := range snap.Rules() {
		if r.Usage == nil {
			continue // the example's other rules (tokens, streams, route_model)
		}
		money++
		if r.Calendar == nil || !r.SettleAfter {
			t.Errorf("rule %s is not a monthly money budget settled after", r.ID)
		}
	}
	if money != 2 {
		t.Errorf("%d money rules, want 2 (api_key, team)", money)
	}
}

// TestWorstPriceTableMemory: the worst price tables MaxPricesBytes allows
// cost memory in proportion to their size, at most perByte bytes
// allocated per byte of file (the YAML library's nodes are most of it),
// aliases included (each expands to one model's prices, counted against
// the node budget); a file over the bound is refused for less.
func TestWorstPriceTableMemory(t *testing.T) {
	const perByte = 128
	full := MaxPricesBytes - 64
	table := func(size int, first string, item func(i int) string) string {
		var sb strings.Builder
		sb.WriteString("currency: USD\nmodels: {" + first)
		for i := 0; ; i++ {
			it := item(i)
			if sb.Len()+len(it)+4 > size {
				break
			}
			sb.WriteString(", " + it)
		}
		sb.WriteString("}\n")
		return sb.String()
	}
	tests := []struct {
		name string
		file func(size int) string
	}{
		{"many models, every token type", func(n int) string {
			return table(n, "m: {input: 1, output: 2, cached_read: 3, cache_write: 4, reasoning: 5}", func(i int) string {
				return fmt.Sprintf("m%d: {input: 1, output: 2, cached_read: 3, cache_write: 4, reasoning: 5}", i)
			})
		}},
		{"many aliases of one model's prices", func(n int) string {
			return table(n, "m: &p {input: 1, output: 2, cached_read: 3, cache_write: 4, reasoning: 5}", func(i int) string {
				return fmt.Sprintf("m%d: *p", i)
			})
		}},
		{"one long model name", func(n int) string {
			return "currency: USD\nmodels: {" + strings.Repeat("m", n-64) + ": {input: 1}}\n"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, size := range []int{full / 4, full} {
				data := []byte(tc.file(size))
				got := allocated(func() { _, _ = ParsePrices("p.yaml", data) })
				t.Logf("%d bytes: %d allocated, %.1f per byte", len(data), got, float64(got)/float64(len(data)))
				if budget := uint64(perByte * len(data)); got > budget {
					t.Errorf("%d bytes: allocated %d, more than %d per byte (%d)", len(data), got, perByte, budget)
				}
			}
		})
	}
	over := []byte(strings.Repeat("#", MaxPricesBytes+1))
	var err error
	if got := allocated(func() { _, err = ParsePrices("p.yaml", over) }); err == nil || got > 64<<10 {
		t.Errorf("a file over MaxPricesBytes: %v, allocated %d; want refused for under 64 KiB", err, got)
	}
}

// TestPriceAliases: models that alias one model's prices share them; a
// problem in aliased prices is reported once, where they are written, and
// no model that uses them is priced.
func TestPriceAliases(t *testing.T) {
	p, err := ParsePrices("p.yaml", []byte("currency: USD\nmodels:\n  a: &p {input: 7}\n  b: *p\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"a", "b"} {
		if pr, ok := p.Price(m); !ok || pr[Input] != 7 {
			t.Errorf("model %s: %v %v, want input 7", m, pr, ok)
		}
	}
	_, err = ParsePrices("p.yaml", []byte("currency: USD\nmodels:\n  a: &p {input: -1}\n  b: *p\n"))
	if err == nil || len(err.(Errors)) != 1 || !strings.HasPrefix(err.Error(), "p.yaml:3: models.a.input:") {
		t.Errorf("aliased bad prices: %v, want one problem at p.yaml:3 models.a.input", err)
	}
}
