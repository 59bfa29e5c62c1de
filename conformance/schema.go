package conformance

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A case is checked against its op's schema before it runs (issue 19): a manifest whose
// inputs, outputs, params, tolerance classes or arrays do not match what the runner reads
// would otherwise pass on defaults or on nothing. The schemas are what conformance/README.md
// ("Op fixtures") documents and the oracle writes.

// paramKind is the set of JSON types a parameter may take.
type paramKind uint8

const (
	pInt   paramKind = 1 << iota // a number with an integral value
	pFloat                       // any number
	pBool
	pStr
	pList
	pDict
	pNull
)

func (k paramKind) String() string {
	var names []string
	for _, p := range []struct {
		k    paramKind
		name string
	}{{pInt, "an integer"}, {pFloat, "a number"}, {pBool, "true or false"}, {pStr, "a string"},
		{pList, "a list"}, {pDict, "an object"}, {pNull, "null"}} {
		if k&p.k != 0 && !(p.k == pInt && k&pFloat != 0) {
			names = append(names, p.name)
		}
	}
	return strings.Join(names, " or ")
}

// accepts reports whether the JSON value v has one of the kinds.
func (k paramKind) accepts(v any) bool {
	switch x := v.(type) {
	case nil:
		return k&pNull != 0
	case float64:
		return k&pFloat != 0 || (k&pInt != 0 && x == float64(int64(x)))
	case bool:
		return k&pBool != 0
	case string:
		return k&pStr != 0
	case []any:
		return k&pList != 0
	case map[string]any:
		return k&pDict != 0
	}
	return false
}

// opSchema is what a runner reads from a case.
type opSchema struct {
	inputs  [][]string               // the accepted input lists, in order
	outputs func(outs []string) bool // whether the output list is one the runner makes
	outDoc  string                   // the accepted outputs, for messages
	params  map[string]paramKind     // every param the runner reads or the oracle documents
	req     []string                 // params that must be present
}

// outputsAre accepts exactly the given outputs, in any order.
func outputsAre(want ...string) (func([]string) bool, string) {
	w := slices.Clone(want)
	sort.Strings(w)
	return func(outs []string) bool {
		o := slices.Clone(outs)
		sort.Strings(o)
		return slices.Equal(o, w)
	}, strings.Join(want, ", ")
}

// schema builds an opSchema; common params (input_order, doc) are added to every one.
func schema(inputs [][]string, outs []string, params map[string]paramKind, req ...string) opSchema {
	f, doc := outputsAre(outs...)
	p := map[string]paramKind{"input_order": pList, "doc": pStr}
	for k, v := range params {
		p[k] = v
	}
	return opSchema{inputs: inputs, outputs: f, outDoc: doc, params: p, req: req}
}

func in(names ...string) [][]string { return [][]string{names} }

