package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/nikolalohinski/gonja/v2"
	"github.com/nikolalohinski/gonja/v2/builtins"
	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// A chat template is code from a downloaded file. The template engine (gonja) has no limits of
// its own: a recursive macro overflows the Go stack (a fatal error, not a panic), `'a' *
// 4000000000` allocates 4 GB, and nested loops run for ever. Rendering is bounded here without
// changing gonja: after parsing, the syntax tree is rewritten so that every place where the
// work or the memory of a rendering can grow passes through a hook of ours, and the hooks count
// against TemplateLimits:
//   - every block body (loop bodies, macro bodies, if branches, ...) starts with a tick node
//     that counts a step and the body's literal text;
//   - every arithmetic operator (+ - * / // % ** ~) and every item access x[i] becomes a filter
//     of ours, which checks the size of the result before gonja computes it (and rejects a
//     division by zero, as Python does);
//   - every {{ ... }} counts the bytes it writes;
//   - every filter and string method is wrapped: one step, a size estimate before the call for
//     those whose result can be much larger than their input, a size check after;
//   - macros count their nesting depth, and so do recursive loops (loop(children));
//   - range() checks its length first (gonja's runs a goroutine per call that leaks when a
//     loop stops early).
// The hooks find the rendering's counters in a package variable, so renderings are serialized
// (renderMu); the time limit bounds how long one can hold the lock.

// TemplateLimits bound one rendering of a chat template. A zero field takes its default.
type TemplateLimits struct {
	// MaxDepth bounds nested macro calls and recursive loop calls (default 100; Python's
	// recursion limit stops Jinja at a few hundred levels).
	MaxDepth int
	// MaxOutputBytes bounds the text the rendering writes (counted where it is written, so a
	// macro's output counts again where the macro is used) and the size of any one string
	// value (default 64 MiB).
	MaxOutputBytes int
	// MaxSteps bounds the loop iterations, macro calls, filters and operators evaluated, and
	// the length of any one list (default 1,000,000; the templates of the tokenizer fixtures
	// take 10 to 20 steps a message).
	MaxSteps int
	// Timeout bounds the rendering's wall time (default 10 s).
	Timeout time.Duration
}

// The defaults of TemplateLimits and the fixed bounds on a template's source.
const (
	DefaultTemplateMaxDepth       = 100
	DefaultTemplateMaxOutputBytes = 64 << 20
	DefaultTemplateMaxSteps       = 1_000_000
	DefaultTemplateTimeout        = 10 * time.Second
	// MaxTemplateSourceBytes bounds a chat template's source (real ones are a few KB).
	MaxTemplateSourceBytes = 1 << 20
	// MaxTemplateNesting bounds the nesting of brackets, blocks and expressions in a template's
	// source: the parser and the evaluator recurse on it.
	MaxTemplateNesting = 256
)

func (l TemplateLimits) withDefaults() TemplateLimits {
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultTemplateMaxDepth
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = DefaultTemplateMaxOutputBytes
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultTemplateMaxSteps
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTemplateTimeout
	}
	return l
}

// TemplateLimitError reports that a rendering hit one of its TemplateLimits.
type TemplateLimitError struct {
	// Limit names the TemplateLimits field (or source bound) that was exceeded.
	Limit string
	// Max is that limit's value.
	Max int64
	// What says what was counted, and where.
	What string
}

// Error names what was counted, the limit's value and the TemplateLimits field.
func (e *TemplateLimitError) Error() string {
	return fmt.Sprintf("chat template: %s exceeds the limit of %d (%s)", e.What, e.Max, e.Limit)
}

// renderGuard holds the counters of the rendering in progress.
type renderGuard struct {
	lim      TemplateLimits
	depth    int
	steps    int
	emitted  int
	deadline time.Time
	err      error // the first limit hit or runtime error; every hook fails once it is set
}

var (
	renderMu    sync.Mutex
	activeGuard *renderGuard
)

func (g *renderGuard) fail(err error) error {
	if g.err == nil {
		g.err = err
	}
	return g.err
}

// step counts n steps and checks the step and time limits.
func (g *renderGuard) step(n int) error {
	if g.err != nil {
		return g.err
	}
	g.steps += n
	if g.steps > g.lim.MaxSteps {
		return g.fail(&TemplateLimitError{Limit: "MaxSteps", Max: int64(g.lim.MaxSteps),
			What: "the number of loop iterations, macro calls, filters and operators"})
	}
	if g.steps&255 < n || n > 255 {
		if time.Now().After(g.deadline) {
			return g.fail(&TemplateLimitError{Limit: "Timeout", Max: g.lim.Timeout.Milliseconds(),
				What: "the rendering time in milliseconds"})
		}
	}
	return nil
}

// size checks that a string of n bytes may be made.
func (g *renderGuard) size(n int, what string) error {
	if g.err != nil {
		return g.err
	}
	if n < 0 || n > g.lim.MaxOutputBytes {
		return g.fail(&TemplateLimitError{Limit: "MaxOutputBytes", Max: int64(g.lim.MaxOutputBytes),
			What: "the size in bytes of " + what})
	}
	return nil
}

// items checks that a list of n items may be made.
func (g *renderGuard) items(n int, what string) error {
	if g.err != nil {
		return g.err
	}
	if n < 0 || n > g.lim.MaxSteps {
		return g.fail(&TemplateLimitError{Limit: "MaxSteps", Max: int64(g.lim.MaxSteps),
			What: "the length of " + what})
	}
	return nil
}

