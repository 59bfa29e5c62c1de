package convert

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/tensor"
)

// Options configure Convert.
type Options struct {
	// Requantize quantizes dequantized K-quant weight matrices again with
	// MLX's affine algorithm (lossy; Note lists them). Bits and GroupSize
	// default to 4 and 64 (mlx_lm convert's defaults); otherwise Bits must be
	// 2, 3, 4, 5, 6 or 8 and GroupSize 32, 64 or 128 (what MLX quantizes), and
	// the file must have K-quant matrices to requantize.
	Requantize      bool
	Bits, GroupSize int
	// DType, when set (tensor.F16, BF16 or F32), is the type every
	// floating-point tensor is saved in (mlx_lm convert's --dtype: norms,
	// unquantized matrices, and the scales and biases of quantized ones),
	// each value rounded to nearest even; a dequantized K-quant matrix is
	// cast before it is requantized, as mlx_lm casts before quantizing.
	// Invalid (the zero value) keeps each tensor's type from the file.
	DType tensor.DType
	// Progress, when set, is called after each tensor is converted.
	Progress func(done, total int, name string)
	// ShardBytes bounds a safetensors shard; 0 means 4 GiB.
	ShardBytes int64
	// Check, when set, runs on the written model directory after the
	// checkpoint check and before the files are installed; an error fails
	// the conversion. The mlxgo command loads the tokenizer with it (this
	// package cannot import tokenizer, whose tests use Convert).
	Check func(dir string) error
}

// Result says what Convert did.
type Result struct {
	Tensors int      // tensors written (quantized layers count their three parts)
	Files   []string // files written, relative to the output directory
	Notes   []string // things a user should know (dequantized or requantized tensors)
	// Warnings are what the checkpoint loader says about the converted model
	// (as generate would at load).
	Warnings []string
}

// weightNames maps GGUF names (without ".weight"/".bias") to Hugging Face
// module paths; N is the layer.
var (
	blockRe     = regexp.MustCompile(`^blk\.(\d+)\.([a-z_]+)\.(weight|bias)$`)
	blockModule = map[string]string{
		"attn_norm":   "input_layernorm",
		"attn_q":      "self_attn.q_proj",
		"attn_k":      "self_attn.k_proj",
		"attn_v":      "self_attn.v_proj",
		"attn_output": "self_attn.o_proj",
		"ffn_norm":    "post_attention_layernorm",
		"ffn_gate":    "mlp.gate_proj",
		"ffn_up":      "mlp.up_proj",
		"ffn_down":    "mlp.down_proj",
	}
	topModule = map[string]string{
		"token_embd.weight":  "model.embed_tokens.weight",
		"output_norm.weight": "model.norm.weight",
		"output.weight":      "lm_head.weight",
	}
)

// hfName returns the Hugging Face tensor name for a GGUF tensor, or an
// error for a tensor a llama model does not have.
func hfName(name string, layers int) (string, error) {
	if n, ok := topModule[name]; ok {
		return n, nil
	}
	m := blockRe.FindStringSubmatch(name)
	if m == nil {
		if name == "rope_freqs.weight" {
			return "", errors.New("rope_freqs.weight (llama3-style RoPE frequency factors) is not supported")
		}
		return "", fmt.Errorf("unexpected tensor %s: not part of a llama model", name)
	}
	mod, ok := blockModule[m[2]]
	if !ok {
		return "", fmt.Errorf("unexpected tensor %s: %q is not a llama block tensor", name, m[2])
	}
	i, err := strconv.Atoi(m[1])
	if err != nil || i >= layers {
		return "", fmt.Errorf("tensor %s: layer %s out of range (block_count %d)", name, m[1], layers)
	}
	return "model.layers." + m[1] + "." + mod + "." + m[3], nil
}

// RequantizeBits and RequantizeGroupSizes are the values Options accepts for
// Bits and GroupSize (MLX's affine quantization).
var (
	RequantizeBits       = []int{2, 3, 4, 5, 6, 8}
	RequantizeGroupSizes = []int{32, 64, 128}
)