var schemas = func() map[string]opSchema {
	views := map[string]paramKind{"views": pDict}
	quant := map[string]paramKind{"bits": pInt, "group_size": pInt, "mode": pStr}
	reduce := map[string]paramKind{"axis": pInt, "keepdims": pBool}
	m := map[string]opSchema{
		"apply_min_p":          schema(in("logprobs"), []string{"y"}, map[string]paramKind{"min_p": pFloat, "min_tokens_to_keep": pInt}, "min_p", "min_tokens_to_keep"),
		"apply_top_k":          schema(in("logprobs"), []string{"y"}, map[string]paramKind{"top_k": pInt}, "top_k"),
		"apply_top_p":          schema(in("logprobs"), []string{"y"}, map[string]paramKind{"top_p": pFloat}, "top_p"),
		"temperature":          schema(in("logprobs"), []string{"y"}, map[string]paramKind{"temp": pFloat}, "temp"),
		"repetition_penalty":   schema(in("tokens", "logits"), []string{"y"}, map[string]paramKind{"penalty": pFloat, "context_size": pInt}, "penalty", "context_size"),
		"categorical":          schema(in("logits", "key"), []string{"token"}, map[string]paramKind{"axis": pInt, "seed": pInt}),
		"categorical_sampling": schema(in("logprobs"), []string{"token"}, map[string]paramKind{"seed": pInt, "temp": pFloat}, "seed", "temp"),
		"make_sampler": schema(in("logprobs"), []string{"token"}, map[string]paramKind{"temp": pFloat, "top_p": pFloat, "min_p": pFloat,
			"xtc_probability": pFloat, "top_k": pInt, "min_tokens_to_keep": pInt, "seed": pInt},
			"temp", "top_p", "min_p", "xtc_probability", "top_k", "min_tokens_to_keep", "seed"),
		"random_key":          schema([][]string{{}}, []string{"key"}, map[string]paramKind{"seed": pInt}, "seed"),
		"random_split":        schema(in("key"), []string{"keys"}, map[string]paramKind{"num": pInt}, "num"),
		"random_uniform":      schema(in("key"), []string{"u"}, map[string]paramKind{"low": pFloat, "high": pFloat, "shape": pList}, "low", "high", "shape"),
		"argmax":              schema(in("x"), []string{"y"}, reduce, "axis"),
		"max":                 schema(in("x"), []string{"y"}, reduce, "axis"),
		"sum":                 schema(in("x"), []string{"y"}, reduce, "axis"),
		"softmax":             schema(in("x"), []string{"y"}, map[string]paramKind{"axis": pInt, "precise": pBool}, "axis"),
		"astype":              schema(in("x"), []string{"y"}, map[string]paramKind{"to": pStr, "views": pDict}, "to"),
		"matmul":              schema(in("a", "b"), []string{"y"}, views),
		"where":               schema(in("cond", "a", "b"), []string{"y"}, views),
		"reshape":             schema(in("x"), []string{"y"}, map[string]paramKind{"shape": pList, "views": pDict}, "shape"),
		"transpose":           schema(in("x"), []string{"y"}, map[string]paramKind{"axes": pList, "views": pDict}, "axes"),
		"slice":               schema(in("x"), []string{"y"}, map[string]paramKind{"start": pList, "stop": pList, "views": pDict}, "start", "stop"),
		"slice_update":        schema(in("dst", "src"), []string{"y"}, map[string]paramKind{"start": pList, "views": pDict}, "start"),
		"take":                schema(in("x", "indices"), []string{"y"}, map[string]paramKind{"axis": pInt, "views": pDict}, "axis"),
		"zeros":               schema([][]string{{}}, []string{"y"}, map[string]paramKind{"shape": pList}, "shape"),
		"full":                schema([][]string{{}}, []string{"y"}, map[string]paramKind{"shape": pList, "value": pStr}, "shape", "value"),
		"rms_norm":            schema(in("x", "weight"), []string{"y"}, map[string]paramKind{"eps": pFloat}, "eps"),
		"swiglu":              schema(in("gate", "x"), []string{"y"}, nil),
		"quantize":            schema(in("w"), []string{"wq", "scales", "biases"}, quant, "bits", "group_size"),
		"dequantize":          schema(in("wq", "scales", "biases"), []string{"w"}, quant, "bits", "group_size"),
		"quantized_embedding": schema(in("ids", "weight", "scales", "biases"), []string{"y"}, quant, "bits", "group_size"),
		"quantized_matmul": schema(in("x", "wq", "scales", "biases"), []string{"y"},
			map[string]paramKind{"bits": pInt, "group_size": pInt, "mode": pStr, "transpose": pBool}, "bits", "group_size"),
		"rope": schema([][]string{{"x"}, {"x", "freqs"}, {"x", "offset"}, {"x", "offset", "freqs"}}, []string{"y"},
			map[string]paramKind{"base": pFloat | pNull, "dims": pInt, "freqs": pStr | pNull, "offset": pInt | pList,
				"offset_is_array": pBool, "scale": pFloat, "traditional": pBool, "llama3": pDict}, "dims"),
		"scaled_dot_product_attention": schema([][]string{{"q", "k", "v"}, {"q", "k", "v", "mask"}}, []string{"y"},
			map[string]paramKind{"mask": pStr | pNull, "mask_dtype": pStr, "mask_kind": pStr, "scale": pFloat}, "scale"),
		"turboquant": schema(in("q", "k", "v"), []string{"k_codes", "k_scales", "k_zeros", "k_packed", "v_codes", "v_scales", "v_packed",
			"k_window", "v_window", "v_rotated", "attn_eager", "attn_deferred"},
			map[string]paramKind{"k_bits": pInt, "v_bits": pInt, "scale": pFloat, "causal": pBool, "constant_groups": pBool},
			"k_bits", "v_bits", "scale"),
		"model:prefill": schema(in("ids"), []string{"logits"}, map[string]paramKind{"length": pInt, "prefill_step_size": pInt, "prompt_seed": pInt}, "prefill_step_size"),
		"model:decode": schema(in("ids"), []string{"logits", "logprobs", "tokens"}, map[string]paramKind{"margin_rule": pStr,
			"prefill_step_size": pInt, "prompt_length": pInt, "prompt_seed": pInt, "sampler": pStr, "steps": pInt,
			"max_kv_size": pInt, "kv_bits": pInt, "kv_group_size": pInt, "quantized_kv_start": pInt}, "prefill_step_size", "steps"),
		"model:greedy": schema(in("ids"), []string{"tokens", "margins"}, map[string]paramKind{"margin_rule": pStr, "max_tokens": pInt,
			"oracle_logprob_error": pFloat, "prefill_step_size": pInt, "prompt_length": pInt, "prompt_seed": pInt, "sampler": pStr,
			"max_kv_size": pInt, "kv_bits": pInt, "kv_group_size": pInt, "quantized_kv_start": pInt},
			"prefill_step_size", "max_tokens", "sampler"),
	}
	// concatenate takes x0 ... x(n-1).
	cat := schema(nil, []string{"y"}, map[string]paramKind{"axis": pInt, "views": pDict}, "axis")
	for n := 1; n <= 16; n++ {
		var names []string
		for i := range n {
			names = append(names, "x"+strconv.Itoa(i))
		}
		cat.inputs = append(cat.inputs, names)
	}
	m["concatenate"] = cat
	// logsumexp writes lse, and logprobs (x - lse) when it is asked for.
	lse := schema(in("x"), nil, map[string]paramKind{"axis": pInt | pNull, "keepdims": pBool, "outputs_doc": pStr})
	one, _ := outputsAre("lse")
	two, _ := outputsAre("lse", "logprobs")
	lse.outputs = func(o []string) bool { return one(o) || two(o) }
	lse.outDoc = "lse, or lse and logprobs"
	m["logsumexp"] = lse
	// model:hidden writes the hidden state after each of the first layers, the final norm
	// and the logits.
	hid := schema(in("ids"), nil, map[string]paramKind{"length": pInt, "prompt_seed": pInt})
	hid.outputs = func(o []string) bool {
		n := 0
		for _, x := range o {
			if strings.HasPrefix(x, "h.") {
				n++
			}
		}
		var want []string
		for i := range n {
			want = append(want, "h."+strconv.Itoa(i))
		}
		f, _ := outputsAre(append(want, "norm", "logits")...)
		return n > 0 && f(o)
	}
	hid.outDoc = "h.0 ... h.(k-1), norm, logits"
	m["model:hidden"] = hid
	for _, op := range unaryOps() {
		m[op] = schema(in("x"), []string{"y"}, views)
	}
	for _, op := range binaryOps() {
		m[op] = schema(in("a", "b"), []string{"y"}, views)
	}
	return m
}()

