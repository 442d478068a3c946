package kernels

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A binary must start on any CPU: nothing that runs at package
// initialisation (package-level variable initialisers, init functions) may
// execute a vector instruction the CPU might lack. TestNoSIMDAtInit checks
// the whole module's source for it: an initialiser or init body may not
// call, directly or through functions of the module (followed by name,
// across packages), an archsimd function other than the CPUID-backed
// feature queries archsimd.X86.<Feature>(), nor an assembly (body-less)
// function other than those in asmSafeAtInit. Method calls on archsimd
// vectors need no rule of their own: the vectors come from archsimd calls.
//
// The check reads syntax, with a little type inference from declarations: a
// method call on a value whose type it can tell runs that type's method (or
// the functions stored under that field name, for a func-typed field such
// as a backend's dot); on a value of another package's type, nothing of the
// module; on an interface or a value it cannot type, every method and
// stored function of that name in the package and the module packages the
// file imports. Storing a function (a backend table) runs none of it.
func TestNoSIMDAtInit(t *testing.T) {
	root, modPath, err := findModule(".")
	if err != nil {
		t.Skipf("module source not found from the working directory (%v); this test reads the source", err)
	}
	findings, err := checkInitSafety(root, modPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range findings {
		t.Errorf("%s", f)
	}
	if len(findings) > 0 {
		t.Log("package initialisation must not execute vector instructions: a CPU without them dies with SIGILL before main; " +
			"compute such values lazily or in a backend's setup, after the CPU's features are known")
	}
}

// TestInitSafetyCheckerFinds runs the checker on a small module with a
// planted offence of each kind, and on its allowed uses.
func TestInitSafetyCheckerFinds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.26\n")
	write("k/k.go", `package k

import "simd/archsimd"

var direct = archsimd.LoadUint32x16(&[16]uint32{})

var fine = archsimd.X86.AVX512() && len(features()) > 0

var table = struct{ f func() int }{f: func() int { archsimd.ClearAVXUpperBits(); return 0 }}

var viaChain = outer()

var viaMethod = (&thing{}).prepare()

func outer() int { return inner() + 1 }

func inner() int { return int(archsimd.BroadcastFloat32x8(1).GetElem(0)) }

type thing struct{}

func (t *thing) prepare() int { return asmKernel() }

func features() []int { a, _ := cpuid(1, 0); return []int{int(a)} }

func init() {
	_ = fine
	helper := func() { inner() }
	helper()
}

func cpuid(leaf, sub uint32) (eax, ebx uint32)

func asmKernel() int

// Never called at init: fine whatever it does.
func Kernel() { archsimd.ClearAVXUpperBits(); asmKernel() }

var named = struct{ g func() int }{g: inner}

var viaField = table.f()

var viaNamed = named.g()
`)
	write("k/k_test.go", "package k\n\nimport \"simd/archsimd\"\n\nvar inTest = archsimd.LoadUint32x16(&[16]uint32{})\n")
	write("testdata/x.go", "package x\n\nimport \"simd/archsimd\"\n\nvar x = archsimd.LoadUint32x16(nil)\n")
	write("user/user.go", `package user

import kk "example.com/m/k"

var cross = kk.Exported()
`)
	write("k/exported.go", "package k\n\nfunc Exported() int { return outer() }\n")
	write("k/typed.go", `package k

import "sync"

type pool struct{ wg sync.WaitGroup }

func newPool() *pool { p := &pool{}; p.wg.Add(1); return p }

type Vec struct{ be *bk }

type bk struct{ dot func() int }

func (v *Vec) Add() int { return inner() }

func (v *Vec) Dot() int { return v.be.dot() }

var quiet = newPool()

var viaTyped = (&Vec{be: &bk{dot: inner}}).Dot()
`)

	findings, err := checkInitSafety(dir, "example.com/m")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(findings, "\n")
	for _, want := range []string{
		"k/k.go:5: package-level var direct: archsimd.LoadUint32x16 (k/k.go:5)",
		"k/k.go:11: package-level var viaChain: outer (k/k.go:11) → inner (k/k.go:15) → archsimd.BroadcastFloat32x8 (k/k.go:17)",
		"k/k.go:13: package-level var viaMethod: (*thing).prepare (k/k.go:13) → assembly function asmKernel (k/k.go:21)",
		"k/k.go:25: init(): inner (k/k.go:27) → archsimd.BroadcastFloat32x8 (k/k.go:17)",
		"k/k.go:40: package-level var viaField: f: func literal at k/k.go:9 (k/k.go:40) → archsimd.ClearAVXUpperBits (k/k.go:9)",
		"k/k.go:42: package-level var viaNamed: g: inner (k/k.go:42) → archsimd.BroadcastFloat32x8 (k/k.go:17)",
		"k/typed.go:19: package-level var viaTyped: (*Vec).Dot (k/typed.go:19) → dot: inner (k/typed.go:15) → archsimd.BroadcastFloat32x8 (k/k.go:17)",
		"user/user.go:5: package-level var cross: kk.Exported (user/user.go:5) → outer (k/exported.go:3) → inner (k/k.go:15) → archsimd.BroadcastFloat32x8 (k/k.go:17)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the checker missed\n\t%s\nit found:\n%s", want, got)
		}
	}
	if len(findings) != 8 {
		t.Errorf("%d findings, want 8 (fine, table, quiet, tests and testdata are allowed):\n%s", len(findings), got)
	}
}

