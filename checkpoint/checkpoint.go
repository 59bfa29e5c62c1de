package checkpoint

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/tensor"
)

// Linear is one linear layer's tensors, y = x·Wᵀ (+ bias). A quantized layer
// holds Weight (U32 [Out, In·Bits/32]), Scales and Biases ([Out, In/GroupSize],
// one float dtype); an unquantized one holds a float Weight [Out, In]. Bias
// ([Out]) is nil unless attention_bias / mlp_bias is set.
type Linear struct {
	Path      string // module path, e.g. "model.layers.0.self_attn.q_proj"
	In, Out   int    // logical input and output features
	Quantized bool
	Params    QuantParams // the params the weights were stored with (zero when unquantized)
	Weight    *tensor.Dense
	Scales    *tensor.Dense
	Biases    *tensor.Dense
	Bias      *tensor.Dense
}

// Embedding is the token embedding table [Vocab, Dim], quantized like a
// Linear's weight (row per token) or a float table. With tied embeddings it
// is also the output head (mlx_lm's as_linear).
type Embedding struct {
	Path       string // "model.embed_tokens"
	Vocab, Dim int
	Quantized  bool
	Params     QuantParams
	Weight     *tensor.Dense
	Scales     *tensor.Dense
	Biases     *tensor.Dense
}

// Layer is one transformer block's tensors.
type Layer struct {
	InputNorm, PostAttentionNorm *tensor.Dense // RMSNorm weights [hidden]
	Q, K, V, O                   *Linear       // self_attn.{q,k,v,o}_proj
	Gate, Up, Down               *Linear       // mlp.{gate,up,down}_proj
}

// Checkpoint is an opened MLX llama checkpoint: its config and every tensor,
// checked against the config, as zero-copy views of the memory-mapped files.
// The views are valid until Close.
type Checkpoint struct {
	Dir    string
	Config *Config
	Embed  *Embedding
	Layers []Layer
	Norm   *tensor.Dense // model.norm.weight [hidden]
	Head   *Linear       // lm_head; nil when the embeddings are tied
	// DType is the activation dtype T: the dtype of the embedding's scales, or
	// of its weight when unquantized. It is the dtype of the hidden state that
	// enters the first block in mlx_lm.
	DType tensor.DType
	// Warnings holds the config's warnings and those found in the weights
	// (float tensors of a dtype other than DType, a dropped lm_head.weight).
	Warnings []string

	set *tensor.SafetensorsSet
}

// Close releases the memory-mapped files; every tensor view dies with them.
func (c *Checkpoint) Close() error {
	if c == nil || c.set == nil {
		return nil
	}
	err := c.set.Close()
	c.set = nil
	return err
}

// Open reads dir/config.json (see LoadConfig) and every dir/model*.safetensors,
// and checks the tensors the way mlx_lm's load_model would build and strictly
// load a llama Model: sanitize drops self_attn.rotary_emb.inv_freq tensors and,
// when tied, lm_head.weight; each quantized layer (per Quantization.Resolve,
// with params inferred from shapes for unlisted layers) must have weight,
// scales and biases of the right dtypes and shapes; a missing or unexpected
// tensor is an error.
//
// Dtypes: every float tensor must be F16, BF16 or F32. A layer's scales and
// biases must share one dtype (MLX always writes them together). Float
// tensors whose dtype differs from DType are not an error, since MLX promotes
// mixed operands (bf16 with f16 gives f32; anything with f32 gives f32) and
// mlx_lm runs such a model; each such dtype is reported once in Warnings.
func Open(dir string) (*Checkpoint, error) {
	cfg, err := LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	set, err := tensor.OpenSafetensorsDir(dir)
	if err != nil {
		return nil, err
	}
	ck, err := build(dir, cfg, set)
	if err != nil {
		set.Close()
		return nil, err
	}
	return ck, nil
}