// emit counts n bytes of rendered text.
func (g *renderGuard) emit(n int) error {
	if g.err != nil {
		return g.err
	}
	g.emitted += n
	if g.emitted > g.lim.MaxOutputBytes {
		return g.fail(&TemplateLimitError{Limit: "MaxOutputBytes", Max: int64(g.lim.MaxOutputBytes),
			What: "the rendered text in bytes"})
	}
	return nil
}

// enter counts one level of macro or recursive-loop nesting.
func (g *renderGuard) enter() error {
	if err := g.step(1); err != nil {
		return err
	}
	if g.depth >= g.lim.MaxDepth {
		return g.fail(&TemplateLimitError{Limit: "MaxDepth", Max: int64(g.lim.MaxDepth),
			What: "the nesting of macro calls and recursive loops"})
	}
	g.depth++
	return nil
}

// checkValue checks the size of a value a hook produced.
func (g *renderGuard) checkValue(v *exec.Value, what string) error {
	if v == nil || v.IsError() {
		return nil
	}
	switch {
	case v.IsString():
		return g.size(len(v.String()), what)
	case v.IsList() || v.IsDict():
		return g.items(v.Len(), what)
	}
	return nil
}

// Reserved names of the hooks; a template cannot name them (they are not valid in the
// templates transformers renders either, which reserve nothing, but no real template uses them).
const (
	hookTick = "__mlxgo_tick"
	hookEmit = "__mlxgo_emit"
	hookOp   = "__mlxgo_op"
	hookItem = "__mlxgo_item"
	hookSelf = "__mlxgo_noself"
	hookL    = "__mlxgo_l"
	hookR    = "__mlxgo_r"
)

// guarded runs f with the active guard; outside a rendering (never, in practice) it fails.
func guarded() (*renderGuard, error) {
	if activeGuard == nil {
		return nil, errors.New("chat template: hook called outside a rendering")
	}
	return activeGuard, nil
}

func errValue(err error) *exec.Value { return exec.AsValue(err) }

// tickFilter starts every block body: one step, the body's literal text, and the depth count
// of a recursive loop's loop() in scope.
func tickFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	g, err := guarded()
	if err != nil {
		return errValue(err)
	}
	if err := g.step(1); err != nil {
		return errValue(err)
	}
	if len(params.Args) > 0 {
		if err := g.emit(params.Args[0].Integer()); err != nil {
			return errValue(err)
		}
	}
	ctx := e.Environment.Context
	if lp, ok := ctx.Get("loop"); ok {
		if fn, ok := lp.(func(*exec.VarArgs) *exec.Value); ok {
			// A recursive loop: its loop(children) renders the body again, one level deeper.
			ctx.Set("loop", func(va *exec.VarArgs) *exec.Value {
				if err := g.enter(); err != nil {
					return errValue(err)
				}
				defer func() { g.depth-- }()
				return fn(va)
			})
		}
	}
	return exec.AsValue("")
}

// emitFilter counts the text a {{ ... }} writes.
func emitFilter(_ *exec.Evaluator, in *exec.Value, _ *exec.VarArgs) *exec.Value {
	g, err := guarded()
	if err != nil {
		return errValue(err)
	}
	if in.IsError() {
		return in
	}
	if !in.IsString() {
		// gonja prints a list or dict whole: bound it before it is built.
		if err := g.size(valueSize(in, g.lim.MaxOutputBytes), "the text of a printed value"); err != nil {
			return errValue(err)
		}
	}
	if err := g.emit(len(in.String())); err != nil {
		return errValue(err)
	}
	return in
}

// valueSize bounds the length of v's text form; it stops counting past limit (and treats
// nesting deeper than maxJSONDepth as past it).
func valueSize(v any, limit int) int {
	total := 0
	var walk func(x reflect.Value, depth int)
	walk = func(x reflect.Value, depth int) {
		if total > limit {
			return
		}
		if depth > maxJSONDepth {
			total = limit + 1
			return
		}
		if !x.IsValid() {
			total += 4
			return
		}
		if x.Type() == reflect.TypeFor[*exec.Value]() {
			if x.IsNil() {
				total += 4
				return
			}
			walk(x.Interface().(*exec.Value).Val, depth+1)
			return
		}
		switch x.Kind() {
		case reflect.Interface, reflect.Pointer:
			if x.IsNil() {
				total += 4
				return
			}
			walk(x.Elem(), depth+1)
		case reflect.String:
			total += x.Len() + 2
		case reflect.Slice, reflect.Array:
			total += 2
			for i := 0; i < x.Len() && total <= limit; i++ {
				total += 2
				walk(x.Index(i), depth+1)
			}
		case reflect.Map:
			total += 2
			for it := x.MapRange(); it.Next() && total <= limit; {
				total += 4
				walk(it.Key(), depth+1)
				walk(it.Value(), depth+1)
			}
		case reflect.Struct:
			for i := 0; i < x.NumField() && total <= limit; i++ {
				if x.Type().Field(i).IsExported() {
					walk(x.Field(i), depth+1)
				}
			}
		default:
			total += 24
		}
	}
	if val, ok := v.(*exec.Value); ok {
		walk(val.Val, 0)
	} else {
		walk(reflect.ValueOf(v), 0)
	}
	return total
}

