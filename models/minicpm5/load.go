package minicpm5

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// Load opens the checkpoint in dir (checkpoint.Open) and builds the model on
// b. The model owns the checkpoint: Close closes it. Call it with no backend
// scope open (the weights' arrays would belong to that scope).
func Load(b backend.Backend, dir string) (*Model, error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return nil, err
	}
	m, err := New(b, ck)
	if err != nil {
		ck.Close()
		return nil, err
	}
	m.ck = ck
	return m, nil
}

// New builds the model from an opened checkpoint. The weights are handed to
// b with Borrow (memory-mapped, kept quantized), so ck must stay open until
// the model is closed; Close does not close ck. A config the graph cannot run
// is an error naming the field.
func New(b backend.Backend, ck *checkpoint.Checkpoint) (_ *Model, err error) {
	if err := check(ck); err != nil {
		return nil, err
	}
	cfg := ck.Config
	m := &Model{b: b, cfg: cfg, dtype: ck.DType, warnings: ck.Warnings}
	defer func() {
		if err != nil {
			m.Close()
		}
	}()
	defer backend.Recover(&err)

	if m.rope, err = nn.NewRoPE(b, cfg.HeadDim, cfg.RopeTheta, cfg.RopeTraditional, cfg.RopeScaling, cfg.MaxPositionEmbeddings); err != nil {
		return nil, fmt.Errorf("checkpoint %s: config.json: %w", ck.Dir, err)
	}
	eps := float32(cfg.RMSNormEps)
	m.EmbedTokens = m.embedding(ck.Embed)
	for _, l := range ck.Layers {
		m.Layers = append(m.Layers, &Block{
			B: b,
			SelfAttn: &nn.Attention{
				B:        b,
				NHeads:   cfg.NumAttentionHeads,
				NKVHeads: cfg.NumKeyValueHeads,
				Scale:    nn.AttentionScale(cfg.HeadDim),
				QProj:    m.linear(l.Q),
				KProj:    m.linear(l.K),
				VProj:    m.linear(l.V),
				OProj:    m.linear(l.O),
				RoPE:     m.rope,
			},
			MLP:                    &nn.MLP{B: b, GateProj: m.linear(l.Gate), UpProj: m.linear(l.Up), DownProj: m.linear(l.Down)},
			InputLayernorm:         &nn.RMSNorm{B: b, Weight: m.borrow(l.InputNorm), Eps: eps},
			PostAttentionLayernorm: &nn.RMSNorm{B: b, Weight: m.borrow(l.PostAttentionNorm), Eps: eps},
		})
	}
	m.Norm = &nn.RMSNorm{B: b, Weight: m.borrow(ck.Norm), Eps: eps}
	if ck.Head != nil {
		m.LMHead = m.linear(ck.Head)
	}
	return m, nil
}

// check rejects what the graph cannot run, naming the config field.
func check(ck *checkpoint.Checkpoint) error {
	cfg := ck.Config
	src := ck.Dir + "/config.json"
	if cfg.ModelType != "llama" {
		return fmt.Errorf("%s: model_type %q: the graph runs llama-architecture models only", src, cfg.ModelType)
	}
	for i, t := range cfg.LayerTypes {
		if t != "full_attention" {
			return fmt.Errorf("%s: layer_types[%d] is %q: the graph runs full_attention layers only (sliding-window layers need a rotating cache)", src, i, t)
		}
	}
	if len(ck.Layers) != cfg.NumHiddenLayers {
		return fmt.Errorf("%s: num_hidden_layers is %d but the checkpoint has %d layers", src, cfg.NumHiddenLayers, len(ck.Layers))
	}
	if cfg.HeadDim%2 != 0 {
		return fmt.Errorf("%s: head_dim %d: RoPE needs an even head_dim", src, cfg.HeadDim)
	}
	affine := func(path string, quantized bool, p checkpoint.QuantParams) error {
		if quantized && p.Mode != "affine" {
			return fmt.Errorf("%s: quantization mode of %s is %q: the graph runs affine quantization only", src, path, p.Mode)
		}
		return nil
	}
	if err := affine(ck.Embed.Path, ck.Embed.Quantized, ck.Embed.Params); err != nil {
		return err
	}
	linears := []*checkpoint.Linear{}
	for _, l := range ck.Layers {
		linears = append(linears, l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down)
	}
	if ck.Head != nil {
		linears = append(linears, ck.Head)
	}
	for _, l := range linears {
		if err := affine(l.Path, l.Quantized, l.Params); err != nil {
			return err
		}
	}
	return nil
}

func (m *Model) borrow(t *tensor.Dense) backend.Array {
	if t == nil {
		return nil
	}
	a := m.b.Borrow(t)
	m.arrays = append(m.arrays, a)
	return a
}

func (m *Model) quantized(w, scales, biases *tensor.Dense, p checkpoint.QuantParams) backend.QuantizedArray {
	return backend.QuantizedArray{W: m.borrow(w), Scales: m.borrow(scales), Biases: m.borrow(biases), GroupSize: p.GroupSize, Bits: p.Bits}
}

func (m *Model) linear(l *checkpoint.Linear) nn.Linear {
	if l.Quantized {
		return &nn.QuantizedLinear{B: m.b, Weight: m.quantized(l.Weight, l.Scales, l.Biases, l.Params), Bias: m.borrow(l.Bias)}
	}
	return &nn.Dense{B: m.b, Weight: m.borrow(l.Weight), Bias: m.borrow(l.Bias)}
}

func (m *Model) embedding(e *checkpoint.Embedding) nn.Embedder {
	if e.Quantized {
		return &nn.QuantizedEmbedding{B: m.b, Weight: m.quantized(e.Weight, e.Scales, e.Biases, e.Params)}
	}
	return &nn.Embedding{B: m.b, Weight: m.borrow(e.Weight)}
}