// loader tracks which tensors the model takes, for mlx_lm's strict check.
type loader struct {
	dir      string
	cfg      *Config
	set      *tensor.SafetensorsSet
	present  map[string]bool   // names after sanitize
	used     map[string]bool   // names taken by the model
	unquant  map[string]string // unquantized layer path → why, for extra-tensor hints
	floats   map[tensor.DType][]string
	warnings []string
}

func build(dir string, cfg *Config, set *tensor.SafetensorsSet) (*Checkpoint, error) {
	l := &loader{dir: dir, cfg: cfg, set: set, present: map[string]bool{}, used: map[string]bool{},
		unquant: map[string]string{}, floats: map[tensor.DType][]string{}}
	for _, n := range set.Names() {
		if strings.Contains(n, "self_attn.rotary_emb.inv_freq") {
			continue
		}
		if cfg.TieWordEmbeddings && n == "lm_head.weight" {
			l.warnings = append(l.warnings, fmt.Sprintf("checkpoint %s: lm_head.weight is dropped because the embeddings are tied (tie_word_embeddings is true, mlx_lm's default when the key is absent); the output head is model.embed_tokens", dir))
			continue
		}
		l.present[n] = true
	}

	c := cfg
	ck := &Checkpoint{Dir: dir, Config: cfg, set: set}
	var err error
	if ck.Embed, err = l.embedding("model.embed_tokens", c.VocabSize, c.HiddenSize); err != nil {
		return nil, err
	}
	ck.DType = ck.Embed.Weight.DType
	if ck.Embed.Quantized {
		ck.DType = ck.Embed.Scales.DType
	}
	qOut, kvOut := c.NumAttentionHeads*c.HeadDim, c.NumKeyValueHeads*c.HeadDim
	ck.Layers = make([]Layer, c.NumHiddenLayers)
	for i := range ck.Layers {
		p := "model.layers." + strconv.Itoa(i) + "."
		L := &ck.Layers[i]
		for _, s := range []struct {
			dst     **Linear
			name    string
			in, out int
			bias    bool
		}{
			{&L.Q, "self_attn.q_proj", c.HiddenSize, qOut, c.AttentionBias},
			{&L.K, "self_attn.k_proj", c.HiddenSize, kvOut, c.AttentionBias},
			{&L.V, "self_attn.v_proj", c.HiddenSize, kvOut, c.AttentionBias},
			{&L.O, "self_attn.o_proj", qOut, c.HiddenSize, c.AttentionBias},
			{&L.Gate, "mlp.gate_proj", c.HiddenSize, c.IntermediateSize, c.MLPBias},
			{&L.Up, "mlp.up_proj", c.HiddenSize, c.IntermediateSize, c.MLPBias},
			{&L.Down, "mlp.down_proj", c.IntermediateSize, c.HiddenSize, c.MLPBias},
		} {
			if *s.dst, err = l.linear(p+s.name, s.in, s.out, s.bias); err != nil {
				return nil, err
			}
		}
		if L.InputNorm, err = l.float(p+"input_layernorm.weight", tensor.Shape{c.HiddenSize}, "RMSNorm weight [hidden_size]"); err != nil {
			return nil, err
		}
		if L.PostAttentionNorm, err = l.float(p+"post_attention_layernorm.weight", tensor.Shape{c.HiddenSize}, "RMSNorm weight [hidden_size]"); err != nil {
			return nil, err
		}
	}
	if ck.Norm, err = l.float("model.norm.weight", tensor.Shape{c.HiddenSize}, "RMSNorm weight [hidden_size]"); err != nil {
		return nil, err
	}
	if !c.TieWordEmbeddings {
		if ck.Head, err = l.linear("lm_head", c.HiddenSize, c.VocabSize, false); err != nil {
			return nil, err
		}
	}
	if err := l.checkExtras(); err != nil {
		return nil, err
	}
	ck.Warnings = append(append(append([]string{}, cfg.Warnings...), l.warnings...), l.dtypeWarnings(ck.DType)...)
	return ck, nil
}

func (l *loader) errf(name, format string, args ...any) error {
	return fmt.Errorf("checkpoint %s: tensor %s: "+format, append([]any{l.dir, name}, args...)...)
}