// stringifyFilters are the filters that turn a list or dict input into its text first.
var stringifyFilters = map[string]bool{"string": true, "pprint": true, "e": true, "escape": true,
	"forceescape": true, "safe": true, "trim": true, "upper": true, "lower": true, "title": true,
	"capitalize": true, "center": true, "indent": true, "replace": true, "truncate": true,
	"wordwrap": true, "wordcount": true, "striptags": true, "urlencode": true, "urlize": true, "format": true}

var opTokens = map[string]tokens.Type{
	"+": tokens.Addition, "-": tokens.Subtraction, "*": tokens.Multiply, "/": tokens.Division,
	"//": tokens.FloorDivision, "%": tokens.Modulo, "**": tokens.Power, "~": tokens.Tilde,
}

// opByType is opTokens reversed.
var opByType = func() map[tokens.Type]string {
	m := map[tokens.Type]string{}
	for op, typ := range opTokens {
		m[typ] = op
	}
	return m
}()

// opNodes are gonja's own operators applied to two context variables, to which the checked
// operator hands its operands.
var opNodes = func() map[string]*nodes.BinaryExpression {
	m := map[string]*nodes.BinaryExpression{}
	for op, typ := range opTokens {
		m[op] = &nodes.BinaryExpression{
			Left:     nameNode(hookL),
			Right:    nameNode(hookR),
			Operator: &nodes.BinOperator{Token: &tokens.Token{Type: typ, Val: op}},
		}
	}
	return m
}()

var itemNode = &nodes.GetItem{Location: &tokens.Token{}, Node: nameNode(hookL), Arg: nameNode(hookR)}

func nameNode(name string) *nodes.Name {
	return &nodes.Name{Name: &tokens.Token{Type: tokens.Name, Val: name}}
}

// delegate evaluates node (one of opNodes or itemNode) with l and r bound to its operands.
func delegate(e *exec.Evaluator, node nodes.Expression, l, r *exec.Value) *exec.Value {
	ctx := e.Environment.Context.Inherit()
	ctx.Set(hookL, l)
	ctx.Set(hookR, r)
	sub := &exec.Evaluator{
		Config: e.Config,
		Loader: e.Loader,
		Environment: &exec.Environment{
			Context:           ctx,
			Filters:           e.Environment.Filters,
			Tests:             e.Environment.Tests,
			ControlStructures: e.Environment.ControlStructures,
			Methods:           e.Environment.Methods,
		},
	}
	return sub.Eval(node)
}

// textSize is the length of v's text form, bounded without building it for a list or dict.
func textSize(v *exec.Value, g *renderGuard) int {
	if v.IsString() {
		return len(v.String())
	}
	if v.IsList() || v.IsDict() {
		return valueSize(v, g.lim.MaxOutputBytes)
	}
	return len(v.String())
}

func isNumber(v *exec.Value) bool { return v.IsInteger() || v.IsFloat() || v.IsBool() }

// opFilter is the checked form of `in OP right`: args are the operator and the right operand.
func opFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	g, err := guarded()
	if err != nil {
		return errValue(err)
	}
	if err := g.step(1); err != nil {
		return errValue(err)
	}
	if in.IsError() {
		return in
	}
	if len(params.Args) != 2 {
		return errValue(errors.New("chat template: internal: operator hook without operands"))
	}
	op, right := params.Args[0].String(), params.Args[1]
	if right.IsError() {
		return right
	}
	node, ok := opNodes[op]
	if !ok {
		return errValue(fmt.Errorf("chat template: internal: unknown operator %q", op))
	}
	what := "the result of " + op
	switch op {
	case "*":
		str, n := in, right
		if !in.IsString() && right.IsString() { // Python: 3 * 'ab'
			str, n = right, in
		}
		if str.IsString() && n.IsInteger() {
			count := n.Integer()
			if count <= 0 || len(str.String()) == 0 {
				return exec.AsValue("") // Python: 'ab' * -1 == ''
			}
			if count > g.lim.MaxOutputBytes/len(str.String()) {
				return errValue(g.size(-1, what))
			}
			return exec.AsValue(strings.Repeat(str.String(), count))
		}
	case "+":
		if in.IsList() && right.IsList() {
			if err := g.items(in.Len()+right.Len(), what); err != nil {
				return errValue(err)
			}
		} else if in.IsString() || right.IsString() {
			if err := g.size(textSize(in, g)+textSize(right, g), what); err != nil {
				return errValue(err)
			}
		}
	case "~":
		if err := g.size(textSize(in, g)+textSize(right, g), what); err != nil {
			return errValue(err)
		}
	case "/", "//", "%":
		zero := false
		if op == "%" {
			// gonja computes % on the integer parts (a Go division): Python's 5 % 0.5 is 0.0,
			// here an error rather than a crash.
			zero = isNumber(right) && right.Integer() == 0
		} else {
			zero = isNumber(right) && right.Float() == 0
		}
		if zero {
			return errValue(g.fail(fmt.Errorf("chat template: division by zero (%s %s %s)", in.String(), op, right.String())))
		}
	}
	out := delegate(e, node, in, right)
	if err := g.checkValue(out, what); err != nil {
		return errValue(err)
	}
	return out
}

// itemFilter is the checked form of `in[arg]`; a negative index counts from the end, as in
// Python (gonja's own access misses x[-len(x)], so messages[-1] failed on one message).
func itemFilter(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	g, err := guarded()
	if err != nil {
		return errValue(err)
	}
	if err := g.step(1); err != nil {
		return errValue(err)
	}
	if in.IsError() {
		return in
	}
	if len(params.Args) != 1 {
		return errValue(errors.New("chat template: internal: item hook without an index"))
	}
	arg := params.Args[0]
	if arg.IsError() {
		return arg
	}
	if arg.IsInteger() && !arg.IsBool() && arg.Integer() < 0 && (in.IsList() || in.IsString()) {
		if i := in.Len() + arg.Integer(); i >= 0 {
			arg = exec.AsValue(i)
		}
	}
	return delegate(e, itemNode, in, arg)
}

