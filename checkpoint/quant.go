package checkpoint

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// QuantParams are the parameters of one quantized layer, as passed to MLX's
// to_quantized: group size, bits per weight and mode ("affine" only here).
type QuantParams struct {
	GroupSize, Bits int
	Mode            string
}

// String renders the params like "affine b4 g64".
func (p QuantParams) String() string {
	return fmt.Sprintf("%s b%d g%d", p.Mode, p.Bits, p.GroupSize)
}

// LayerRule is a per-module entry of the quantization block: a dict of params
// (Quantize true, Params from the dict with mode defaulting to affine), true
// (Quantize true, Params = the global defaults) or false (Quantize false: the
// layer keeps a float weight). Python-falsy values (null, {}, 0) count as false.
type LayerRule struct {
	Quantize bool
	Params   QuantParams
}

// Quantization is the MLX quantization block of config.json.
type Quantization struct {
	// Source is the config key the block came from: "quantization".
	Source string
	// Default holds the global group_size, bits and mode (mode defaults to
	// affine). mlx_lm uses it only for layers whose rule is true.
	Default QuantParams
	// Layers holds the rules for this model's quantizable module paths
	// (model.embed_tokens, model.layers.{i}.self_attn.q_proj, ..., lm_head).
	Layers map[string]LayerRule
}

// Resolve decides, like the class_predicate inside mlx_lm's load_model,
// whether the module at path is quantized and with which params: a listed path
// follows its rule; an unlisted one is quantized iff the checkpoint holds
// "<path>.scales" (hasScales). A nil Quantization quantizes nothing (mlx_lm
// then never calls nn.quantize).
//
// For an unlisted quantized layer mlx_lm 0.32.2 does not use the global
// defaults: infer_quant_config reads group_size and bits off the stored
// shapes. Resolve returns Default for it; InferParams gives the stored params,
// and Open puts those in Linear.Params / Embedding.Params.
func (q *Quantization) Resolve(path string, hasScales bool) (p QuantParams, quantized bool) {
	if q == nil {
		return QuantParams{}, false
	}
	if r, ok := q.Layers[path]; ok {
		return r.Params, r.Quantize
	}
	if hasScales {
		return q.Default, true
	}
	return QuantParams{}, false
}

// Listed reports whether path has an explicit rule in the quantization block.
func (q *Quantization) Listed(path string) bool {
	if q == nil {
		return false
	}
	_, ok := q.Layers[path]
	return ok
}

// InferParams recovers the affine params of an unlisted quantized layer from
// its stored shapes the way mlx_lm's infer_quant_config does: group_size =
// in // scalesCols, bits = weightCols*32 // in. scalesFloat is false when the
// scales are uint8 (the mx/nv fp modes, unsupported here). The result is
// validated (bits, group size, exact fit).
func InferParams(path string, in, weightCols, scalesCols int, scalesFloat bool) (QuantParams, error) {
	if scalesCols <= 0 || in <= 0 {
		return QuantParams{}, fmt.Errorf("layer %s: cannot infer quantization from %d scale columns for %d input features", path, scalesCols, in)
	}
	p := QuantParams{GroupSize: in / scalesCols, Bits: weightCols * 32 / in, Mode: "affine"}
	if !scalesFloat {
		return p, fmt.Errorf("layer %s: uint8 scales mean an mx/nv floating-point quantization mode; mlxgo supports only affine", path)
	}
	if err := validParams(p); err != nil {
		return p, fmt.Errorf("layer %s (not listed in the quantization block, params inferred from shapes as mlx_lm does: weight columns %d, scales columns %d, in %d): %v", path, weightCols, scalesCols, in, err)
	}
	return p, nil
}