// info looks a tensor up in the sanitized set without taking it.
func (l *loader) info(name string) (tensor.TensorInfo, bool) {
	if !l.present[name] {
		return tensor.TensorInfo{}, false
	}
	ti, _, ok := l.set.Info(name)
	return ti, ok
}

// take checks a tensor's dtype and shape, marks it used and returns its view.
// why says what the model expects it for, for the error message.
func (l *loader) take(name string, okDType func(tensor.DType) bool, wantDType string, shape tensor.Shape, why string) (*tensor.Dense, error) {
	ti, ok := l.info(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint %s: missing tensor %s (%s), which mlx_lm's strict load requires", l.dir, name, why)
	}
	if !okDType(ti.DType) {
		return nil, l.errf(name, "dtype %s, want %s (%s)", ti.DType, wantDType, why)
	}
	if !ti.Shape.Equal(shape) {
		return nil, l.errf(name, "shape %s, want %s (%s)", ti.Shape, shape, why)
	}
	t, err := l.set.Tensor(name)
	if err != nil {
		return nil, err
	}
	l.used[name] = true
	if ti.DType.IsFloat() {
		l.floats[ti.DType] = append(l.floats[ti.DType], name)
	}
	return t, nil
}

// isActivationFloat accepts the float dtypes MLX models compute in.
func isActivationFloat(d tensor.DType) bool {
	return d == tensor.F16 || d == tensor.BF16 || d == tensor.F32
}

func (l *loader) float(name string, shape tensor.Shape, why string) (*tensor.Dense, error) {
	return l.take(name, isActivationFloat, "F16, BF16 or F32", shape, why)
}

// quantized is the shared part of a quantized Linear or Embedding.
type quantized struct {
	params                 QuantParams
	weight, scales, biases *tensor.Dense
}

// resolve decides whether path is quantized and with which params; in is the
// logical input width (the embedding dim for an Embedding).
func (l *loader) resolve(path string, in int) (QuantParams, bool, string, error) {
	q := l.cfg.Quantization
	sInfo, hasScales := l.info(path + ".scales")
	p, isQ := q.Resolve(path, hasScales)
	switch {
	case q == nil:
		l.unquant[path] = "config.json has no quantization block"
		return p, false, "", nil
	case q.Listed(path) && !isQ:
		l.unquant[path] = fmt.Sprintf("quantization[%q] is false (or another Python-falsy value)", path)
		return p, false, "", nil
	case q.Listed(path):
		return p, true, fmt.Sprintf("quantized %s per quantization[%q]", p, path), nil
	case !isQ:
		l.unquant[path] = "not listed in the quantization block and no .scales tensor"
		return p, false, "", nil
	}
	wInfo, ok := l.info(path + ".weight")
	if !ok {
		return p, false, "", fmt.Errorf("checkpoint %s: missing tensor %s.weight (layer %s has %s.scales, so it is quantized)", l.dir, path, path, path)
	}
	if len(wInfo.Shape) != 2 || len(sInfo.Shape) != 2 {
		return p, false, "", fmt.Errorf("checkpoint %s: layer %s: weight shape %s and scales shape %s, want 2-D both", l.dir, path, wInfo.Shape, sInfo.Shape)
	}
	p, err := InferParams(path, in, wInfo.Shape[1], sInfo.Shape[1], sInfo.DType != tensor.U8)
	if err != nil {
		return p, false, "", fmt.Errorf("checkpoint %s: %w", l.dir, err)
	}
	return p, true, fmt.Sprintf("quantized %s, inferred from shapes as mlx_lm does for a layer not listed in the quantization block", p), nil
}