var errSelfContaining = errors.New("chat template: a namespace or dict cannot contain itself (Python would allow it, but gonja recurses on it without end)")

// containsMap reports whether v holds the map at address target.
func containsMap(v any, target uintptr, seen map[uintptr]bool, depth int) bool {
	if depth > maxJSONDepth {
		return true
	}
	switch x := v.(type) {
	case nil:
		return false
	case *exec.Value:
		if x == nil || !x.Val.IsValid() {
			return false
		}
		return containsMap(x.Val, target, seen, depth+1)
	case exec.Dict:
		for _, p := range x.Pairs {
			if containsMap(p.Value, target, seen, depth+1) {
				return true
			}
		}
		return false
	case *exec.Dict:
		return x != nil && containsMap(*x, target, seen, depth+1)
	}
	rv, ok := v.(reflect.Value)
	if !ok {
		rv = reflect.ValueOf(v)
	}
	switch rv.Kind() {
	case reflect.Interface, reflect.Pointer:
		if rv.IsNil() {
			return false
		}
		if rv.Type() == reflect.TypeFor[*exec.Value]() || rv.Type() == reflect.TypeFor[*exec.Dict]() {
			return containsMap(rv.Interface(), target, seen, depth+1)
		}
		return containsMap(rv.Elem(), target, seen, depth+1)
	case reflect.Map:
		if rv.Pointer() == target {
			return true
		}
		if seen[rv.Pointer()] {
			return false
		}
		seen[rv.Pointer()] = true
		for it := rv.MapRange(); it.Next(); {
			if containsMap(it.Value(), target, seen, depth+1) {
				return true
			}
		}
	case reflect.Slice, reflect.Array:
		if rv.Type() == reflect.TypeFor[exec.Dict]() {
			return false
		}
		for i := 0; i < rv.Len(); i++ {
			if containsMap(rv.Index(i), target, seen, depth+1) {
				return true
			}
		}
	case reflect.Struct:
		if rv.Type() == reflect.TypeFor[exec.Dict]() && rv.CanInterface() {
			return containsMap(rv.Interface(), target, seen, depth+1)
		}
	}
	return false
}

// noSelfFilter checks the value of {% set base.attr = value %}: a namespace holding itself
// overflows gonja's stack when printed or compared (a fatal error in Go).
func noSelfFilter(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	g, err := guarded()
	if err != nil {
		return errValue(err)
	}
	if in.IsError() || len(params.Args) != 1 || params.Args[0].IsError() {
		return in
	}
	base := params.Args[0].Val
	for base.Kind() == reflect.Interface || base.Kind() == reflect.Pointer {
		if base.IsNil() {
			return in
		}
		base = base.Elem()
	}
	if base.Kind() == reflect.Map && containsMap(in, base.Pointer(), map[uintptr]bool{}, 0) {
		return errValue(g.fail(errSelfContaining))
	}
	return in
}

// guardedRange is range() with its length checked first; it returns a list.
func guardedRange(params *exec.VarArgs) ([]int, error) {
	g, err := guarded()
	if err != nil {
		return nil, err
	}
	start, stop, step := 0, 0, 1
	args := params.Args
	for _, a := range args {
		if !a.IsInteger() {
			return nil, exec.ErrInvalidCall(errors.New("range: the arguments must be integers"))
		}
	}
	switch len(args) {
	case 1:
		stop = args[0].Integer()
	case 2:
		start, stop = args[0].Integer(), args[1].Integer()
	case 3:
		start, stop, step = args[0].Integer(), args[1].Integer(), args[2].Integer()
	default:
		return nil, exec.ErrInvalidCall(errors.New("range: expected [start, ]stop[, step]"))
	}
	if step == 0 {
		return nil, exec.ErrInvalidCall(errors.New("range: step must not be zero"))
	}
	n := 0
	if step > 0 && stop > start {
		n = int((uint64(stop-start) + uint64(step) - 1) / uint64(step))
	} else if step < 0 && stop < start {
		n = int((uint64(start-stop) + uint64(-step) - 1) / uint64(-step))
	}
	if err := g.items(n, "range()"); err != nil {
		return nil, err
	}
	if err := g.step(n); err != nil {
		return nil, err
	}
	out := make([]int, n)
	for i := range out {
		out[i] = start + i*step
	}
	return out, nil
}

// guardedLipsum is lipsum() with its size checked first.
func guardedLipsum(inner func(*exec.Evaluator, *exec.VarArgs) *exec.Value) func(*exec.Evaluator, *exec.VarArgs) *exec.Value {
	return func(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
		g, err := guarded()
		if err != nil {
			return errValue(err)
		}
		est := 1
		for _, a := range params.Args {
			if a.IsInteger() {
				est *= max(1, min(a.Integer(), 1<<20))
			}
		}
		for _, a := range params.KwArgs {
			if a.IsInteger() {
				est *= max(1, min(a.Integer(), 1<<20))
			}
		}
		if err := g.size(est*16, "lipsum()"); err != nil {
			return errValue(err)
		}
		return inner(e, params)
	}
}

