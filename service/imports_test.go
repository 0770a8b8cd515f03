package service

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps DESIGN.md's rule: the engine is transport-free and
// store-agnostic, so it never imports grpc, net/http or a Redis client
// (the prometheus client's own use of net/http is not the engine's), nor
// a store. store/stack, the stack's protocol (interfaces, the placement
// byte, pure helpers on limits; no store), is the one package under store/
// it may import.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := []string{"net/http", "google.golang.org/grpc", "github.com/redis/", "github.com/envoyproxy/",
		"github.com/sluice-rl/sluice/store/", "github.com/sluice-rl/sluice/server/"}
	const protocol = "github.com/sluice-rl/sluice/store/stack"
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == protocol {
				continue
			}
			for _, bad := range forbidden {
				if path == bad || strings.HasPrefix(path, bad) {
					t.Errorf("%s imports %s; package service must not (DESIGN.md)", f, path)
				}
			}
		}
	}
}