// asmSafeAtInit lists the assembly functions that may run at package
// initialisation: they execute no vector instruction (xgetbv0's XGETBV
// runs only where CPUID has reported OSXSAVE: amxUsable checks first).
var asmSafeAtInit = []string{"cpuid", "xgetbv0"}

// findModule walks up from dir to the directory holding go.mod and returns
// it with the module path.
func findModule(dir string) (root, modPath string, err error) {
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	for {
		raw, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(raw), "\n") {
				if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
					return dir, strings.Trim(strings.TrimSpace(rest), `"`), nil
				}
			}
			return "", "", fmt.Errorf("%s/go.mod names no module", dir)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// srcPkg is one package of the module as parsed source, every file of it
// whatever its build constraints (a function defined in several
// constrained files is followed into each).
type srcPkg struct {
	path    string                // import path
	funcs   map[string][]*srcFunc // by name
	methods map[string][]*srcFunc // by method name, any receiver
	// fields holds the functions stored under each field name in the
	// package's composite literals (backend{dot: avx2Dot}): a call x.dot()
	// may run any of them.
	fields map[string][]*srcFunc
	types  map[string]*srcDecl[*ast.TypeSpec]
	vars   map[string]*srcDecl[*ast.ValueSpec]
	files  []*srcFile
}

type srcFile struct {
	rel     string // path from the module root, slash-separated
	ast     *ast.File
	imports map[string]string // local name → import path, once localImports has run
}

type srcDecl[T any] struct {
	spec T
	file *srcFile
}

// srcFunc is code a call may run: a declared function or method, or a
// function value stored in a composite literal.
type srcFunc struct {
	label string         // how a call chain names it
	name  string         // the declared name; "" for a literal
	recv  string         // a method's receiver type name
	decl  *ast.FuncDecl  // nil for a literal
	body  *ast.BlockStmt // nil for an assembly function
	file  *srcFile
	pkg   *srcPkg
}

// typeRef names a type: pkg is its import path ("" for a predeclared one).
type typeRef struct{ pkg, name string }

// initChecker follows calls from initialisers; memo holds each body's
// verdict: nil for clean, else the call chain from it to the offence.
type initChecker struct {
	fset   *token.FileSet
	pkgs   map[string]*srcPkg // by import path
	memo   map[*ast.BlockStmt][]string
	active map[*ast.BlockStmt]bool
}