// digitsSum adds the numbers written in s (the widths of a format string).
func digitsSum(s string) int {
	total, cur := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] >= '0' && s[i] <= '9' {
			cur = min(cur*10+int(s[i]-'0'), 1<<40)
			continue
		}
		total = min(total+cur, 1<<40)
		cur = 0
	}
	return total
}

func argInt(params *exec.VarArgs, i int, kw string) (int, bool) {
	if v, ok := params.KwArgs[kw]; ok && v.IsInteger() {
		return v.Integer(), true
	}
	if i < len(params.Args) && params.Args[i].IsInteger() {
		return params.Args[i].Integer(), true
	}
	return 0, false
}

func argStr(params *exec.VarArgs, i int, kw string) (string, bool) {
	if v, ok := params.KwArgs[kw]; ok && v.IsString() {
		return v.String(), true
	}
	if i < len(params.Args) && params.Args[i].IsString() {
		return params.Args[i].String(), true
	}
	return "", false
}

func joinedLen(v *exec.Value, sep int) int {
	total, n := 0, 0
	v.Iterate(func(_, _ int, key, _ *exec.Value) bool {
		total += len(key.String())
		n++
		return total < 1<<40
	}, func() {})
	return total + max(0, n-1)*sep
}

func replaceLen(s, old, new string) int {
	return len(s) + strings.Count(s, old)*len(new)
}

// filterEstimate bounds the size of a filter's result before it runs, for the filters whose
// result can be much larger than their input; items says the bound counts list items.
func filterEstimate(name string, in *exec.Value, params *exec.VarArgs) (est int, items bool) {
	s := func() string {
		if in.IsString() {
			return in.String()
		}
		return ""
	}
	switch name {
	case "center":
		w, _ := argInt(params, 0, "width")
		return max(len(s()), w), false
	case "indent":
		str := s()
		lines := strings.Count(str, "\n") + 1
		w, ok := argInt(params, 0, "width")
		if !ok {
			ws, _ := argStr(params, 0, "width")
			w = len(ws)
		}
		return len(str) + lines*max(w, 0), false
	case "format":
		total := len(s()) + digitsSum(s())
		for _, a := range params.Args {
			total += len(a.String())
		}
		return total, false
	case "join":
		sep, _ := argStr(params, 0, "d")
		return joinedLen(in, len(sep)), false
	case "replace":
		old, _ := argStr(params, 0, "old")
		nw, _ := argStr(params, 1, "new")
		return replaceLen(s(), old, nw), false
	case "batch", "slice":
		n, _ := argInt(params, 0, "linecount")
		if name == "batch" {
			n, _ = argInt(params, 0, "linecount")
		}
		return in.Len() + max(n, 0), true
	case "wordwrap":
		// The line being built is copied for every word added: the work is about the input
		// times the width; count it as bytes made.
		w, _ := argInt(params, 0, "width")
		return len(s()) / 64 * min(max(w, 1), len(s())+1) / 64, false
	case "list":
		return in.Len(), true
	}
	return 0, false
}

// methodEstimate is filterEstimate for the string methods.
func methodEstimate(name, self string, args *exec.VarArgs) int {
	switch name {
	case "center", "ljust", "rjust", "zfill":
		w, _ := argInt(args, 0, "width")
		return max(len(self), w)
	case "expandtabs":
		w, ok := argInt(args, 0, "tabsize")
		if !ok {
			w = 8
		}
		return len(self) + strings.Count(self, "\t")*max(w, 0)
	case "replace":
		old, _ := argStr(args, 0, "old")
		nw, _ := argStr(args, 1, "new")
		return replaceLen(self, old, nw)
	case "join":
		if len(args.Args) > 0 {
			return joinedLen(args.Args[0], len(self))
		}
	case "format", "format_map":
		total := len(self) + digitsSum(self)
		// A width taken from an argument ('{:>{}}'.format(x, w)): count integer arguments
		// as widths.
		nested := nestedWidth.MatchString(self)
		for _, a := range args.Args {
			total += len(a.String())
			if nested && a.IsInteger() {
				total += max(0, min(a.Integer(), 1<<40))
			}
		}
		for _, a := range args.KwArgs {
			total += len(a.String())
			if nested && a.IsInteger() {
				total += max(0, min(a.Integer(), 1<<40))
			}
		}
		return total
	}
	return 0
}

// nestedWidth matches a replacement field whose format spec holds another field.
var nestedWidth = regexp.MustCompile(`\{[^{}]*:[^{}]*\{`)

// gonjaFilters are the filters of gonja v2.9.1 (a filter set cannot be listed).
var gonjaFilters = []string{"abs", "attr", "batch", "capitalize", "center", "default", "d", "dictsort",
	"e", "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
	"int", "join", "items", "last", "length", "count", "list", "lower", "map", "max", "min", "pprint",
	"random", "rejectattr", "reject", "replace", "reverse", "round", "safe", "selectattr", "select",
	"slice", "sort", "string", "striptags", "sum", "title", "tojson", "trim", "truncate", "unique",
	"upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"}

func guardFilter(name string, inner exec.FilterFunction) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		g, err := guarded()
		if err != nil {
			return errValue(err)
		}
		if err := g.step(1); err != nil {
			return errValue(err)
		}
		what := "the result of filter " + name
		if !in.IsError() && stringifyFilters[name] && (in.IsList() || in.IsDict()) {
			if err := g.size(valueSize(in, g.lim.MaxOutputBytes), "the text of the input of filter "+name); err != nil {
				return errValue(err)
			}
		}
		if !in.IsError() {
			if est, items := filterEstimate(name, in, params); items {
				if err := g.items(est, what); err != nil {
					return errValue(err)
				}
			} else if err := g.size(est, what); err != nil {
				return errValue(err)
			}
		}
		out := inner(e, in, params)
		if err := g.checkValue(out, what); err != nil {
			return errValue(err)
		}
		return out
	}
}

