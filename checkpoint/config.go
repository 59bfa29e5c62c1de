package checkpoint

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxgo/mlxgo/internal/safefile"
)

// Config mirrors mlx_lm's llama ModelArgs after __post_init__, with mlx_lm's
// defaults and quirks. Field JSON names are Hugging Face's (snake case).
type Config struct {
	ModelType             string       // "llama" after remapping ("mistral", "iquestcoder", "xverse" → "llama")
	HiddenSize            int          // hidden_size, D
	NumHiddenLayers       int          // num_hidden_layers
	IntermediateSize      int          // intermediate_size, I
	NumAttentionHeads     int          // num_attention_heads, H
	NumKeyValueHeads      int          // num_key_value_heads; defaults to H
	HeadDim               int          // head_dim; defaults to D / H (integer division)
	VocabSize             int          // vocab_size, V
	RMSNormEps            float64      // rms_norm_eps
	MaxPositionEmbeddings int          // max_position_embeddings; 0 when absent (mlx_lm's None)
	AttentionBias         bool         // attention_bias: bias on q/k/v/o_proj
	MLPBias               bool         // mlp_bias: bias on gate/up/down_proj
	RopeTheta             float64      // rope_theta; defaults to 10000
	RopeTraditional       bool         // rope_traditional: interleaved pairs when true
	RopeScaling           *RopeScaling // rope_scaling; nil when absent or null
	// TieWordEmbeddings defaults to true when the key is absent: mlx_lm's quirk,
	// the opposite of Hugging Face's LlamaConfig.
	TieWordEmbeddings bool
	LayerTypes        []string      // one per layer: "full_attention" or "sliding_attention"
	SlidingWindow     int           // sliding_window; 0 when absent
	EOSTokenIDs       []int         // eos_token_id, after generation_config.json's override
	BOSTokenID        *int          // bos_token_id; nil when absent
	Quantization      *Quantization // the MLX quantization block; nil when unquantized
	// Warnings lists things mlx_lm accepts silently but that probably surprise,
	// such as a transformers-v5 rope_parameters block that mlx_lm ignores.
	Warnings []string
}

// RopeScaling is the rope_scaling block, with the defaults of mlx_lm's
// rope_utils.py filled in for the fields its Type uses.
type RopeScaling struct {
	// Type is rope_scaling["type"], or when that is missing or empty
	// rope_scaling["rope_type"], or "default".
	Type string
	// Factor: required by linear, dynamic, llama3 and the yarn types; defaults
	// to 1 for proportional and default; unused by longrope and mrope.
	Factor float64
	// LowFreqFactor and HighFreqFactor (llama3): default 1 and 4.
	LowFreqFactor, HighFreqFactor float64
	// OriginalMaxPositionEmbeddings: llama3 default 8192, yarn default 4096,
	// required by longrope.
	OriginalMaxPositionEmbeddings int
	// BetaFast, BetaSlow, Mscale, MscaleAllDim (yarn): default 32, 1, 1, 0.
	BetaFast, BetaSlow, Mscale, MscaleAllDim float64
	// LongFactor and ShortFactor (longrope): head_dim/2 values each, a scalar
	// broadcast. mlx_lm uses LongFactor only.
	LongFactor, ShortFactor []float64
	// PartialRotaryFactor (proportional): default 1.
	PartialRotaryFactor float64
	// MropeSection (mrope): three integers; mlx_lm then runs a plain RoPE.
	MropeSection []int
}

// maxLayers bounds num_hidden_layers.
const maxLayers = 1 << 16

// maxHeadDim bounds head_dim (real models use 64 to 512): RoPE tables are sized by it.
const maxHeadDim = 1 << 16

// ropeTypes is initialize_rope's accepted set (mlx_lm/models/rope_utils.py).
var ropeTypes = map[string]bool{
	"default": true, "linear": true, "dynamic": true, "llama3": true,
	"yarn": true, "deepseek_yarn": true, "telechat3-yarn": true,
	"longrope": true, "proportional": true, "mrope": true,
}

