package metal

// This test needs no MLX and no cgo: it reads C text. It runs with and
// without the tag mlx.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// mlxcIncludeEnv names the directory holding the real mlx-c headers (the one
// with mlx/c/mlx.h in it: mlx-c's source root, or an install prefix's
// include/, e.g. $(brew --prefix)/include).
const mlxcIncludeEnv = "MLXGO_MLXC_INCLUDE"

// shimHeader is mlxgo's declaration of the mlx-c subset that mlxc.cpp
// implements.
const shimHeader = "mlxc/include/mlx/c/mlx.h"

// TestShimDeclarationsMatchMLXC keeps mlxgo's mlx-c subset and mlx-c
// interchangeable: for every mlx-c name the backend's C and cgo code uses
// (found by reading that code, not from a list), the shim must declare it;
// with the real headers at hand, each declaration of the shim (those used
// and the rest) must be the real header's, parameter names aside. Without the real headers
// (MLXGO_MLXC_INCLUDE) only the first half runs and the test skips loudly.
func TestShimDeclarationsMatchMLXC(t *testing.T) {
	used, err := mlxcNamesUsed(".")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(shimHeader)
	if err != nil {
		t.Fatal(err)
	}
	shim := parseCDecls(string(src))
	var funcs, types []string
	for _, name := range used {
		switch {
		case shim.funcs[name] != "":
			funcs = append(funcs, name)
		case shim.types[name] != "":
			types = append(types, name)
		default:
			t.Errorf("the backend uses %s, which %s declares neither as a function nor as a type", name, shimHeader)
		}
	}
	// The backend calls some forty mlx-c functions; far fewer means the
	// scan of the sources is broken, not that the check passed.
	if len(funcs) < 20 {
		t.Fatalf("found only %d mlx-c functions used by the backend (%v): the source scan is broken", len(funcs), funcs)
	}
	t.Logf("the backend uses %d mlx-c functions and %d mlx-c types: %s %s", len(funcs), len(types),
		strings.Join(funcs, " "), strings.Join(types, " "))
	// The shim's other declarations are held to mlx-c too: the next use of
	// one must not find drift.
	funcs, types = keys(shim.funcs), keys(shim.types)

	dir := os.Getenv(mlxcIncludeEnv)
	if dir == "" {
		t.Skipf("!!! SKIPPING the comparison with the real mlx-c headers: %s is not set. Set it to the directory "+
			"holding mlx/c/mlx.h (mlx-c's source root, or $(brew --prefix)/include) to check the %d functions "+
			"and %d types the shim declares against them !!!", mlxcIncludeEnv, len(funcs), len(types))
	}
	real, err := readRealHeaders(filepath.Join(dir, "mlx", "c"))
	if err != nil {
		t.Fatalf("%s=%s: %v", mlxcIncludeEnv, dir, err)
	}
	for _, name := range funcs {
		want, ok := real.funcs[name]
		switch {
		case !ok:
			t.Errorf("%s: not declared by the mlx-c headers in %s\n\tshim: %s", name, dir, shim.funcs[name])
		case want != shim.funcs[name]:
			t.Errorf("%s: signature drift\n\tshim:  %s\n\tmlx-c: %s", name, shim.funcs[name], want)
		}
	}
	for _, name := range types {
		want, ok := real.types[name]
		switch {
		case !ok:
			t.Errorf("type %s: not defined by the mlx-c headers in %s", name, dir)
		case want != shim.types[name]:
			t.Errorf("type %s: definition drift\n\tshim:  %s\n\tmlx-c: %s", name, shim.types[name], want)
		}
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// readRealHeaders parses every mlx-c header in dir (mlx/c/*.h).
func readRealHeaders(dir string) (cDecls, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.h"))
	if err != nil {
		return cDecls{}, err
	}
	if len(paths) == 0 {
		return cDecls{}, fmt.Errorf("no headers in %s", dir)
	}
	all := cDecls{funcs: map[string]string{}, types: map[string]string{}}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return cDecls{}, err
		}
		d := parseCDecls(string(b))
		for k, v := range d.funcs {
			all.funcs[k] = v
		}
		for k, v := range d.types {
			all.types[k] = v
		}
	}
	return all, nil
}