func guardMethods[I any](set *exec.MethodSet[I], names []string, estimate func(name string, self I, args *exec.VarArgs) int) *exec.MethodSet[I] {
	m := map[string]exec.Method[I]{}
	for _, name := range names {
		inner, ok := set.Get(name)
		if !ok {
			continue
		}
		m[name] = func(self I, selfValue *exec.Value, args *exec.VarArgs) (any, error) {
			g, err := guarded()
			if err != nil {
				return nil, err
			}
			if err := g.step(1); err != nil {
				return nil, err
			}
			what := "the result of method " + name
			if estimate != nil {
				if err := g.size(estimate(name, self, args), what); err != nil {
					return nil, err
				}
			}
			out, err := inner(self, selfValue, args)
			if err != nil {
				return out, err
			}
			if rv := reflect.ValueOf(self); rv.Kind() == reflect.Map {
				// d.update(x) and d.setdefault(k, x): x must not hold d (see noSelfFilter).
				for _, a := range args.Args {
					if containsMap(a, rv.Pointer(), map[uintptr]bool{}, 0) {
						return nil, g.fail(errSelfContaining)
					}
				}
				for _, a := range args.KwArgs {
					if containsMap(a, rv.Pointer(), map[uintptr]bool{}, 0) {
						return nil, g.fail(errSelfContaining)
					}
				}
			}
			if err := g.checkValue(exec.AsValue(out), what); err != nil {
				return nil, err
			}
			return out, nil
		}
	}
	return exec.NewMethodSet(m)
}

// The methods of gonja v2.9.1 (a method set cannot be listed either).
var (
	strMethodNames = strings.Fields(`capitalize capwords casefold center count encode endswith expandtabs
		find format format_map isalnum isalpha isascii isdecimal isdigit islower isnumeric isprintable
		isspace istitle isupper join ljust lower lstrip partition removeprefix removesuffix replace rfind
		rjust rpartition rsplit rstrip split splitlines startswith strip swapcase title upper zfill`)
	listMethodNames  = strings.Fields(`append reverse copy`)
	dictMethodNames  = strings.Fields(`keys values items get pop setdefault update copy clear`)
	intMethodNames   = strings.Fields(`is_integer bit_length bit_count as_integer_ratio`)
	floatMethodNames = strings.Fields(`is_integer as_integer_ratio hex`)
	boolMethodNames  = strings.Fields(`string int bit_length bit_count as_integer_ratio`)
)

func newChatEnvironment() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	if err := filters.Replace("tojson", pyToJSON); err != nil {
		panic(err) // gonja always has tojson; a version without it is a build problem
	}
	for _, name := range gonjaFilters {
		if f, ok := filters.Get(name); ok {
			_ = filters.Replace(name, guardFilter(name, f))
		}
	}
	for name, f := range map[string]exec.FilterFunction{hookTick: tickFilter, hookEmit: emitFilter, hookOp: opFilter, hookItem: itemFilter, hookSelf: noSelfFilter} {
		if err := filters.Register(name, f); err != nil {
			panic(err)
		}
	}
	methods := exec.Methods{
		Str: guardMethods(builtins.Methods.Str, strMethodNames, func(name string, self string, args *exec.VarArgs) int {
			return methodEstimate(name, self, args)
		}),
		List:  guardMethods(builtins.Methods.List, listMethodNames, nil),
		Dict:  guardMethods(builtins.Methods.Dict, dictMethodNames, nil),
		Int:   guardMethods(builtins.Methods.Int, intMethodNames, nil),
		Float: guardMethods(builtins.Methods.Float, floatMethodNames, nil),
		Bool:  guardMethods(builtins.Methods.Bool, boolMethodNames, nil),
	}
	ctx := gonja.DefaultContext.Inherit()
	ctx.Set("range", guardedRange)
	if lip, ok := gonja.DefaultContext.Get("lipsum"); ok {
		if f, ok := lip.(func(*exec.Evaluator, *exec.VarArgs) *exec.Value); ok {
			ctx.Set("lipsum", guardedLipsum(f))
		} else {
			ctx.Set("lipsum", nil)
		}
	}
	controls := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{}).Update(builtins.ControlStructures)
	if parse, ok := controls.Get("macro"); ok {
		_ = controls.Replace("macro", guardMacroParser(parse))
	}
	// {% block %} bodies live outside the syntax tree the hooks go into, and self.name()
	// recurses into them without bound. Chat templates have no inheritance (transformers
	// loads no other template), so blocks are refused.
	if controls.Exists("block") {
		_ = controls.Replace("block", func(p, args *parser.Parser) (nodes.ControlStructure, error) {
			return nil, args.Error("{% block %} is not supported in chat templates", nil)
		})
	}
	return &exec.Environment{
		Context:           ctx,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: controls,
		Methods:           methods,
	}
}

// guardedMacro defines a macro whose calls count their nesting depth.
type guardedMacro struct {
	Inner exec.ControlStructure
	Macro *nodes.Macro
}

// Position is the macro statement's.
func (m *guardedMacro) Position() *tokens.Token { return m.Inner.Position() }

// String is the macro statement's.
func (m *guardedMacro) String() string { return m.Inner.String() }