// modelTypes maps the config's model_type to the architecture mlx_lm loads
// (MODEL_REMAPPING in mlx_lm/utils.py); only those ending at llama are ours.
var modelTypes = map[string]string{
	"llama": "llama", "mistral": "llama", "iquestcoder": "llama", "xverse": "llama",
}

// LoadConfig reads dir/config.json like mlx_lm's load_config: when
// dir/generation_config.json exists, parses, and has a truthy eos_token_id,
// that value replaces config.json's (an unparsable generation_config.json is
// ignored, as mlx_lm does, with a warning).
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	data, err := safefile.ReadFile(path, safefile.MaxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("read model config: %w", err)
	}
	obj, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var warnings []string
	genPath := filepath.Join(dir, "generation_config.json")
	switch gen, err := safefile.ReadFile(genPath, safefile.MaxJSONBytes); {
	case err == nil:
		genObj, err := decodeObject(gen)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("%s: ignored, does not parse (%v); mlx_lm ignores it too", genPath, err))
		} else if eos := genObj["eos_token_id"]; truthy(eos) {
			// Checked here, so that a bad value is reported as generation_config.json's.
			gf := fields{src: genPath, obj: genObj}
			ids, err := gf.intList("eos_token_id")
			if err != nil {
				return nil, err
			}
			if err := checkTokenIDs(gf, "eos_token_id", ids); err != nil {
				return nil, err
			}
			obj["eos_token_id"] = eos
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read generation config: %w", err)
	}
	if _, ok := obj["quantization_config"]; !ok && !hasNestedQuantConfig(obj) {
		if _, err := os.Stat(filepath.Join(dir, "hf_quant_config.json")); err == nil {
			return nil, fmt.Errorf("%s: unsupported quantization: hf_quant_config.json (NVIDIA ModelOpt) is present; mlxgo supports only MLX affine quantization", dir)
		}
	}
	cfg, err := parseConfig(obj, path)
	if err != nil {
		return nil, err
	}
	cfg.Warnings = append(warnings, cfg.Warnings...)
	return cfg, nil
}