// validParams checks what MLX's affine quantize accepts.
func validParams(p QuantParams) error {
	if p.Mode != "affine" {
		return fmt.Errorf("mode %q is not supported (mlxgo supports only affine)", p.Mode)
	}
	switch p.Bits {
	case 2, 3, 4, 5, 6, 8:
	default:
		return fmt.Errorf("bits %d is not supported (want 2, 3, 4, 5, 6 or 8)", p.Bits)
	}
	switch p.GroupSize {
	case 32, 64, 128:
	default:
		return fmt.Errorf("group_size %d is not supported (want 32, 64 or 128)", p.GroupSize)
	}
	return nil
}

// modeDefaults are nn.quantize's (group_size, bits) defaults per mode.
var modeDefaults = map[string][2]int{
	"affine": {64, 4}, "mxfp4": {32, 4}, "nvfp4": {16, 4}, "mxfp8": {32, 8},
}

// unsupportedMethods are the quantization_config quant_method values for
// which mlx_lm's load_model does something special that mlxgo does not.
var unsupportedMethods = map[string]string{
	"awq":                "AutoAWQ weights, repacked by mlx_lm's _transform_awq_weights",
	"gptq":               "GPTQ weights, repacked by mlx_lm's _transform_awq_weights",
	"mxfp4":              "MX fp4 quantization",
	"mxfp8":              "MX fp8 quantization",
	"fp8":                "fp8 block quantization",
	"bitnet":             "BitNet ternary layers",
	"compressed-tensors": "compressed-tensors (nvfp4 or affine) quantization",
	"modelopt":           "NVIDIA ModelOpt nvfp4 quantization",
}

func hasNestedQuantConfig(obj map[string]any) bool {
	tc, ok := obj["text_config"].(map[string]any)
	if !ok {
		return false
	}
	_, ok = tc["quantization_config"]
	return ok
}

// parseQuantization follows load_model: the native "quantization" block wins;
// otherwise a truthy quantization_config (top level, or copied up from
// text_config) selects a branch by quant_method.
func parseQuantization(f fields, c *Config) (*Quantization, []string, error) {
	if v, ok := f.get("quantization"); ok {
		return parseNativeQuantization(f, c, v)
	}
	name := "quantization_config"
	qc, ok := f.obj[name]
	if !ok {
		if tc, ok := f.obj["text_config"].(map[string]any); ok {
			if v, ok := tc["quantization_config"]; ok {
				name, qc = "text_config.quantization_config", v
			}
		}
	}
	if !truthy(qc) {
		return nil, nil, nil
	}
	m, ok := qc.(map[string]any)
	if !ok {
		return nil, nil, f.errf(name, "want an object, got %s", kind(qc))
	}
	method, ok := m["quant_method"].(string)
	if !ok {
		return nil, nil, f.errf(name, "no quant_method string (got %s) and no quantization block; mlx_lm fails on it with KeyError", kind(m["quant_method"]))
	}
	if what, bad := unsupportedMethods[method]; bad {
		return nil, nil, f.errf(name+".quant_method", "unsupported quantization %q (%s); mlxgo supports only MLX affine quantization (a \"quantization\" block)", method, what)
	}
	return nil, []string{fmt.Sprintf("%s: %s.quant_method %q is not one mlx_lm knows; like mlx_lm, mlxgo quantizes nothing", f.src, name, method)}, nil
}

