package debug

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// LayerTaps are the per-layer tap names, after "layers.{i}.", in graph order.
var LayerTaps = []string{
	"input_norm", "q", "k", "v", "attn", "o_proj", "residual",
	"post_norm", "mlp.gate", "mlp.up", "mlp.swiglu", "mlp.down", "out",
}

// TapNames returns every tap of a model with the given number of layers, in
// graph order.
func TapNames(layers int) []string {
	names := []string{"embed"}
	for i := 0; i < layers; i++ {
		for _, t := range LayerTaps {
			names = append(names, LayerTap(i, t))
		}
	}
	return append(names, "norm", "logits")
}

// LayerTap returns "layers.{i}.{suffix}".
func LayerTap(i int, suffix string) string { return "layers." + strconv.Itoa(i) + "." + suffix }

// ParseTap splits a tap name into its layer (-1 for embed, norm and logits)
// and its name within the layer. ok is false for a name that is not a tap.
func ParseTap(name string) (layer int, suffix string, ok bool) {
	switch name {
	case "embed", "norm", "logits":
		return -1, name, true
	}
	rest, found := strings.CutPrefix(name, "layers.")
	if !found {
		return 0, "", false
	}
	num, suffix, found := strings.Cut(rest, ".")
	i, err := strconv.Atoi(num)
	if !found || err != nil || i < 0 || strconv.Itoa(i) != num {
		return 0, "", false
	}
	for _, t := range LayerTaps {
		if t == suffix {
			return i, suffix, true
		}
	}
	return 0, "", false
}

// Step is one op of the chain that produces a tap from earlier taps.
type Step struct {
	// Class is the op class: "embedding", "rms_norm", "linear" (a
	// quantized_matmul or matmul), "rope", "sdpa", "add" or "swiglu".
	Class string
	// Module is the module or op as mlx_lm names it ("q_proj", "rope",
	// "input_layernorm", "lm_head", ...).
	Module string
}

func (s Step) String() string {
	if s.Class == s.Module {
		return s.Class
	}
	return s.Module + " (" + s.Class + ")"
}

// Steps returns the ops that produce a tap from the taps before it (ids for
// embed). q and k are a projection followed by RoPE; every other tap is one
// op. Reshapes and transposes, which move data without arithmetic, are not
// steps.
func Steps(tap string) ([]Step, error) {
	_, s, ok := ParseTap(tap)
	if !ok {
		return nil, fmt.Errorf("debug: %q is not a tap name (want embed, norm, logits or layers.{i}.{%s})", tap, strings.Join(LayerTaps, "|"))
	}
	lin := func(m string) []Step { return []Step{{"linear", m}} }
	switch s {
	case "embed":
		return []Step{{"embedding", "embed_tokens"}}, nil
	case "norm":
		return []Step{{"rms_norm", "norm"}}, nil
	case "logits":
		return lin("lm_head"), nil
	case "input_norm":
		return []Step{{"rms_norm", "input_layernorm"}}, nil
	case "post_norm":
		return []Step{{"rms_norm", "post_attention_layernorm"}}, nil
	case "q", "k":
		return []Step{{"linear", s + "_proj"}, {"rope", "rope"}}, nil
	case "v", "o_proj":
		return lin(strings.TrimSuffix(s, "_proj") + "_proj"), nil
	case "attn":
		return []Step{{"sdpa", "scaled_dot_product_attention"}}, nil
	case "residual", "out":
		return []Step{{"add", "add"}}, nil
	case "mlp.gate", "mlp.up", "mlp.down":
		return lin(strings.TrimPrefix(s, "mlp.") + "_proj"), nil
	case "mlp.swiglu":
		return []Step{{"swiglu", "swiglu"}}, nil
	}
	return nil, fmt.Errorf("debug: no steps for tap %q", tap)
}

// Class returns a tap's tolerance class: "embed", "rms_norm", "proj_rope"
// (q, k), "proj" (v, o_proj, mlp.gate/up/down), "sdpa", "residual"
// (residual, out), "swiglu" or "logits".
func Class(tap string) string {
	_, s, _ := ParseTap(tap)
	switch s {
	case "embed", "logits":
		return s
	case "input_norm", "post_norm", "norm":
		return "rms_norm"
	case "q", "k":
		return "proj_rope"
	case "attn":
		return "sdpa"
	case "residual", "out":
		return "residual"
	case "mlp.swiglu":
		return "swiglu"
	}
	return "proj"
}

// orderTaps returns names in graph order: the canonical taps of the largest
// layer index present first, then any other names sorted.
func orderTaps(names []string) []string {
	have := map[string]bool{}
	layers := 0
	for _, n := range names {
		have[n] = true
		if i, _, ok := ParseTap(n); ok && i+1 > layers {
			layers = i + 1
		}
	}
	var out []string
	for _, n := range TapNames(layers) {
		if have[n] {
			out = append(out, n)
			delete(have, n)
		}
	}
	var rest []string
	for n := range have {
		rest = append(rest, n)
	}
	sort.Strings(rest)
	return append(out, rest...)
}