// ParseConfig parses the bytes of a config.json; source names the file in
// errors and warnings.
func ParseConfig(data []byte, source string) (*Config, error) {
	obj, err := decodeObject(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return parseConfig(obj, source)
}

func parseConfig(obj map[string]any, src string) (*Config, error) {
	f := fields{src: src, obj: obj}
	c := &Config{}
	var err error

	mt, ok, err := f.optString("model_type")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, f.errf("model_type", "missing")
	}
	switch arch, ok := modelTypes[mt]; {
	case ok:
		c.ModelType = arch
	case mt == "minicpm":
		return nil, f.errf("model_type", `"minicpm" is MiniCPM's muP variant (mlx_lm/models/minicpm.py: scale_emb, scale_depth, dim_model_base change the math), not a llama; mlxgo supports only llama-architecture checkpoints`)
	default:
		return nil, f.errf("model_type", "%q is not supported; mlxgo supports llama-architecture checkpoints (model_type llama, or mistral, iquestcoder, xverse which mlx_lm remaps to llama)", mt)
	}

	// Sizes are MLX shape elements (int32); the layer count is bounded so that
	// a corrupt config cannot make us allocate without limit.
	positive := func(name string, v int) error {
		switch {
		case v <= 0:
			return f.errf(name, "got %d, want a positive integer", v)
		case v > math.MaxInt32:
			return f.errf(name, "got %d, more than MLX's int32 shapes allow", v)
		case name == "num_hidden_layers" && v > maxLayers:
			return f.errf(name, "got %d, more than the %d layers mlxgo accepts", v, maxLayers)
		}
		return nil
	}
	for _, r := range []struct {
		name string
		dst  *int
	}{
		{"hidden_size", &c.HiddenSize},
		{"num_hidden_layers", &c.NumHiddenLayers},
		{"intermediate_size", &c.IntermediateSize},
		{"num_attention_heads", &c.NumAttentionHeads},
		{"vocab_size", &c.VocabSize},
	} {
		if *r.dst, err = f.reqInt(r.name); err != nil {
			return nil, err
		}
		if err := positive(r.name, *r.dst); err != nil {
			return nil, err
		}
	}
	if c.RMSNormEps, err = f.reqFloat("rms_norm_eps"); err != nil {
		return nil, err
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return nil, f.errf("rms_norm_eps", "got %v, want a finite number > 0", c.RMSNormEps)
	}

	var set bool
	if c.NumKeyValueHeads, set, err = f.optInt("num_key_value_heads", c.NumAttentionHeads); err != nil {
		return nil, err
	}
	if set {
		if err := positive("num_key_value_heads", c.NumKeyValueHeads); err != nil {
			return nil, err
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return nil, f.errf("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	// mlx_lm: head_dim or hidden_size // n_heads (a head_dim of 0 also falls back).
	if c.HeadDim, set, err = f.optInt("head_dim", 0); err != nil {
		return nil, err
	}
	if c.HeadDim < 0 {
		return nil, f.errf("head_dim", "got %d, want a positive integer", c.HeadDim)
	}
	if c.HeadDim == 0 {
		c.HeadDim = c.HiddenSize / c.NumAttentionHeads
		if c.HeadDim == 0 {
			return nil, f.errf("head_dim", "absent, and hidden_size // num_attention_heads = %d // %d = 0", c.HiddenSize, c.NumAttentionHeads)
		}
		if c.HiddenSize%c.NumAttentionHeads != 0 {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: head_dim absent and hidden_size %d is not a multiple of num_attention_heads %d; mlx_lm uses hidden_size // num_attention_heads = %d", src, c.HiddenSize, c.NumAttentionHeads, c.HeadDim))
		}
	}
	if c.HeadDim > maxHeadDim {
		return nil, f.errf("head_dim", "%d (given or hidden_size // num_attention_heads), more than the %d mlxgo accepts", c.HeadDim, maxHeadDim)
	}
	if c.MaxPositionEmbeddings, set, err = f.optInt("max_position_embeddings", 0); err != nil {
		return nil, err
	}
	if set {
		if err := positive("max_position_embeddings", c.MaxPositionEmbeddings); err != nil {
			return nil, err
		}
	}

	for _, r := range []struct {
		name string
		dst  *bool
		def  bool
	}{
		{"attention_bias", &c.AttentionBias, false},
		{"mlp_bias", &c.MLPBias, false},
		{"rope_traditional", &c.RopeTraditional, false},
		{"tie_word_embeddings", &c.TieWordEmbeddings, true},
	} {
		if *r.dst, err = f.optBool(r.name, r.def); err != nil {
			return nil, err
		}
	}

	var thetaSet bool
	if c.RopeTheta, thetaSet, err = f.optFloat("rope_theta", 10000); err != nil {
		return nil, err
	}
	if _, present := obj["rope_theta"]; present && !thetaSet {
		return nil, f.errf("rope_theta", "null; mlx_lm would pass None as the RoPE base")
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return nil, f.errf("rope_theta", "got %v, want a finite number > 0", c.RopeTheta)
	}
	if rp, ok := obj["rope_parameters"]; ok && rp != nil {
		c.Warnings = append(c.Warnings, ropeParametersWarning(src, rp, thetaSet, c.RopeTheta))
	}
	if c.RopeScaling, err = parseRopeScaling(f, c); err != nil {
		return nil, err
	}

	if err := parseLayerTypes(f, c); err != nil {
		return nil, err
	}

	if c.EOSTokenIDs, err = f.intList("eos_token_id"); err != nil {
		return nil, err
	}
	if err := checkTokenIDs(f, "eos_token_id", c.EOSTokenIDs); err != nil {
		return nil, err
	}
	for _, id := range c.EOSTokenIDs {
		if id >= c.VocabSize {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: eos_token_id %d is not below vocab_size %d: the model can never produce it", src, id, c.VocabSize))
		}
	}
	if bos, set, err := f.optInt("bos_token_id", 0); err != nil {
		return nil, err
	} else if set {
		if err := checkTokenIDs(f, "bos_token_id", []int{bos}); err != nil {
			return nil, err
		}
		c.BOSTokenID = &bos
	}

	q, warnings, err := parseQuantization(f, c)
	if err != nil {
		return nil, err
	}
	c.Quantization = q
	c.Warnings = append(c.Warnings, warnings...)
	return c, nil
}

// checkTokenIDs rejects negative token ids (mlx_lm would accept eos_token_id -7 and never
// stop on it).
func checkTokenIDs(f fields, name string, ids []int) error {
	for _, id := range ids {
		if id < 0 || id > math.MaxInt32 {
			return f.errf(name, "got %d, want a token id from 0 to 2^31-1", id)
		}
	}
	return nil
}

func ropeParametersWarning(src string, rp any, thetaSet bool, theta float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: rope_parameters (a transformers-v5 block) is ignored by mlx_lm's llama", src)
	if thetaSet {
		fmt.Fprintf(&b, "; it uses the top-level rope_theta %v", theta)
	} else {
		b.WriteString("; with no top-level rope_theta it uses the default rope_theta 10000")
	}
	if m, ok := rp.(map[string]any); ok {
		if v, ok := asFloat(m["rope_theta"]); ok && v != theta {
			fmt.Fprintf(&b, " (rope_parameters.rope_theta %v is not used)", v)
		}
		if t, ok := m["rope_type"].(string); ok && t != "default" {
			fmt.Fprintf(&b, " and runs no %q scaling unless rope_scaling says so", t)
		}
	}
	return b.String()
}

func parseRopeScaling(top fields, c *Config) (*RopeScaling, error) {
	v, ok := top.get("rope_scaling")
	if !ok {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, top.errf("rope_scaling", "want an object, got %s", kind(v))
	}
	f := fields{src: top.src, prefix: "rope_scaling.", obj: obj}
	rs := &RopeScaling{Type: "default"}
	// rope_type = scaling.get("type") or scaling.get("rope_type", "default")
	if t := obj["type"]; truthy(t) {
		s, ok := t.(string)
		if !ok {
			return nil, f.errf("type", "want a string, got %s", kind(t))
		}
		rs.Type = s
	} else if t, ok := obj["rope_type"]; ok {
		s, ok := t.(string)
		if !ok {
			return nil, f.errf("rope_type", "want a string, got %s", kind(t))
		}
		rs.Type = s
	}
	if !ropeTypes[rs.Type] {
		return nil, f.errf("type", "%q is not a RoPE type mlx_lm accepts (default, linear, dynamic, llama3, yarn, deepseek_yarn, telechat3-yarn, longrope, proportional, mrope)", rs.Type)
	}

	var err error
	factor := func(required bool) error {
		var set bool
		if rs.Factor, set, err = f.optFloat("factor", 1); err != nil {
			return err
		}
		if required && !set {
			return f.errf("factor", "missing (required by rope type %q)", rs.Type)
		}
		if !(rs.Factor > 0) || math.IsInf(rs.Factor, 0) {
			return f.errf("factor", "got %v, want a finite number > 0", rs.Factor)
		}
		return nil
	}
	origMax := func(def int, required bool) error {
		var set bool
		if rs.OriginalMaxPositionEmbeddings, set, err = f.optInt("original_max_position_embeddings", def); err != nil {
			return err
		}
		if required && !set {
			return f.errf("original_max_position_embeddings", "missing (required by rope type %q)", rs.Type)
		}
		if rs.OriginalMaxPositionEmbeddings <= 0 {
			return f.errf("original_max_position_embeddings", "got %d, want a positive integer", rs.OriginalMaxPositionEmbeddings)
		}
		return nil
	}
	needMaxPos := func() error {
		if c.MaxPositionEmbeddings == 0 {
			return top.errf("max_position_embeddings", "missing (required by rope_scaling type %q)", rs.Type)
		}
		return nil
	}
	type fl = struct {
		name string
		dst  *float64
		def  float64
	}
	floats := func(dsts ...fl) error {
		for _, d := range dsts {
			if *d.dst, _, err = f.optFloat(d.name, d.def); err != nil {
				return err
			}
		}
		return nil
	}

	switch rs.Type {
	case "default":
		rs.Factor = 1
	case "linear":
		err = factor(true)
	case "dynamic":
		if err = factor(true); err == nil {
			err = needMaxPos()
		}
	case "llama3":
		if err = factor(true); err == nil {
			err = floats(fl{"low_freq_factor", &rs.LowFreqFactor, 1}, fl{"high_freq_factor", &rs.HighFreqFactor, 4})
		}
		if err == nil {
			err = origMax(8192, false)
		}
	case "yarn", "deepseek_yarn", "telechat3-yarn":
		if err = factor(true); err == nil {
			err = origMax(4096, false)
		}
		if err == nil {
			err = floats(fl{"beta_fast", &rs.BetaFast, 32}, fl{"beta_slow", &rs.BetaSlow, 1},
				fl{"mscale", &rs.Mscale, 1}, fl{"mscale_all_dim", &rs.MscaleAllDim, 0})
		}
	case "longrope":
		if err = origMax(0, true); err == nil {
			err = needMaxPos()
		}
		if err == nil {
			rs.LongFactor, err = f.floatList("long_factor", c.HeadDim/2)
		}
		if err == nil {
			rs.ShortFactor, err = f.floatList("short_factor", c.HeadDim/2)
		}
	case "proportional":
		if err = factor(false); err == nil {
			err = floats(fl{"partial_rotary_factor", &rs.PartialRotaryFactor, 1})
		}
		if err == nil && (rs.PartialRotaryFactor < 0 || int(float64(c.HeadDim)*rs.PartialRotaryFactor) > c.HeadDim) {
			err = f.errf("partial_rotary_factor", "got %v, want a value in [0, 1] (rotated dims may not exceed head_dim %d)", rs.PartialRotaryFactor, c.HeadDim)
		}
	case "mrope":
		rs.Factor = 1
		var sec []int
		if sec, err = f.intList("mrope_section"); err == nil && len(sec) != 3 {
			err = f.errf("mrope_section", "got %d sections, want 3 (mlx_lm asserts it)", len(sec))
		}
		rs.MropeSection = sec
	}
	if err != nil {
		return nil, err
	}
	return rs, nil
}

func parseLayerTypes(f fields, c *Config) error {
	win, set, err := f.optInt("sliding_window", 0)
	if err != nil {
		return err
	}
	if set && win <= 0 {
		return f.errf("sliding_window", "got %d, want a positive integer", win)
	}
	c.SlidingWindow = win

	v, ok := f.get("layer_types")
	if !ok {
		c.LayerTypes = make([]string, c.NumHiddenLayers)
		for i := range c.LayerTypes {
			c.LayerTypes[i] = "full_attention"
		}
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		return f.errf("layer_types", "want a list of strings, got %s", kind(v))
	}
	// mlx_lm builds one block per layer_types entry, so a length other than
	// num_hidden_layers could never match the checkpoint's layers.
	if len(list) != c.NumHiddenLayers {
		return f.errf("layer_types", "got %d entries, want num_hidden_layers = %d", len(list), c.NumHiddenLayers)
	}
	c.LayerTypes = make([]string, len(list))
	full, sliding := false, false
	for i, e := range list {
		s, _ := e.(string)
		switch s {
		case "full_attention":
			full = true
		case "sliding_attention":
			sliding = true
		default:
			return f.errf("layer_types", "entry %d is %s, want \"full_attention\" or \"sliding_attention\"", i, kind(e))
		}
		c.LayerTypes[i] = s
	}
	if !full {
		return f.errf("layer_types", "no \"full_attention\" layer (mlx_lm's LlamaModel needs at least one)")
	}
	if sliding && c.SlidingWindow == 0 {
		return f.errf("sliding_window", "missing, but layer_types has sliding_attention layers")
	}
	return nil
}