func (l *loader) quantized(path string, rows, in int, p QuantParams, why string) (quantized, error) {
	if in%p.GroupSize != 0 {
		return quantized{}, fmt.Errorf("checkpoint %s: layer %s: %d input features are not a multiple of group_size %d (%s)", l.dir, path, in, p.GroupSize, why)
	}
	q := quantized{params: p}
	var err error
	wShape := tensor.Shape{rows, in * p.Bits / 32}
	if q.weight, err = l.take(path+".weight", func(d tensor.DType) bool { return d == tensor.U32 }, "U32", wShape,
		fmt.Sprintf("%s: packed [%d, %d·%d/32]", why, rows, in, p.Bits)); err != nil {
		return q, err
	}
	gShape := tensor.Shape{rows, in / p.GroupSize}
	gWhy := fmt.Sprintf("%s: [%d, %d/%d]", why, rows, in, p.GroupSize)
	if q.scales, err = l.float(path+".scales", gShape, gWhy); err != nil {
		return q, err
	}
	sd := q.scales.DType
	if q.biases, err = l.take(path+".biases", func(d tensor.DType) bool { return d == sd }, sd.String()+" like "+path+".scales", gShape, gWhy); err != nil {
		return q, err
	}
	return q, nil
}

func (l *loader) linear(path string, in, out int, bias bool) (*Linear, error) {
	p, isQ, why, err := l.resolve(path, in)
	if err != nil {
		return nil, err
	}
	lin := &Linear{Path: path, In: in, Out: out, Quantized: isQ}
	if isQ {
		q, err := l.quantized(path, out, in, p, why)
		if err != nil {
			return nil, err
		}
		lin.Params, lin.Weight, lin.Scales, lin.Biases = q.params, q.weight, q.scales, q.biases
	} else if lin.Weight, err = l.float(path+".weight", tensor.Shape{out, in}, "unquantized linear [out, in]: "+l.unquant[path]); err != nil {
		return nil, err
	}
	if bias {
		if lin.Bias, err = l.float(path+".bias", tensor.Shape{out}, "linear bias [out]"); err != nil {
			return nil, err
		}
	}
	return lin, nil
}

func (l *loader) embedding(path string, vocab, dim int) (*Embedding, error) {
	p, isQ, why, err := l.resolve(path, dim)
	if err != nil {
		return nil, err
	}
	e := &Embedding{Path: path, Vocab: vocab, Dim: dim, Quantized: isQ}
	if isQ {
		q, err := l.quantized(path, vocab, dim, p, why)
		if err != nil {
			return nil, err
		}
		e.Params, e.Weight, e.Scales, e.Biases = q.params, q.weight, q.scales, q.biases
		return e, nil
	}
	if e.Weight, err = l.float(path+".weight", tensor.Shape{vocab, dim}, "unquantized embedding [vocab_size, hidden_size]: "+l.unquant[path]); err != nil {
		return nil, err
	}
	return e, nil
}

// checkExtras fails like load_weights(strict=True) on tensors no module takes.
func (l *loader) checkExtras() error {
	var extra []string
	for n := range l.present {
		if !l.used[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	msgs := make([]string, 0, 4)
	for _, n := range extra {
		if len(msgs) == 3 {
			msgs = append(msgs, fmt.Sprintf("and %d more", len(extra)-3))
			break
		}
		m := n
		if i := strings.LastIndexByte(n, '.'); i > 0 {
			if why, ok := l.unquant[n[:i]]; ok && (strings.HasSuffix(n, ".scales") || strings.HasSuffix(n, ".biases")) {
				m += " (layer " + n[:i] + " is unquantized: " + why + ")"
			}
		}
		msgs = append(msgs, m)
	}
	return fmt.Errorf("checkpoint %s: unexpected tensor %s; mlx_lm's strict load rejects tensors the llama model does not have", l.dir, strings.Join(msgs, ", "))
}

func (l *loader) dtypeWarnings(act tensor.DType) []string {
	var out []string
	for _, d := range []tensor.DType{tensor.F16, tensor.BF16, tensor.F32} {
		names := l.floats[d]
		if d == act || len(names) == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("checkpoint %s: %d float tensors are %s while the activation dtype (model.embed_tokens) is %s, e.g. %s; MLX promotes mixed operands (bf16 with f16 to f32, anything with f32 to f32), so mlx_lm computes those ops in the promoted dtype",
			l.dir, len(names), d, act, names[0]))
	}
	return out
}
