package openai

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package's boundary: of batchd it imports only the
// engine package (and its own stand-in, in tests).
func TestImports(t *testing.T) {
	for _, dir := range []string{".", "openaitest"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			src, err := os.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if !strings.HasPrefix(path, "github.com/batchd/batchd") {
					continue
				}
				if dir != "." || path != "github.com/batchd/batchd/engine" {
					t.Errorf("%s imports %s; engine/openai may import only github.com/batchd/batchd/engine, its stand-in nothing of batchd", name, path)
				}
			}
		}
	}
}