// Execute binds the macro's name to a depth-counting form of gonja's macro function.
func (m *guardedMacro) Execute(r *exec.Renderer, tag *nodes.ControlStructureBlock) error {
	fn, err := exec.MacroNodeToFunc(m.Macro, r)
	if err != nil {
		return fmt.Errorf("macro %s: %w", m.Macro.Name, err)
	}
	r.Environment.Context.Set(m.Macro.Name, exec.Macro(func(params *exec.VarArgs) *exec.Value {
		g, err := guarded()
		if err != nil {
			return errValue(err)
		}
		if err := g.enter(); err != nil {
			return errValue(err)
		}
		defer func() { g.depth-- }()
		return fn(params)
	}))
	return nil
}

func guardMacroParser(parse parser.ControlStructureParser) parser.ControlStructureParser {
	return func(p, args *parser.Parser) (nodes.ControlStructure, error) {
		cs, err := parse(p, args)
		if err != nil {
			return cs, err
		}
		inner, ok := cs.(exec.ControlStructure)
		if !ok {
			return cs, nil
		}
		// gonja's macro structure embeds *nodes.Macro; find it by reflection, as its type
		// lives in an internal-looking package of gonja's.
		rv := reflect.ValueOf(cs)
		if rv.Kind() == reflect.Pointer && rv.Elem().Kind() == reflect.Struct {
			for i := 0; i < rv.Elem().NumField(); i++ {
				if mac, ok := rv.Elem().Field(i).Interface().(*nodes.Macro); ok {
					return &guardedMacro{Inner: inner, Macro: mac}, nil
				}
			}
		}
		return nil, errors.New("chat template: internal: unknown macro structure")
	}
}

// onlyRootLoader serves the template's own source, once: include, import and extends find
// nothing (transformers' environment has no loader either), and the template cannot read files.
type onlyRootLoader struct {
	src  string
	read bool
}

// Read serves the template's source once and refuses every other name.
func (l *onlyRootLoader) Read(path string) (io.Reader, error) {
	if path == "chat_template" && !l.read {
		l.read = true
		return strings.NewReader(l.src), nil
	}
	return nil, fmt.Errorf("chat template: cannot load %q: include, import and extends are not supported", path)
}

// Resolve returns path unchanged.
func (l *onlyRootLoader) Resolve(path string) (string, error) { return path, nil }

// Inherit returns the loader itself.
func (l *onlyRootLoader) Inherit(string) (loaders.Loader, error) { return l, nil }

// checkNesting rejects a source too large or nested too deeply for the parser's recursion.
func checkNesting(src string, cfg *config.Config) error {
	if len(src) > MaxTemplateSourceBytes {
		return &TemplateLimitError{Limit: "MaxTemplateSourceBytes", Max: MaxTemplateSourceBytes, What: "the template source in bytes"}
	}
	depth, blocks := 0, 0
	afterBlockBegin := false
	opens := map[string]bool{"if": true, "for": true, "macro": true, "call": true, "filter": true,
		"with": true, "block": true, "autoescape": true, "trans": true, "raw": true}
	stream := tokens.LexAll(src, cfg)
	for !stream.End() {
		tok := stream.Current()
		stream.Next()
		switch tok.Type {
		case tokens.LeftParenthesis, tokens.LeftBracket, tokens.LeftBrace:
			depth++
		case tokens.RightParenthesis, tokens.RightBracket, tokens.RightBrace:
			depth--
		case tokens.Name:
			if afterBlockBegin {
				if opens[tok.Val] {
					blocks++
				} else if strings.HasPrefix(tok.Val, "end") {
					blocks--
				}
			}
		case tokens.Error:
			return nil // the parser reports it
		}
		afterBlockBegin = tok.Type == tokens.BlockBegin
		if depth+blocks > MaxTemplateNesting {
			return &TemplateLimitError{Limit: "MaxTemplateNesting", Max: MaxTemplateNesting,
				What: fmt.Sprintf("the nesting of brackets and blocks at line %d", tok.Line)}
		}
	}
	return nil
}

// rewriteTemplate puts the hooks into a parsed template (see the comment at the top).
func rewriteTemplate(root *nodes.Template) error {
	w := &rewriter{done: map[uintptr]nodes.Node{}}
	for i, n := range root.Nodes {
		root.Nodes[i] = w.node(n, 0)
	}
	for _, m := range root.Macros {
		w.node(m, 0)
	}
	return w.err
}

// maxTreeDepth bounds the syntax tree's depth (a chain such as 1+1+1+... nests without brackets).
const maxTreeDepth = 4 * MaxTemplateNesting

type rewriter struct {
	done map[uintptr]nodes.Node // node -> its replacement (itself while being rewritten)
	err  error
}

// node rewrites n's children and returns its replacement.
func (w *rewriter) node(n nodes.Node, depth int) nodes.Node {
	rv := reflect.ValueOf(n)
	if n == nil || w.err != nil || rv.Kind() != reflect.Pointer || rv.IsNil() {
		return n
	}
	if r, ok := w.done[rv.Pointer()]; ok {
		return r
	}
	w.done[rv.Pointer()] = n
	if depth > maxTreeDepth {
		w.err = &TemplateLimitError{Limit: "MaxTemplateNesting", Max: maxTreeDepth,
			What: "the depth of the syntax tree"}
		return n
	}
	w.walk(rv, depth+1)
	r := w.replace(n)
	w.done[rv.Pointer()] = r
	return r
}