// checkInitSafety returns one line per package-level initialiser or init
// function of the module at root that may execute vector code.
func checkInitSafety(root, modPath string) ([]string, error) {
	c := &initChecker{fset: token.NewFileSet(), pkgs: map[string]*srcPkg{},
		memo: map[*ast.BlockStmt][]string{}, active: map[*ast.BlockStmt]bool{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path == root {
				return nil
			}
			if name == "vendor" || name == "testdata" || name == "node_modules" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // another module
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		return c.parse(root, modPath, path)
	})
	if err != nil {
		return nil, err
	}
	c.indexFields()
	var out []string
	for _, p := range c.sortedPkgs() {
		for _, f := range p.files {
			for _, decl := range f.ast.Decls {
				switch d := decl.(type) {
				case *ast.GenDecl:
					if d.Tok != token.VAR {
						continue
					}
					for _, spec := range d.Specs {
						vs := spec.(*ast.ValueSpec)
						for _, v := range vs.Values {
							if _, stored := v.(*ast.FuncLit); stored {
								continue // var f = func() {...}: stored, not run
							}
							if chain := c.scan(v, f, p); chain != nil {
								out = append(out, fmt.Sprintf("%s: package-level var %s: %s", c.pos(f, vs), names(vs.Names), strings.Join(chain, " → ")))
							}
						}
					}
				case *ast.FuncDecl:
					if d.Recv == nil && d.Name.Name == "init" && d.Body != nil {
						if chain := c.scan(d.Body, f, p); chain != nil {
							out = append(out, fmt.Sprintf("%s: init(): %s", c.pos(f, d), strings.Join(chain, " → ")))
						}
					}
				}
			}
		}
	}
	return out, nil
}

func (c *initChecker) parse(root, modPath, path string) error {
	af, err := parser.ParseFile(c.fset, path, nil, 0) // with object resolution: locals' declarations give their types
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	rel, err := filepath.Rel(root, path)
	if err != nil {
		return err
	}
	rel = filepath.ToSlash(rel)
	importPath := modPath
	if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
		importPath += "/" + dir
	}
	if af.Name.Name == "main" {
		importPath += "#main" // not importable; kept apart from a library in the same directory
	}
	p := c.pkgs[importPath]
	if p == nil {
		p = &srcPkg{path: importPath, funcs: map[string][]*srcFunc{}, methods: map[string][]*srcFunc{},
			fields: map[string][]*srcFunc{}, types: map[string]*srcDecl[*ast.TypeSpec]{}, vars: map[string]*srcDecl[*ast.ValueSpec]{}}
		c.pkgs[importPath] = p
	}
	f := &srcFile{rel: rel, ast: af}
	p.files = append(p.files, f)
	for _, decl := range af.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			fn := &srcFunc{label: declLabel(d), name: d.Name.Name, decl: d, body: d.Body, file: f, pkg: p}
			if d.Recv == nil {
				p.funcs[d.Name.Name] = append(p.funcs[d.Name.Name], fn)
			} else {
				fn.recv = baseTypeName(d.Recv.List[0].Type)
				p.methods[d.Name.Name] = append(p.methods[d.Name.Name], fn)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch sp := spec.(type) {
				case *ast.TypeSpec:
					p.types[sp.Name.Name] = &srcDecl[*ast.TypeSpec]{sp, f}
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						p.vars[n.Name] = &srcDecl[*ast.ValueSpec]{sp, f}
					}
				}
			}
		}
	}
	return nil
}

// baseTypeName is T for T, *T, T[E] and *T[E].
func baseTypeName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

func declLabel(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	recv := fd.Recv.List[0].Type
	if _, ptr := recv.(*ast.StarExpr); ptr {
		return "(*" + baseTypeName(recv) + ")." + fd.Name.Name
	}
	return baseTypeName(recv) + "." + fd.Name.Name
}

// indexFields fills each package's fields from its composite literals.
func (c *initChecker) indexFields() {
	for _, p := range c.pkgs {
		for _, f := range p.files {
			imports := c.localImports(f)
			ast.Inspect(f.ast, func(n ast.Node) bool {
				kv, ok := n.(*ast.KeyValueExpr)
				if !ok {
					return true
				}
				key, ok := kv.Key.(*ast.Ident)
				if !ok {
					return true
				}
				var targets []*srcFunc
				switch v := kv.Value.(type) {
				case *ast.FuncLit:
					targets = []*srcFunc{{label: "func literal at " + c.pos(f, v), body: v.Body, file: f, pkg: p}}
				case *ast.Ident:
					targets = p.funcs[v.Name]
				case *ast.SelectorExpr:
					if id, ok := v.X.(*ast.Ident); ok && c.pkgs[imports[id.Name]] != nil {
						targets = c.pkgs[imports[id.Name]].funcs[v.Sel.Name] // pkg.Func
					} else {
						targets = p.methods[v.Sel.Name] // a method value, x.m
					}
				}
				for _, t := range targets {
					stored := *t
					stored.label = key.Name + ": " + t.label
					p.fields[key.Name] = append(p.fields[key.Name], &stored)
				}
				return true
			})
		}
	}
}

