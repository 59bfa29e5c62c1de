package lora

import (
	"fmt"
	"math"
	"strconv"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// Params are mlx_lm's lora_parameters (adapter_config.json).
type Params struct {
	Rank    int     `json:"rank"`
	Scale   float64 `json:"scale"`
	Dropout float64 `json:"dropout"`
	// Keys, when set, are the projections to adapt (a subset of Keys,
	// mlx_lm's config["keys"]); empty means all of them.
	Keys []string `json:"keys,omitempty"`
}

// keys returns the projections p adapts, in mlx_lm's order.
func (p Params) keys() ([]string, error) {
	if len(p.Keys) == 0 {
		return Keys, nil
	}
	var out []string
	for _, k := range Keys {
		for _, want := range p.Keys {
			if want == k {
				out = append(out, k)
				break
			}
		}
	}
	for _, want := range p.Keys {
		found := false
		for _, k := range Keys {
			found = found || k == want
		}
		if !found {
			return nil, fmt.Errorf("lora: key %q is not a projection of a block (want some of %v)", want, Keys)
		}
	}
	return out, nil
}

// Adapter is one adapted projection: its mlx_lm module path within the
// model ("model.layers.3.self_attn.q_proj") and its layer.
type Adapter struct {
	Path  string
	Layer nn.Linear // *nn.LoRALinear, or *nn.DoRALinear
}

// Param is one trainable array of an adapter: its leaf name in mlx_lm
// ("lora_a", "lora_b", "m") and the layer's field holding it.
type Param struct {
	Leaf  string
	Array *backend.Array
}

// Params returns the adapter's trainable arrays in mlx_lm's order:
// lora_a, lora_b, and m for DoRA.
func (a Adapter) Params() []Param {
	switch l := a.Layer.(type) {
	case *nn.LoRALinear:
		return []Param{{"lora_a", &l.LoraA}, {"lora_b", &l.LoraB}}
	case *nn.DoRALinear:
		return []Param{{"lora_a", &l.LoraA}, {"lora_b", &l.LoraB}, {"m", &l.M}}
	}
	return nil
}

// SetDropout sets the layer's training dropout (nil: eval mode).
func (a Adapter) SetDropout(f func(x backend.Array) backend.Array) {
	switch l := a.Layer.(type) {
	case *nn.LoRALinear:
		l.Dropout = f
	case *nn.DoRALinear:
		l.Dropout = f
	}
}

// Keys are the projections of a Llama block that mlx_lm's
// linear_to_lora_layers adapts when the config names no keys (every
// Linear and QuantizedLinear of the block), in the order it converts them:
// the order of mlx.nn.Module.named_modules, which visits a module's
// children in reverse order of assignment.
var Keys = []string{
	"mlp.up_proj", "mlp.down_proj", "mlp.gate_proj",
	"self_attn.o_proj", "self_attn.v_proj", "self_attn.k_proj", "self_attn.q_proj",
}

// Apply wraps the Keys of the last numLayers blocks of m in nn.LoRALinear
// (all blocks when numLayers is 0 or negative, mlx_lm's quirk), in mlx_lm's
// order, and returns the adapters. Each conversion draws from rng as
// mlx_lm's LoRALinear.__init__ does: one key for the throw-away
// nn.Linear it builds, one for lora_a, U(-1/√in, 1/√in) [in, rank] in
// float32; lora_b is zeros [rank, out]. With rng = generate.NewRNG(seed)
// the adapters equal those mlx_lm makes after mx.random.seed(seed). The
// layers are in eval mode: a trainer sets each one's Dropout (Dropout with
// p.Dropout) for training.
func Apply(b backend.Backend, m *minicpm5.Model, numLayers int, p Params, rng *generate.RNG) ([]Adapter, error) {
	return apply(b, m, numLayers, p, false, func(in, n int) []float32 {
		rng.Next() // nn.Linear(in, out).weight, replaced by the base
		return uniform(rng.Next(), in, n)
	})
}

// ApplyDoRA is Apply with mlx_lm's DoRALinear (fine_tune_type "dora"):
// the same layers and draws, and m the row norms of each base weight.
func ApplyDoRA(b backend.Backend, m *minicpm5.Model, numLayers int, p Params, rng *generate.RNG) ([]Adapter, error) {
	return apply(b, m, numLayers, p, true, func(in, n int) []float32 {
		rng.Next() // DoRALinear.__init__'s nn.Linear(in, out)
		return uniform(rng.Next(), in, n)
	})
}

// apply is Apply (or, with dora, ApplyDoRA) with lora_a's values for a
// layer of in inputs (n elements) from initA.
func apply(b backend.Backend, m *minicpm5.Model, numLayers int, p Params, dora bool, initA func(in, n int) []float32) ([]Adapter, error) {
	keys, err := p.keys()
	if err != nil {
		return nil, err
	}
	if p.Rank <= 0 {
		return nil, fmt.Errorf("lora: rank %d, want a positive rank", p.Rank)
	}
	if numLayers > len(m.Layers) {
		return nil, fmt.Errorf("lora: %d layers requested but the model has %d", numLayers, len(m.Layers))
	}
	first := 0
	if numLayers > 0 {
		first = len(m.Layers) - numLayers
	}
	// Every layer is checked before any is wrapped, so that an error
	// leaves m as it was.
	for i := first; i < len(m.Layers); i++ {
		for _, key := range keys {
			slot := Projection(m.Layers[i], key)
			switch (*slot).(type) {
			case *nn.LoRALinear, *nn.DoRALinear:
				return nil, fmt.Errorf("lora: model.layers.%d.%s already has an adapter", i, key)
			}
			in, outDims, err := dims(*slot)
			if err != nil {
				return nil, fmt.Errorf("lora: model.layers.%d.%s: %w", i, key, err)
			}
			if p.Rank > min(in, outDims) {
				// mlx_lm accepts any rank; one above min(in, out) adds
				// nothing (the product's rank is at most that), and a huge
				// one would size the allocations below.
				return nil, fmt.Errorf("lora: rank %d exceeds model.layers.%d.%s's dimensions %d×%d (want a rank of at most %d)", p.Rank, i, key, in, outDims, min(in, outDims))
			}
		}
	}
	var out []Adapter
	for i := first; i < len(m.Layers); i++ {
		for _, key := range keys {
			slot := Projection(m.Layers[i], key)
			in, outDims, _ := dims(*slot) // checked above
			la := b.FromHost(tensor.FromFloat32(tensor.Shape{in, p.Rank}, initA(in, in*p.Rank)))
			lb := b.Zeros(tensor.Shape{p.Rank, outDims}, tensor.F32)
			var l nn.Linear = &nn.LoRALinear{B: b, Base: *slot, Scale: float32(p.Scale), LoraA: la, LoraB: lb}
			if dora {
				mag, err := nn.DoRANorm(b, *slot)
				if err != nil {
					return nil, fmt.Errorf("lora: model.layers.%d.%s: %w", i, key, err)
				}
				l = &nn.DoRALinear{B: b, Base: *slot, Scale: float32(p.Scale), LoraA: la, LoraB: lb, M: mag}
			}
			*slot = l
			out = append(out, Adapter{Path: "model.layers." + strconv.Itoa(i) + "." + key, Layer: l})
		}
	}
	return out, nil
}

// uniform is mx.random.uniform(-s, s, [n]) with s = 1/√in: the bounds
// rounded to float32, then lo + (hi-lo)·u per element with u from
// generate.Uniform, each step rounded to float32 (mlx random::uniform).
func uniform(key [2]uint32, in, n int) []float32 {
	s := 1 / math.Sqrt(float64(in))
	lo, hi := float32(-s), float32(s)
	r := hi - lo
	u := generate.Uniform(key, n)
	for i, v := range u {
		u[i] = float32(r*v) + lo
	}
	return u
}

// dims returns the input and output dimensions of a base layer.
func dims(l nn.Linear) (in, out int, err error) {
	switch base := l.(type) {
	case *nn.Dense:
		s := base.Weight.Shape()
		return s[1], s[0], nil
	case *nn.QuantizedLinear:
		out, in = base.Weight.Dims()
		return in, out, nil
	}
	return 0, 0, fmt.Errorf("layer %T is neither *nn.Dense nor *nn.QuantizedLinear", l)
}

// Projection returns the field of block holding the projection mlx_lm
// names key ("self_attn.q_proj", ..., "mlp.down_proj"), or nil.
func Projection(block *minicpm5.Block, key string) *nn.Linear {
	switch key {
	case "self_attn.q_proj":
		return &block.SelfAttn.QProj
	case "self_attn.k_proj":
		return &block.SelfAttn.KProj
	case "self_attn.v_proj":
		return &block.SelfAttn.VProj
	case "self_attn.o_proj":
		return &block.SelfAttn.OProj
	case "mlp.gate_proj":
		return &block.MLP.GateProj
	case "mlp.up_proj":
		return &block.MLP.UpProj
	case "mlp.down_proj":
		return &block.MLP.DownProj
	}
	return nil
}