// unexported returns a settable form of the struct field name of *p.
func unexported(p reflect.Value, name string) (reflect.Value, bool) {
	f := p.Elem().FieldByName(name)
	if !f.IsValid() {
		return f, false
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem(), true
}

func (w *rewriter) replace(n nodes.Node) nodes.Node {
	switch x := n.(type) {
	case *controlStructures.SetControlStructure:
		// {% set base.attr = value %}: value passes noSelfFilter with base.
		rv := reflect.ValueOf(x)
		target, ok := unexported(rv, "target")
		if !ok || target.IsNil() {
			break
		}
		ga, ok := target.Interface().(*nodes.GetAttribute)
		if !ok {
			break
		}
		base, ok := ga.Node.(nodes.Expression)
		if !ok {
			break
		}
		for _, name := range []string{"expression", "alternative"} {
			f, ok := unexported(rv, name)
			if !ok || f.IsNil() {
				continue
			}
			if e, ok := f.Interface().(nodes.Expression); ok {
				f.Set(reflect.ValueOf(nodes.Expression(&nodes.FilteredExpression{Expression: e, Filters: []*nodes.FilterCall{{
					Token: ga.Location, Name: hookSelf, Args: []nodes.Expression{base},
				}}})))
			}
		}
	case *nodes.BinaryExpression:
		// By the token's type, not its text: gonja's lexer skips bytes it
		// cannot read, so "'a'\xcd* 4000000000" is a Multiply whose text is
		// not "*", and matching the text let it run unchecked (4 GB).
		if op, ok := opByType[x.Operator.Token.Type]; ok {
			return &nodes.FilteredExpression{Expression: x.Left, Filters: []*nodes.FilterCall{{
				Token: x.Operator.Token, Name: hookOp,
				Args: []nodes.Expression{&nodes.String{Location: x.Operator.Token, Val: op}, x.Right},
			}}}
		}
	case *nodes.GetItem:
		target, ok1 := x.Node.(nodes.Expression)
		arg, ok2 := x.Arg.(nodes.Expression)
		if ok1 && ok2 {
			return &nodes.FilteredExpression{Expression: target, Filters: []*nodes.FilterCall{{
				Token: x.Location, Name: hookItem, Args: []nodes.Expression{arg},
			}}}
		}
	case *nodes.Output:
		emit := func(e nodes.Expression) nodes.Expression {
			if e == nil {
				return nil
			}
			return &nodes.FilteredExpression{Expression: e, Filters: []*nodes.FilterCall{{Token: x.Start, Name: hookEmit}}}
		}
		x.Expression = emit(x.Expression)
		x.Alternative = emit(x.Alternative)
	case *nodes.Wrapper:
		data := 0
		for _, c := range x.Nodes {
			if d, ok := c.(*nodes.Data); ok && d.Data != nil {
				data += len(d.Data.Val)
			}
		}
		tick := &nodes.Output{Start: x.Location, End: x.Location, Expression: &nodes.FilteredExpression{
			Expression: &nodes.None{Location: x.Location},
			Filters: []*nodes.FilterCall{{Token: x.Location, Name: hookTick,
				Args: []nodes.Expression{&nodes.Integer{Location: x.Location, Val: data}}}},
		}}
		x.Nodes = append([]nodes.Node{tick}, x.Nodes...)
	}
	return n
}

// walkable reports whether the rewriter looks inside a struct of type t: gonja's nodes and
// control structures, and ours.
func walkable(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	switch t.PkgPath() {
	case "github.com/nikolalohinski/gonja/v2/nodes",
		"github.com/nikolalohinski/gonja/v2/builtins/control_structures",
		"github.com/mlxgo/mlxgo/tokenizer":
		return true
	}
	return false
}

// walk rewrites the node fields (and slices and maps of them) of the struct v points to.
// gonja keeps some of them unexported (the set statement's expression): they are reached
// through unsafe, as the set statement must be bounded too.
func (w *rewriter) walk(v reflect.Value, depth int) {
	if w.err != nil || v.Kind() != reflect.Pointer || v.IsNil() || !walkable(v.Type().Elem()) {
		return
	}
	s := v.Elem()
	for i := 0; i < s.NumField(); i++ {
		f := s.Field(i)
		if !f.CanSet() {
			f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
		}
		w.field(f, depth)
	}
}

func (w *rewriter) field(f reflect.Value, depth int) {
	switch f.Kind() {
	case reflect.Interface, reflect.Pointer:
		if f.IsNil() {
			return
		}
		if n, ok := f.Interface().(nodes.Node); ok {
			r := w.node(n, depth)
			if f.Kind() == reflect.Interface && reflect.TypeOf(r).AssignableTo(f.Type()) {
				f.Set(reflect.ValueOf(r))
			}
			return
		}
		if f.Kind() == reflect.Pointer {
			w.walk(f, depth)
		}
	case reflect.Slice:
		for j := 0; j < f.Len(); j++ {
			w.field(f.Index(j), depth)
		}
	case reflect.Map:
		for it := f.MapRange(); it.Next(); {
			val := it.Value()
			if (val.Kind() == reflect.Interface || val.Kind() == reflect.Pointer) && !val.IsNil() {
				if n, ok := val.Interface().(nodes.Node); ok {
					r := w.node(n, depth)
					if reflect.TypeOf(r).AssignableTo(f.Type().Elem()) {
						f.SetMapIndex(it.Key(), reflect.ValueOf(r))
					}
				}
			}
		}
	}
}