// localImports maps each of f's import names to its path. A module package
// imported without a name goes by its package clause.
func (c *initChecker) localImports(f *srcFile) map[string]string {
	if f.imports != nil {
		return f.imports
	}
	f.imports = map[string]string{}
	for _, im := range f.ast.Imports {
		ip, _ := strconv.Unquote(im.Path.Value)
		local := ip[strings.LastIndex(ip, "/")+1:]
		if p := c.pkgs[ip]; p != nil {
			local = p.files[0].ast.Name.Name
		}
		if im.Name != nil {
			local = im.Name.Name
		}
		f.imports[local] = ip
	}
	return f.imports
}

// pkgOf is the module package an identifier names as an import of f, or
// nil (a local variable of that name shadows the import).
func (c *initChecker) pkgOf(id *ast.Ident, f *srcFile) (path string, isImport bool) {
	if id.Obj != nil {
		return "", false
	}
	path, isImport = c.localImports(f)[id.Name]
	return path, isImport
}

// scan returns the call chain from n to the first call that may execute
// vector code, or nil.
func (c *initChecker) scan(n ast.Node, f *srcFile, p *srcPkg) []string {
	stored := map[*ast.FuncLit]bool{} // function literals kept in composite literals
	var found []string
	ast.Inspect(n, func(n ast.Node) bool {
		if found != nil {
			return false
		}
		switch n := n.(type) {
		case *ast.CompositeLit:
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					e = kv.Value
				}
				if fl, ok := e.(*ast.FuncLit); ok {
					stored[fl] = true
				}
			}
		case *ast.FuncLit:
			return !stored[n]
		case *ast.CallExpr:
			found = c.call(n, f, p)
		}
		return found == nil
	})
	return found
}

// call judges one call: an offence itself, a call into module code that
// leads to one, or nil.
func (c *initChecker) call(call *ast.CallExpr, f *srcFile, p *srcPkg) []string {
	at := " (" + c.pos(f, call) + ")"
	switch x := unwrapFun(call.Fun).(type) {
	case *ast.Ident:
		if x.Obj != nil && x.Obj.Kind == ast.Var {
			return nil // a function value; literals are scanned where they are written
		}
		return c.follow(x.Name, p.funcs[x.Name], at)
	case *ast.SelectorExpr:
		if sel := selectorPath(x); len(sel) > 0 {
			if ip, isImport := c.pkgOf(x0(x), f); isImport && ip == "simd/archsimd" {
				if len(sel) == 3 && sel[1] == "X86" {
					return nil // a CPUID-backed feature query
				}
				return []string{strings.Join(sel, ".") + at}
			}
		}
		if id, ok := x.X.(*ast.Ident); ok {
			if ip, isImport := c.pkgOf(id, f); isImport {
				if q := c.pkgs[ip]; q != nil {
					return c.follow(id.Name+"."+x.Sel.Name, q.funcs[x.Sel.Name], at)
				}
				return nil // outside the module
			}
		}
		if t, ok := c.typeOf(x.X, f, p, 0); ok {
			cands, known := c.members(t, x.Sel.Name, 0)
			if known {
				return c.follow("", cands, at)
			}
		}
		// A receiver of unknown (or interface) type: every method and stored
		// function of that name in this package and the module packages
		// this file imports.
		cands := slices.Concat(p.methods[x.Sel.Name], p.fields[x.Sel.Name])
		for _, ip := range c.localImports(f) {
			if q := c.pkgs[ip]; q != nil && q != p {
				cands = slices.Concat(cands, q.methods[x.Sel.Name], q.fields[x.Sel.Name])
			}
		}
		return c.follow("", cands, at)
	}
	return nil
}

// unwrapFun strips parentheses and type arguments from a called expression.
func unwrapFun(e ast.Expr) ast.Expr {
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr: // f[T](...)
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		default:
			return e
		}
	}
}

// x0 is the identifier a selector chain starts from (nil if none).
func x0(e ast.Expr) *ast.Ident {
	for {
		switch x := e.(type) {
		case *ast.SelectorExpr:
			e = x.X
		case *ast.Ident:
			return x
		default:
			return &ast.Ident{Name: "_"}
		}
	}
}

