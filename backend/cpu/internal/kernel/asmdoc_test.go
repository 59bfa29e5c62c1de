package kernel

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestAsmStubsDocumented: every assembly stub (a function declared without a
// body in a *_amd64.go file) has a doc comment that starts with its name,
// stating its loop or naming its portable twin.
func TestAsmStubsDocumented(t *testing.T) {
	files, err := filepath.Glob("*_amd64.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("no *_amd64.go files: %v", err)
	}
	fset := token.NewFileSet()
	stubs := 0
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body != nil {
				continue
			}
			stubs++
			name := fd.Name.Name
			if doc := fd.Doc.Text(); !strings.HasPrefix(doc, name+" ") {
				t.Errorf("%s: assembly stub %s: doc comment %q does not start with %q", fset.Position(fd.Pos()), name, doc, name+" ")
			}
		}
	}
	if stubs == 0 {
		t.Fatal("found no assembly stubs in *_amd64.go")
	}
}