var (
	mlxcName = regexp.MustCompile(`\b_?mlx_[A-Za-z0-9_]*`)
	cComment = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	cString  = regexp.MustCompile(`"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'`)
)

// mlxcNamesUsed returns, sorted, the mlx-c identifiers (mlx_… and _mlx_…)
// used by the package's C code in dir: the C and header files beside the Go
// files (not mlxc.cpp, which implements them, nor the shim's own header),
// the cgo preambles and the C.name references of the Go files.
func mlxcNamesUsed(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	addC := func(src string) {
		src = cString.ReplaceAllString(cComment.ReplaceAllString(src, " "), `""`)
		for _, m := range mlxcName.FindAllString(src, -1) {
			seen[m] = true
		}
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		switch {
		case e.IsDir():
		case strings.HasSuffix(name, ".c"), strings.HasSuffix(name, ".h"):
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			addC(string(b))
		case strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go"):
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				return nil, err
			}
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.IMPORT {
					continue
				}
				for _, s := range g.Specs {
					is := s.(*ast.ImportSpec)
					if p, _ := strconv.Unquote(is.Path.Value); p != "C" {
						continue
					}
					for _, doc := range []*ast.CommentGroup{g.Doc, is.Doc} {
						if doc != nil {
							addC(doc.Text())
						}
					}
				}
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "C" && mlxcName.MatchString(sel.Sel.Name) {
						if m := mlxcName.FindString(sel.Sel.Name); m == sel.Sel.Name {
							seen[m] = true
						}
					}
				}
				return true
			})
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// cDecls holds the function prototypes and typedefs of C headers, each in a
// normal form: tokens separated by one space, parameter names removed.
type cDecls struct {
	funcs map[string]string // name -> "ret name ( params )"
	types map[string]string // typedef name -> the typedef
}