// members is what a call t.name may run: t's methods of that name, else
// the functions stored under a field of that name, else those of embedded
// fields. known is false for an interface (any implementation may run).
func (c *initChecker) members(t typeRef, name string, depth int) (fns []*srcFunc, known bool) {
	q := c.pkgs[t.pkg]
	if q == nil {
		return nil, true // a type from outside the module runs none of its code
	}
	td := q.types[t.name]
	if td == nil {
		return nil, false
	}
	switch tt := td.spec.Type.(type) {
	case *ast.InterfaceType:
		return nil, false
	case *ast.StructType:
		for _, m := range q.methods[name] {
			if m.recv == t.name {
				fns = append(fns, m)
			}
		}
		if len(fns) > 0 {
			return fns, true
		}
		for _, fld := range tt.Fields.List {
			if slices.ContainsFunc(fld.Names, func(n *ast.Ident) bool { return n.Name == name }) {
				return q.fields[name], true
			}
		}
		if depth < 4 {
			for _, fld := range tt.Fields.List {
				if len(fld.Names) > 0 {
					continue
				}
				if et, ok := c.typeExpr(fld.Type, td.file, q); ok {
					if more, known := c.members(et, name, depth+1); !known || len(more) > 0 {
						return more, known
					}
				}
			}
		}
		return nil, true
	default:
		for _, m := range q.methods[name] {
			if m.recv == t.name {
				fns = append(fns, m)
			}
		}
		return fns, true
	}
}

// typeExpr resolves a type expression written in f.
func (c *initChecker) typeExpr(e ast.Expr, f *srcFile, p *srcPkg) (typeRef, bool) {
	switch x := e.(type) {
	case *ast.StarExpr:
		return c.typeExpr(x.X, f, p)
	case *ast.ParenExpr:
		return c.typeExpr(x.X, f, p)
	case *ast.IndexExpr:
		return c.typeExpr(x.X, f, p)
	case *ast.IndexListExpr:
		return c.typeExpr(x.X, f, p)
	case *ast.Ident:
		if p.types[x.Name] != nil {
			return typeRef{p.path, x.Name}, true
		}
		return typeRef{"", x.Name}, true // predeclared (or a type parameter)
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			if ip, isImport := c.pkgOf(id, f); isImport {
				return typeRef{ip, x.Sel.Name}, true
			}
		}
	}
	return typeRef{}, false // a type literal: unknown here
}

// typeOf is the type of expression e in f, where a look at declarations
// tells it.
func (c *initChecker) typeOf(e ast.Expr, f *srcFile, p *srcPkg, depth int) (typeRef, bool) {
	if depth > 8 {
		return typeRef{}, false
	}
	switch x := e.(type) {
	case *ast.ParenExpr:
		return c.typeOf(x.X, f, p, depth+1)
	case *ast.StarExpr:
		return c.typeOf(x.X, f, p, depth+1)
	case *ast.UnaryExpr:
		if x.Op == token.AND {
			return c.typeOf(x.X, f, p, depth+1)
		}
	case *ast.CompositeLit:
		if x.Type != nil {
			return c.typeExpr(x.Type, f, p)
		}
	case *ast.Ident:
		if x.Obj != nil {
			switch d := x.Obj.Decl.(type) {
			case *ast.Field:
				return c.typeExpr(d.Type, f, p)
			case *ast.ValueSpec:
				return c.specType(d, x.Name, f, p, depth)
			case *ast.AssignStmt:
				if len(d.Lhs) == len(d.Rhs) {
					for i, l := range d.Lhs {
						if id, ok := l.(*ast.Ident); ok && id.Name == x.Name {
							return c.typeOf(d.Rhs[i], f, p, depth+1)
						}
					}
				}
			}
			return typeRef{}, false
		}
		if v := p.vars[x.Name]; v != nil {
			return c.specType(v.spec, x.Name, v.file, p, depth)
		}
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			if ip, isImport := c.pkgOf(id, f); isImport {
				if q := c.pkgs[ip]; q != nil && q.vars[x.Sel.Name] != nil {
					v := q.vars[x.Sel.Name]
					return c.specType(v.spec, x.Sel.Name, v.file, q, depth)
				}
				return typeRef{}, false
			}
		}
		base, ok := c.typeOf(x.X, f, p, depth+1)
		if !ok {
			return typeRef{}, false
		}
		q := c.pkgs[base.pkg]
		if q == nil || q.types[base.name] == nil {
			return typeRef{}, false
		}
		td := q.types[base.name]
		if st, ok := td.spec.Type.(*ast.StructType); ok {
			for _, fld := range st.Fields.List {
				if slices.ContainsFunc(fld.Names, func(n *ast.Ident) bool { return n.Name == x.Sel.Name }) {
					return c.typeExpr(fld.Type, td.file, q)
				}
			}
		}
	case *ast.CallExpr:
		var fns []*srcFunc
		switch fun := unwrapFun(x.Fun).(type) {
		case *ast.Ident:
			if p.types[fun.Name] != nil {
				return typeRef{p.path, fun.Name}, true // a conversion
			}
			fns = p.funcs[fun.Name]
		case *ast.SelectorExpr:
			if id, ok := fun.X.(*ast.Ident); ok {
				if ip, isImport := c.pkgOf(id, f); isImport {
					if q := c.pkgs[ip]; q != nil {
						if q.types[fun.Sel.Name] != nil {
							return typeRef{ip, fun.Sel.Name}, true
						}
						fns = q.funcs[fun.Sel.Name]
					}
					break
				}
			}
			if t, ok := c.typeOf(fun.X, f, p, depth+1); ok {
				fns, _ = c.members(t, fun.Sel.Name, 0)
			}
		}
		for _, fn := range fns {
			if fn.decl != nil && fn.decl.Type.Results != nil && len(fn.decl.Type.Results.List) == 1 &&
				len(fn.decl.Type.Results.List[0].Names) <= 1 {
				return c.typeExpr(fn.decl.Type.Results.List[0].Type, fn.file, fn.pkg)
			}
		}
	}
	return typeRef{}, false
}

