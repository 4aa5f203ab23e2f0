package tachyon

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"strings"
	"testing"
)

// Every exported name of the package (functions, types, methods, struct
// fields, constants, variables) has a doc comment: go doc shows them.
func TestEveryExportedNameIsDocumented(t *testing.T) {
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	p := doc.New(pkgs["tachyon"], "tachyon/bindings/go", 0)
	var missing []string
	need := func(name, text string) {
		if strings.TrimSpace(text) == "" {
			missing = append(missing, name)
		}
	}
	need("package", p.Doc)
	values := func(vs []*doc.Value) {
		for _, v := range vs {
			for _, spec := range v.Decl.Specs {
				for _, n := range spec.(*ast.ValueSpec).Names {
					if !n.IsExported() {
						continue
					}
					vspec := spec.(*ast.ValueSpec)
					text := v.Doc
					if vspec.Doc != nil {
						text += vspec.Doc.Text()
					}
					if vspec.Comment != nil {
						text += vspec.Comment.Text()
					}
					need(n.Name, text)
				}
			}
		}
	}
	values(p.Consts)
	values(p.Vars)
	for _, f := range p.Funcs {
		need(f.Name, f.Doc)
	}
	for _, ty := range p.Types {
		need(ty.Name, ty.Doc)
		values(ty.Consts)
		values(ty.Vars)
		for _, f := range ty.Funcs {
			need(f.Name, f.Doc)
		}
		for _, m := range ty.Methods {
			need(ty.Name+"."+m.Name, m.Doc)
		}
		if st, ok := ty.Decl.Specs[0].(*ast.TypeSpec).Type.(*ast.StructType); ok {
			for _, field := range st.Fields.List {
				for _, n := range field.Names {
					if n.IsExported() && field.Doc == nil && field.Comment == nil {
						missing = append(missing, ty.Name+"."+n.Name)
					}
				}
			}
		}
	}
	if len(missing) > 0 {
		t.Fatalf("exported names without a doc comment: %v", missing)
	}
}