var cToken = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*|[0-9][A-Za-z0-9_.]*|\.\.\.|[^\sA-Za-z0-9_]`)

// parseCDecls reads the top-level declarations of a C header: comments,
// preprocessor lines and extern "C" wrappers are dropped, the rest is split
// at the semicolons (and the bodies of inline functions) outside braces.
func parseCDecls(src string) cDecls {
	src = cComment.ReplaceAllString(src, " ")
	var lines []string
	cont := false
	for _, l := range strings.Split(src, "\n") {
		trimmed := strings.TrimSpace(l)
		if cont || strings.HasPrefix(trimmed, "#") {
			cont = strings.HasSuffix(trimmed, `\`)
			continue
		}
		lines = append(lines, l)
	}
	src = strings.ReplaceAll(strings.Join(lines, "\n"), `extern "C" {`, " ")
	d := cDecls{funcs: map[string]string{}, types: map[string]string{}}
	var stmt []string
	depth := 0
	bodyAt := -1 // index in stmt of the '{' opening an inline function's body
	for _, tok := range cToken.FindAllString(src, -1) {
		switch tok {
		case "{":
			if depth == 0 && len(stmt) > 0 && stmt[len(stmt)-1] == ")" && stmt[0] != "typedef" {
				bodyAt = len(stmt)
			}
			depth++
		case "}":
			if depth == 0 {
				stmt = nil // the end of an extern "C" block
				continue
			}
			depth--
			if depth == 0 && bodyAt >= 0 {
				d.add(stmt[:bodyAt])
				stmt, bodyAt = nil, -1
				continue
			}
		case ";":
			if depth == 0 {
				d.add(stmt)
				stmt = nil
				continue
			}
		}
		stmt = append(stmt, tok)
	}
	return d
}

// add records one declaration (its tokens, without the final ';').
func (d cDecls) add(toks []string) {
	if len(toks) == 0 {
		return
	}
	if toks[0] == "typedef" {
		name := typedefName(toks)
		switch {
		case name == "":
		case indexOf(toks, "(") >= 0 && indexOf(toks, "{") < 0:
			// A function pointer type: its parameter names do not matter.
			d.types[name] = "typedef " + normalParam(toks[1:])
		default:
			d.types[name] = strings.Join(toks, " ")
		}
		return
	}
	open := indexOf(toks, "(")
	if open < 1 || !isIdent(toks[open-1]) {
		return // a variable or something else without a prototype
	}
	close := matchParen(toks, open)
	if close < 0 {
		return
	}
	name := toks[open-1]
	ret := strings.Join(toks[:open-1], " ")
	d.funcs[name] = ret + " " + name + " ( " + strings.Join(normalParams(toks[open+1:close]), " , ") + " )"
}

// typedefName returns the name a typedef defines: the identifier inside
// "( * name )" for a function pointer type, else the last identifier.
func typedefName(toks []string) string {
	for i := 0; i+3 < len(toks); i++ {
		if toks[i] == "(" && toks[i+1] == "*" && isIdent(toks[i+2]) && toks[i+3] == ")" {
			return toks[i+2]
		}
	}
	if last := toks[len(toks)-1]; isIdent(last) {
		return last
	}
	return ""
}

// normalParams splits a parameter list at its top-level commas and drops
// the parameter names.
func normalParams(toks []string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i <= len(toks); i++ {
		if i == len(toks) || (toks[i] == "," && depth == 0) {
			out = append(out, normalParam(toks[start:i]))
			start = i + 1
			continue
		}
		switch toks[i] {
		case "(", "[":
			depth++
		case ")", "]":
			depth--
		}
	}
	if len(out) == 1 && out[0] == "" {
		return nil
	}
	return out
}

// cTypeWords are the C keywords a parameter's type may end with or consist
// of; an identifier that is not one of them, coming after a type, is the
// parameter's name.
var cTypeWords = map[string]bool{
	"const": true, "volatile": true, "restrict": true, "struct": true, "enum": true, "union": true,
	"void": true, "char": true, "short": true, "int": true, "long": true, "float": true, "double": true,
	"signed": true, "unsigned": true, "bool": true, "_Bool": true,
}

var cQualifiers = map[string]bool{"const": true, "volatile": true, "restrict": true, "struct": true, "enum": true, "union": true}

// normalParam removes the name from one parameter's tokens.
func normalParam(toks []string) string {
	t := append([]string(nil), toks...)
	if open := indexOf(t, "("); open >= 0 {
		// A function pointer: ret ( * name ) ( params ).
		if open+3 < len(t) && t[open+1] == "*" && isIdent(t[open+2]) && t[open+3] == ")" {
			t = append(t[:open+2], t[open+3:]...)
		}
		close := matchParen(t, open)
		if close < 0 || close+1 >= len(t) || t[close+1] != "(" {
			return strings.Join(t, " ")
		}
		inner := matchParen(t, close+1)
		if inner < 0 {
			return strings.Join(t, " ")
		}
		params := normalParams(t[close+2 : inner])
		return strings.Join(t[:close+2], " ") + " " + strings.Join(params, " , ") + " " + strings.Join(t[inner:], " ")
	}
	if b := indexOf(t, "["); b > 0 && isIdent(t[b-1]) && !cTypeWords[t[b-1]] {
		t = append(t[:b-1], t[b:]...)
	} else if n := len(t); n > 1 && isIdent(t[n-1]) && !cTypeWords[t[n-1]] {
		typed := false
		for _, w := range t[:n-1] {
			if isIdent(w) && !cQualifiers[w] {
				typed = true
			}
		}
		if typed {
			t = t[:n-1]
		}
	}
	return strings.Join(t, " ")
}

func isIdent(s string) bool {
	return s != "" && (s[0] == '_' || s[0] >= 'A' && s[0] <= 'Z' || s[0] >= 'a' && s[0] <= 'z')
}

func indexOf(toks []string, s string) int {
	for i, t := range toks {
		if t == s {
			return i
		}
	}
	return -1
}

// matchParen returns the index of the ')' closing the '(' at open, or -1.
func matchParen(toks []string, open int) int {
	depth := 0
	for i := open; i < len(toks); i++ {
		switch toks[i] {
		case "(":
			depth++
		case ")":
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// TestParseCDecls holds the parser to hand-written cases: parameter names
// and layout do not matter, types and their order do.
func TestParseCDecls(t *testing.T) {
	a := parseCDecls(`/* c */
#ifdef __cplusplus
extern "C" {
#endif
typedef struct mlx_array_ { void* ctx; } mlx_array;
typedef void (*mlx_error_handler_func)(const char* msg, void* data);
int mlx_f(mlx_array* res, const mlx_array a /* may be null */, const int* shape, size_t n,
          int (*fun)(mlx_array*, const mlx_array, void*), void (*dtor)(void* p), const mlx_stream s);
mlx_array mlx_new(void);
static inline int mlx_inline(int x) { return x; }
size_t mlx_g(unsigned long n, const mlx_array);
#ifdef __cplusplus
}
#endif
`)
	b := parseCDecls(`typedef struct mlx_array_ {
  void *ctx;
} mlx_array;
typedef void (*mlx_error_handler_func)(const char *, void *d);
int
mlx_f(mlx_array *r, const mlx_array x, const int *dims, size_t dims_num,
      int (*f)(mlx_array *out, const mlx_array in, void *payload), void (*free_it)(void *), const mlx_stream stream);
mlx_array mlx_new(void);
int mlx_inline(int);
size_t mlx_g(unsigned long, const mlx_array arr);
`)
	want := map[string]string{
		"mlx_f":      "int mlx_f ( mlx_array * , const mlx_array , const int * , size_t , int ( * ) ( mlx_array * , const mlx_array , void * ) , void ( * ) ( void * ) , const mlx_stream )",
		"mlx_new":    "mlx_array mlx_new ( void )",
		"mlx_g":      "size_t mlx_g ( unsigned long , const mlx_array )",
		"mlx_inline": "static inline int mlx_inline ( int )",
	}
	for name, w := range want {
		if got := a.funcs[name]; got != w {
			t.Errorf("a: %s = %q, want %q", name, got, w)
		}
	}
	for _, name := range []string{"mlx_f", "mlx_new", "mlx_g"} {
		if a.funcs[name] != b.funcs[name] {
			t.Errorf("%s differs:\n\t%s\n\t%s", name, a.funcs[name], b.funcs[name])
		}
	}
	if a.funcs["mlx_inline"] == b.funcs["mlx_inline"] {
		t.Errorf("mlx_inline: static inline and extern declarations compare equal")
	}
	if a.types["mlx_array"] != b.types["mlx_array"] || a.types["mlx_array"] == "" {
		t.Errorf("mlx_array: %q vs %q", a.types["mlx_array"], b.types["mlx_array"])
	}
	if w := "typedef void ( * ) ( const char * , void * )"; a.types["mlx_error_handler_func"] != w ||
		b.types["mlx_error_handler_func"] != w {
		t.Errorf("mlx_error_handler_func: %q and %q, want %q", a.types["mlx_error_handler_func"],
			b.types["mlx_error_handler_func"], w)
	}
	// Drift is seen: a changed type, an added parameter.
	c := parseCDecls(`int mlx_f(mlx_array* res, const mlx_array a, const int* shape, int n,
          int (*fun)(mlx_array*, const mlx_array, void*), void (*dtor)(void* p), const mlx_stream s);
size_t mlx_g(unsigned long n, const mlx_array, bool extra);`)
	for _, name := range []string{"mlx_f", "mlx_g"} {
		if c.funcs[name] == a.funcs[name] {
			t.Errorf("%s: drift not seen: %s", name, c.funcs[name])
		}
	}
}