// specType is the type of name as vs declares it.
func (c *initChecker) specType(vs *ast.ValueSpec, name string, f *srcFile, p *srcPkg, depth int) (typeRef, bool) {
	if vs.Type != nil {
		return c.typeExpr(vs.Type, f, p)
	}
	for i, n := range vs.Names {
		if n.Name == name && i < len(vs.Values) && len(vs.Names) == len(vs.Values) {
			return c.typeOf(vs.Values[i], f, p, depth+1)
		}
	}
	return typeRef{}, false
}

// follow returns the chain into the first of fns (the candidates a call
// may run) that may execute vector code. label names the call ("" to use
// the candidate's own label).
func (c *initChecker) follow(label string, fns []*srcFunc, at string) []string {
	for _, fn := range fns {
		name := label
		if name == "" {
			name = fn.label
		}
		if fn.body == nil {
			if slices.Contains(asmSafeAtInit, fn.name) {
				continue
			}
			return []string{"assembly function " + name + at}
		}
		if rest := c.body(fn); rest != nil {
			return append([]string{name + at}, rest...)
		}
	}
	return nil
}

func (c *initChecker) body(fn *srcFunc) []string {
	if chain, ok := c.memo[fn.body]; ok {
		return chain
	}
	if c.active[fn.body] {
		return nil // recursion: the first visit decides
	}
	c.active[fn.body] = true
	chain := c.scan(fn.body, fn.file, fn.pkg)
	delete(c.active, fn.body)
	c.memo[fn.body] = chain
	return chain
}

// selectorPath is a.b.c as [a b c] when it is a chain of identifiers.
func selectorPath(e ast.Expr) []string {
	switch x := e.(type) {
	case *ast.Ident:
		return []string{x.Name}
	case *ast.SelectorExpr:
		if head := selectorPath(x.X); head != nil {
			return append(head, x.Sel.Name)
		}
	}
	return nil
}

func (c *initChecker) pos(f *srcFile, n ast.Node) string {
	return fmt.Sprintf("%s:%d", f.rel, c.fset.Position(n.Pos()).Line)
}

func (c *initChecker) sortedPkgs() []*srcPkg {
	var out []*srcPkg
	for _, p := range c.pkgs {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *srcPkg) int { return strings.Compare(a.path, b.path) })
	return out
}

func names(ids []*ast.Ident) string {
	var s []string
	for _, id := range ids {
		s = append(s, id.Name)
	}
	return strings.Join(s, ", ")
}
