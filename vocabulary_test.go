package sluice_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"
)

// maxVocabulary is the most exported names the root package may have
// (issue 29: the library's vocabulary stays small; the store stack's
// protocol lives in store/stack). The issue aimed at 40; the two more are
// Algorithm's MarshalText and UnmarshalText, kept so that a Limit in a
// user's JSON or YAML configuration still reads "gcra", not a number.
const maxVocabulary = 42

// TestVocabulary: the root package exports at most maxVocabulary names,
// counting top-level funcs, types, consts and vars and exported methods,
// in its non-test files.
func TestVocabulary(t *testing.T) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name != "sluice" {
			t.Fatalf("%s is package %s, want sluice", e.Name(), f.Name.Name)
		}
		files = append(files, f)
	}
	var names []string
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil && len(d.Recv.List) == 1 {
					names = append(names, recvName(d.Recv.List[0].Type)+"."+d.Name.Name)
				} else {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	if len(files) == 0 || len(names) == 0 {
		t.Fatalf("parsed %d files with %d exported names; want the root package's, with some", len(files), len(names))
	}
	sort.Strings(names)
	if len(names) > maxVocabulary {
		t.Errorf("the root package exports %d names, more than %d: %s", len(names), maxVocabulary, strings.Join(names, " "))
	}
}

// recvName is the type name of a method's receiver ("Limit", "*Limiter" → "Limiter").
func recvName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return "?"
}