// Convert converts the GGUF file at src into an MLX model directory out
// (created if needed). The model is written into a temporary directory
// beside out and checked as generate checks it at load (checkpoint.Open and
// tokenizer.Load); only then are its files moved into out, replacing files
// of the same names and any other model*.safetensors or index there (which
// would mix with the new shards). On any error nothing is left behind.
func Convert(src, out string, opts Options) (res *Result, err error) {
	if opts.Bits == 0 {
		opts.Bits = 4
	}
	if opts.GroupSize == 0 {
		opts.GroupSize = 64
	}
	if opts.Requantize {
		if !slices.Contains(RequantizeBits, opts.Bits) {
			return nil, fmt.Errorf("convert: requantize bits %d: want one of %v", opts.Bits, RequantizeBits)
		}
		if !slices.Contains(RequantizeGroupSizes, opts.GroupSize) {
			return nil, fmt.Errorf("convert: requantize group size %d: want one of %v", opts.GroupSize, RequantizeGroupSizes)
		}
	}
	if opts.DType != tensor.Invalid && !slices.Contains(ConvertDTypes, opts.DType) {
		return nil, fmt.Errorf("convert: dtype %v: want one of %v", opts.DType, ConvertDTypes)
	}
	if st, err := os.Stat(out); err == nil && !st.IsDir() {
		return nil, fmt.Errorf("convert: output %s exists and is not a directory", out)
	}
	if opts.ShardBytes == 0 {
		opts.ShardBytes = 4 << 30
	}
	f, err := gguf.Open(src)
	if err != nil {
		return nil, err
	}
	defer f.Close()

	embd, ok := f.Tensor("token_embd.weight")
	if !ok {
		return nil, fmt.Errorf("gguf %s: missing tensor token_embd.weight (the token embedding)", src)
	}
	if len(embd.Shape) != 2 {
		return nil, fmt.Errorf("gguf %s: tensor token_embd.weight has shape %v, want [vocab, hidden]", src, embd.Shape)
	}
	_, hasOutput := f.Tensor("output.weight")
	lc, err := buildConfig(f, !hasOutput, embd.Shape[0])
	if err != nil {
		return nil, err
	}
	layers := int(lc.json["num_hidden_layers"].(int64))
	maxLen := 0
	if v, ok := lc.json["max_position_embeddings"].(int64); ok {
		maxLen = int(v)
	}
	tok, err := buildTokenizer(f, embd.Shape[0], maxLen)
	if err != nil {
		return nil, err
	}

	type planned struct {
		info gguf.TensorInfo
		hf   string // Hugging Face name ending in .weight or .bias
	}
	var plan []planned
	for _, t := range f.Tensors {
		hf, err := hfName(t.Name, layers)
		if err != nil {
			return nil, fmt.Errorf("gguf %s: %w", src, err)
		}
		if !isSupported(t.Type) {
			return nil, fmt.Errorf("gguf %s: tensor %s: type %s is not supported (supported: %v)", src, t.Name, t.Type, gguf.Supported)
		}
		plan = append(plan, planned{t, hf})
	}
	sort.Slice(plan, func(i, j int) bool { return plan[i].hf < plan[j].hf })
	if opts.Requantize {
		n := 0
		for _, p := range plan {
			if isKQuant(p.info.Type) && len(p.info.Shape) == 2 && p.info.Shape[1]%opts.GroupSize == 0 {
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("convert: requantize: gguf %s has no K-quant weight matrix whose rows divide into groups of %d; its weights convert exactly without requantizing", src, opts.GroupSize)
		}
	}

	final := out
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	out, err = os.MkdirTemp(filepath.Dir(final), "."+filepath.Base(final)+".converting-")
	if err != nil {
		return nil, fmt.Errorf("convert: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(out)
		}
	}()
	res = &Result{}
	var rq *requantizer
	if opts.Requantize {
		if rq, err = newRequantizer(opts.Bits, opts.GroupSize); err != nil {
			return nil, err
		}
		defer rq.close()
	}

	var names []string
	quant := map[string]any{}
	counts := map[[2]int]int{}
	var dequantized, requantized []string
	var shards [][]string
	var shardBytes int64
	var pendingNames []string
	var pendingTensors []*tensor.Dense
	var shardFiles []string
	flush := func() error {
		if len(pendingNames) == 0 {
			return nil
		}
		tmp := filepath.Join(out, fmt.Sprintf(".shard-%05d.safetensors", len(shardFiles)+1))
		if err := tensor.WriteSafetensors(tmp, pendingNames, pendingTensors, map[string]string{"format": "mlx"}); err != nil {
			return err
		}
		shardFiles = append(shardFiles, tmp)
		shards = append(shards, pendingNames)
		pendingNames, pendingTensors, shardBytes = nil, nil, 0
		return nil
	}
	add := func(name string, t *tensor.Dense) error {
		if shardBytes > 0 && shardBytes+int64(len(t.Data)) > opts.ShardBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		pendingNames = append(pendingNames, name)
		pendingTensors = append(pendingTensors, t)
		shardBytes += int64(len(t.Data))
		names = append(names, name)
		return nil
	}
	for i, p := range plan {
		c, err := f.Convert(p.info)
		if err != nil {
			return nil, err
		}
		module, suffix := splitSuffix(p.hf)
		isMatrix := len(p.info.Shape) == 2 && suffix == "weight"
		if opts.DType != tensor.Invalid {
			c.Weight, c.Scales, c.Biases = castFloat(c.Weight, opts.DType), castFloat(c.Scales, opts.DType), castFloat(c.Biases, opts.DType)
		}
		if c.Dequantized {
			if rq != nil && isMatrix && p.info.Shape[1]%opts.GroupSize == 0 {
				if c, err = rq.quantize(c.Weight); err != nil {
					return nil, fmt.Errorf("gguf %s: tensor %s: requantizing: %w", src, p.info.Name, err)
				}
				requantized = append(requantized, p.info.Name+" ("+p.info.Type.String()+")")
			} else {
				dequantized = append(dequantized, p.info.Name+" ("+p.info.Type.String()+")")
			}
		}
		parts := []*tensor.Dense{c.Weight, c.Scales, c.Biases}
		if head := headsFor(module, lc); head > 0 {
			for k, t := range parts {
				if t == nil {
					continue
				}
				if parts[k], err = unpermuteRows(t, head); err != nil {
					return nil, fmt.Errorf("gguf %s: tensor %s: undoing llama.cpp's q/k permutation: %w", src, p.info.Name, err)
				}
			}
		}
		if err := add(p.hf, parts[0]); err != nil {
			return nil, err
		}
		if c.Quantized() {
			if err := add(module+".scales", parts[1]); err != nil {
				return nil, err
			}
			if err := add(module+".biases", parts[2]); err != nil {
				return nil, err
			}
			quant[module] = map[string]any{"group_size": c.GroupSize, "bits": c.Bits, "mode": "affine"}
			counts[[2]int{c.GroupSize, c.Bits}]++
		}
		if opts.Progress != nil {
			opts.Progress(i+1, len(plan), p.info.Name)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	res.Tensors = len(names)

	// Model files: one shard is model.safetensors; several get an index.
	var index map[string]string
	if len(shardFiles) == 1 {
		if err := os.Rename(shardFiles[0], filepath.Join(out, "model.safetensors")); err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
		res.Files = append(res.Files, "model.safetensors")
	} else {
		index = map[string]string{}
		for k, tmp := range shardFiles {
			name := fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, len(shardFiles))
			if err := os.Rename(tmp, filepath.Join(out, name)); err != nil {
				return nil, fmt.Errorf("convert: %w", err)
			}
			for _, n := range shards[k] {
				index[n] = name
			}
			res.Files = append(res.Files, name)
		}
		if err := writeJSONFile(filepath.Join(out, tensor.IndexFileName), map[string]any{"metadata": map[string]any{}, "weight_map": index}); err != nil {
			return nil, err
		}
		res.Files = append(res.Files, tensor.IndexFileName)
	}

	cfg := lc.json
	if len(quant) > 0 {
		// The most common params are global; other layers are listed.
		var best [2]int
		for k, n := range counts {
			if n > counts[best] || (n == counts[best] && (k[0] < best[0] || k[0] == best[0] && k[1] < best[1])) {
				best = k
			}
		}
		block := map[string]any{"group_size": best[0], "bits": best[1], "mode": "affine"}
		for mod, q := range quant {
			qm := q.(map[string]any)
			if qm["group_size"] != best[0] || qm["bits"] != best[1] {
				block[mod] = qm
			}
		}
		cfg["quantization"] = block
		cfg["quantization_config"] = block
	}
	if err := writeJSONFile(filepath.Join(out, "config.json"), cfg); err != nil {
		return nil, err
	}
	for _, w := range []struct {
		name string
		data []byte
	}{{"tokenizer.json", tok.tokenizer}, {"tokenizer_config.json", tok.config}} {
		if err := os.WriteFile(filepath.Join(out, w.name), w.data, 0o644); err != nil {
			return nil, fmt.Errorf("convert: %w", err)
		}
	}
	res.Files = append(res.Files, "config.json", "tokenizer.json", "tokenizer_config.json")
	warnings, err := checkOutput(out, opts.Check)
	if err != nil {
		// The temporary directory's name means nothing to the user: name the output.
		return nil, fmt.Errorf("convert: gguf %s: the converted model does not load, so nothing was written to %s: %s", src, final, strings.ReplaceAll(err.Error(), out, final))
	}
	for _, w := range warnings {
		res.Warnings = append(res.Warnings, strings.ReplaceAll(w, out, final))
	}
	if err := install(out, final, res.Files); err != nil {
		return nil, err
	}
	if len(dequantized) > 0 {
		kept := "exactly to float32"
		if opts.DType != tensor.Invalid && opts.DType != tensor.F32 {
			kept = "to float32, saved as " + opts.DType.MLXName() + ","
		}
		res.Notes = append(res.Notes, fmt.Sprintf("%d K-quant tensors were dequantized %s and kept unquantized (--requantize would quantize them again, lossily): %v", len(dequantized), kept, dequantized))
	}
	if len(requantized) > 0 {
		res.Notes = append(res.Notes, fmt.Sprintf("%d K-quant tensors were dequantized and re-quantized to MLX affine %d-bit, group %d (lossy: not the file's exact values): %v", len(requantized), opts.Bits, opts.GroupSize, requantized))
	}
	return res, nil
}

// ConvertDTypes are the types Options.DType may name (mlx_lm convert's
// MODEL_CONVERSION_DTYPES).
var ConvertDTypes = []tensor.DType{tensor.F16, tensor.BF16, tensor.F32}

// castFloat returns t in type dt when t is a floating-point tensor of
// another type (nil and integer tensors, such as packed quantized weights,
// as they are).
func castFloat(t *tensor.Dense, dt tensor.DType) *tensor.Dense {
	switch {
	case t == nil || t.DType == dt:
		return t
	case t.DType == tensor.F16 || t.DType == tensor.BF16 || t.DType == tensor.F32:
		return t.Convert(dt)
	}
	return t
}

// checkOutput loads the model in dir as generate does (checkpoint.Open, then
// check when set), returning the loader's warnings.
func checkOutput(dir string, check func(string) error) ([]string, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	warnings := ck.Warnings
	ck.Close()
	if check != nil {
		if err := check(dir); err != nil {
			return nil, err
		}
	}
	return warnings, nil
}

// install moves the files of the temporary directory tmp into out: a rename of
// the directory when out does not exist, else file by file after removing the
// model*.safetensors and index files out holds.
func install(tmp, out string, files []string) error {
	if _, err := os.Stat(out); errors.Is(err, fs.ErrNotExist) {
		if err := os.Chmod(tmp, 0o755); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		if err := os.Rename(tmp, out); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
		return nil
	}
	old, err := filepath.Glob(filepath.Join(out, "model*.safetensors"))
	if err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	for _, p := range append(old, filepath.Join(out, tensor.IndexFileName)) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("convert: removing the old %s: %w", p, err)
		}
	}
	for _, f := range files {
		if err := os.Rename(filepath.Join(tmp, f), filepath.Join(out, f)); err != nil {
			return fmt.Errorf("convert: %w", err)
		}
	}
	return os.RemoveAll(tmp)
}