// Validate checks case c against its op's schema and its arrays file against its manifest:
// known op; the inputs, outputs and references the runner reads and nothing else; every
// param known, of its JSON type, the required ones present; input_order equal to inputs;
// every output with a known tolerance class; the arrays file holding exactly in.<input>,
// out.<output> and ref.<reference>. Check and CheckAs call it first; a case that fails it
// is a failure, never a pass.
func Validate(c *Case) error {
	errf := func(format string, args ...any) error {
		return fmt.Errorf("conformance: case %s (%s): %s", c.Name, c.Path, fmt.Sprintf(format, args...))
	}
	key := runnerKey(c)
	s, ok := schemas[key]
	if !ok {
		return errf("no parameter schema for %s op %q in this build", c.Kind, c.Op)
	}
	okIn := false
	for _, want := range s.inputs {
		if slices.Equal(c.Inputs, want) {
			okIn = true
		}
	}
	if !okIn {
		var docs []string
		for _, want := range s.inputs {
			docs = append(docs, "["+strings.Join(want, ", ")+"]")
		}
		return errf("inputs [%s], want %s for op %s", strings.Join(c.Inputs, ", "), strings.Join(docs, " or "), key)
	}
	if len(c.Outputs) == 0 || !s.outputs(c.Outputs) {
		return errf("outputs [%s], want %s for op %s", strings.Join(c.Outputs, ", "), s.outDoc, key)
	}
	for _, r := range c.References {
		if !slices.Contains(c.Outputs, r) {
			return errf("reference %q is not one of the outputs [%s]", r, strings.Join(c.Outputs, ", "))
		}
	}
	names := make([]string, 0, len(c.Params))
	for k := range c.Params {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		kind, ok := s.params[k]
		if !ok {
			known := make([]string, 0, len(s.params))
			for p := range s.params {
				known = append(known, p)
			}
			sort.Strings(known)
			return errf("unknown param %q for op %s (known: %s)", k, key, strings.Join(known, ", "))
		}
		if !kind.accepts(c.Params[k]) {
			return errf("param %q = %v, want %s", k, c.Params[k], kind)
		}
	}
	for _, k := range s.req {
		if _, ok := c.Params[k]; !ok {
			return errf("missing param %q (op %s)", k, key)
		}
	}
	if order, ok := c.Params["input_order"].([]any); ok {
		got := make([]string, len(order))
		for i, o := range order {
			got[i], _ = o.(string)
		}
		if !slices.Equal(got, c.Inputs) {
			return errf("input_order %v differs from inputs %v", order, c.Inputs)
		}
	}
	for _, out := range c.Outputs {
		class := c.ToleranceOf(out)
		if class == "" {
			return errf("output %q has no tolerance class", out)
		}
		if class == InfoClass {
			continue
		}
		if !knownClass(class, c.Op) {
			return errf("output %q: tolerance class %q is neither the op's name nor a class of the tolerance table", out, class)
		}
		if _, err := BudgetFor(class, c.DType); err != nil {
			return errf("output %q: %v", out, err)
		}
	}
	for out := range c.OutputTolerance {
		if !slices.Contains(c.Outputs, out) {
			return errf("output_tolerance names %q, which is not an output", out)
		}
	}
	return nil
}

// knownClass reports whether a case of op may name tolerance class: op cases name their op
// (which falls back to the table's "*" rows), any case may name a class the table lists. A
// misspelt class would otherwise fall back to "*" and pass under a budget nobody chose.
func knownClass(class, op string) bool {
	if class == op {
		return true
	}
	for k := range budgets {
		if k.class == class && class != "*" {
			return true
		}
	}
	return false
}

// validateArrays checks that the arrays file holds exactly the manifest's arrays.
func validateArrays(c *Case, a *Arrays) error {
	want := map[string]bool{}
	for _, n := range c.Inputs {
		want["in."+n] = true
	}
	for _, n := range c.Outputs {
		want["out."+n] = true
	}
	for _, n := range c.References {
		want["ref."+n] = true
	}
	have := map[string]bool{}
	for _, n := range a.f.Names() {
		have[n] = true
		if !want[n] {
			return fmt.Errorf("conformance: case %s: arrays file holds %q, which the manifest does not list", c.Name, n)
		}
	}
	var missing []string
	for n := range want {
		if !have[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return fmt.Errorf("conformance: case %s: arrays file lacks %s, which the manifest lists", c.Name, strings.Join(missing, ", "))
	}
	return nil
}