func parseNativeQuantization(top fields, c *Config, v any) (*Quantization, []string, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, nil, top.errf("quantization", "want an object, got %s", kind(v))
	}
	f := fields{src: top.src, prefix: "quantization.", obj: obj}
	q := &Quantization{Source: "quantization", Layers: map[string]LayerRule{}}
	var err error
	if q.Default.GroupSize, err = f.reqInt("group_size"); err != nil {
		return nil, nil, err
	}
	if q.Default.Bits, err = f.reqInt("bits"); err != nil {
		return nil, nil, err
	}
	mode, set, err := f.optString("mode")
	if err != nil {
		return nil, nil, err
	}
	q.Default.Mode = "affine"
	if set {
		q.Default.Mode = mode
	}
	if err := validParams(q.Default); err != nil {
		return nil, nil, top.errf("quantization", "global defaults: %v", err)
	}

	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var warnings []string
	for _, path := range keys {
		if path == "group_size" || path == "bits" || path == "mode" {
			continue
		}
		val := obj[path]
		where := "quantization[" + strconv.Quote(path) + "]"
		quantizable, isLeaf := leafModule(c, path)
		switch {
		case !isLeaf:
			warnings = append(warnings, fmt.Sprintf("%s: %s names no module of this model; mlx_lm never consults it", top.src, where))
			continue
		case !quantizable:
			if truthy(val) {
				return nil, nil, fmt.Errorf("%s: %s: module %s cannot be quantized (got %s; mlx_lm raises \"Unable to quantize\")", top.src, where, path, kind(val))
			}
			continue
		}
		rule, err := parseRule(val, q.Default)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %s: layer %s: %v", top.src, where, path, err)
		}
		q.Layers[path] = rule
	}
	return q, warnings, nil
}

// parseRule reads one per-module value as nn.quantize treats it: falsy means
// unquantized, true the global params, a dict the kwargs of to_quantized.
func parseRule(v any, def QuantParams) (LayerRule, error) {
	if !truthy(v) {
		return LayerRule{}, nil
	}
	switch x := v.(type) {
	case bool:
		return LayerRule{Quantize: true, Params: def}, nil
	case map[string]any:
		p := QuantParams{Mode: "affine"}
		if m, ok := x["mode"]; ok && m != nil {
			s, ok := m.(string)
			if !ok {
				return LayerRule{}, fmt.Errorf("mode: want a string, got %s", kind(m))
			}
			p.Mode = s
		}
		d, known := modeDefaults[p.Mode]
		if !known {
			return LayerRule{}, fmt.Errorf("mode %q is not an MLX quantization mode", p.Mode)
		}
		p.GroupSize, p.Bits = d[0], d[1]
		for k, e := range x {
			switch k {
			case "mode":
			case "group_size", "bits":
				if !truthy(e) { // to_quantized: group_size or default
					continue
				}
				i, ok := asInt(e)
				if !ok {
					return LayerRule{}, fmt.Errorf("%s: want an integer, got %s", k, kind(e))
				}
				if k == "bits" {
					p.Bits = i
				} else {
					p.GroupSize = i
				}
			case "quantize_input":
				if truthy(e) {
					return LayerRule{}, fmt.Errorf("quantize_input (activation quantization) is not supported")
				}
			default:
				return LayerRule{}, fmt.Errorf("unknown key %q (to_quantized takes group_size, bits, mode)", k)
			}
		}
		if err := validParams(p); err != nil {
			return LayerRule{}, err
		}
		return LayerRule{Quantize: true, Params: p}, nil
	}
	return LayerRule{}, fmt.Errorf("want a dict, true or false, got %s (nn.quantize rejects it)", kind(v))
}

// leafModule reports whether path names a leaf module of mlx_lm's llama
// Model, and whether that module is quantizable (has to_quantized).
func leafModule(c *Config, path string) (quantizable, leaf bool) {
	switch path {
	case "model.embed_tokens":
		return true, true
	case "model.norm":
		return false, true
	case "lm_head":
		return !c.TieWordEmbeddings, !c.TieWordEmbeddings
	}
	rest, ok := strings.CutPrefix(path, "model.layers.")
	if !ok {
		return false, false
	}
	idx, sub, ok := strings.Cut(rest, ".")
	i, err := strconv.Atoi(idx)
	if !ok || err != nil || i < 0 || i >= c.NumHiddenLayers || strconv.Itoa(i) != idx {
		return false, false
	}
	switch sub {
	case "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
		"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj":
		return true, true
	case "self_attn.rope", "input_layernorm", "post_attention_layernorm":
		return false, true
	}
	return false, false
}