// isKQuant reports whether t is a K-quant type, which Convert dequantizes.
func isKQuant(t gguf.Type) bool {
	switch t {
	case gguf.Q2_K, gguf.Q3_K, gguf.Q4_K, gguf.Q5_K, gguf.Q6_K:
		return true
	}
	return false
}

func isSupported(t gguf.Type) bool {
	for _, s := range gguf.Supported {
		if s == t {
			return true
		}
	}
	return false
}

// splitSuffix splits "a.b.weight" into "a.b" and "weight".
func splitSuffix(name string) (string, string) {
	i := len(name) - 1
	for i >= 0 && name[i] != '.' {
		i--
	}
	return name[:i], name[i+1:]
}

// headsFor returns the head count whose permutation the module's rows
// carry (q_proj: attention heads; k_proj: KV heads), or 0.
func headsFor(module string, lc *llamaConfig) int {
	switch {
	case hasSuffix(module, ".self_attn.q_proj"):
		return lc.nHead
	case hasSuffix(module, ".self_attn.k_proj"):
		return lc.nHeadKV
	}
	return 0
}

func hasSuffix(s, suf string) bool { return len(s) >= len(suf) && s[len(s)-len(suf):] == suf }

func writeJSONFile(path string, v any) error {
	b, err := marshalIndent(v)
	if err != nil {
		return fmt.Errorf("convert: %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("convert: %w", err)
	}
	return nil
}

// marshalIndent is json.MarshalIndent with two spaces, no HTML escaping
// (chat templates are full of < and >) and a final newline.
func marshalIndent(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// requantizer quantizes float matrices with a backend's MLX Quantize.
type requantizer struct {
	b               backend.Backend
	bits, groupSize int
}

func newRequantizer(bits, groupSize int) (*requantizer, error) {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		return nil, fmt.Errorf("convert: --requantize needs the cpu backend: %w", err)
	}
	return &requantizer{b: b, bits: bits, groupSize: groupSize}, nil
}

func (r *requantizer) close() {
	if c, ok := r.b.(interface{ Close() error }); ok {
		c.Close()
	}
}

func (r *requantizer) quantize(w *tensor.Dense) (c *gguf.Converted, err error) {
	defer backend.Recover(&err)
	sc := r.b.Scope()
	defer sc.Close()
	q := r.b.Quantize(r.b.FromHost(w), r.groupSize, r.bits)
	c = &gguf.Converted{Bits: r.bits, GroupSize: r.groupSize}
	if c.Weight, err = r.b.ToHost(q.W); err != nil {
		return nil, err
	}
	if c.Scales, err = r.b.ToHost(q.Scales); err != nil {
		return nil, err
	}
	if c.Biases, err = r.b.ToHost(q.Biases); err != nil {
		return nil, err
	}
	return c, nil
}
