package nn

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/tensor"
)

// RoPE is rotary position embedding as mlx_lm's initialize_rope builds it:
// mx.fast.rope with a base and position scale (default, linear, mrope), with
// precomputed frequencies (llama3, yarn, longrope, proportional), or with a
// base recomputed per call (dynamic), after an optional multiplication of the
// rotated features by a constant (yarn's mscale, longrope's scale).
type RoPE struct {
	b backend.Backend
	// Type is the rope type it was built for ("default" without scaling).
	Type string
	// Params are passed to Backend.RoPE (Freqs holds Freqs as an array).
	Params backend.RoPE
	// Freqs are the float32 frequencies (the reciprocals of inv_freq), nil
	// when the base is used.
	Freqs []float32
	// InputScale multiplies x[..., :Dims] before rotating; 1 means no
	// multiplication.
	InputScale float64
	// Dynamic NTK scaling (Type "dynamic"): the base is recomputed per call.
	dynamic               bool
	base, factor          float64
	maxPositionEmbeddings int
}

// NewRoPE builds the rotary embedding of mlx_lm's initialize_rope(dims, base,
// traditional, scaling, max_position_embeddings). scaling may be nil
// (default). An unknown type or a parameter it cannot use is an error naming
// the rope_scaling field. The frequencies are computed in float32 with the
// operations of rope_utils.py, in its order.
func NewRoPE(b backend.Backend, dims int, base float64, traditional bool, scaling *checkpoint.RopeScaling, maxPositionEmbeddings int) (*RoPE, error) {
	r, err := buildRoPE(dims, base, traditional, scaling, maxPositionEmbeddings)
	if err != nil {
		return nil, err
	}
	r.b = b
	if r.Freqs != nil {
		r.Params.Freqs = b.FromHost(tensor.FromFloat32(tensor.Shape{len(r.Freqs)}, r.Freqs))
	}
	return r, nil
}

// buildRoPE computes everything but the backend array.
func buildRoPE(dims int, base float64, traditional bool, scaling *checkpoint.RopeScaling, maxPositionEmbeddings int) (*RoPE, error) {
	if dims <= 0 || dims%2 != 0 {
		return nil, fmt.Errorf("rope: head_dim %d, want a positive even number", dims)
	}
	typ := "default"
	if scaling != nil {
		typ = scaling.Type
	}
	r := &RoPE{Type: typ, InputScale: 1,
		Params: backend.RoPE{Dims: dims, Traditional: traditional, Base: float32(base), Scale: 1}}
	s := scaling
	switch typ {
	case "default", "mrope":
	case "linear":
		if !(s.Factor > 0) {
			return nil, fmt.Errorf("rope_scaling.factor: got %v, want > 0 (rope type linear)", s.Factor)
		}
		r.Params.Scale = float32(1 / s.Factor)
	case "dynamic":
		if maxPositionEmbeddings <= 0 {
			return nil, fmt.Errorf("max_position_embeddings: got %d, want > 0 (rope_scaling type dynamic)", maxPositionEmbeddings)
		}
		r.dynamic, r.base, r.factor, r.maxPositionEmbeddings = true, base, s.Factor, maxPositionEmbeddings
	case "llama3":
		r.Freqs = llama3Freqs(dims, base, s)
	case "yarn", "deepseek_yarn", "telechat3-yarn":
		r.Freqs, r.InputScale = yarnFreqs(dims, base, s)
	case "longrope":
		if len(s.LongFactor) != dims/2 {
			return nil, fmt.Errorf("rope_scaling.long_factor: got %d values, want head_dim/2 = %d", len(s.LongFactor), dims/2)
		}
		if maxPositionEmbeddings <= 0 || s.OriginalMaxPositionEmbeddings <= 0 {
			return nil, fmt.Errorf("max_position_embeddings %d and rope_scaling.original_max_position_embeddings %d: want both > 0 (rope type longrope)", maxPositionEmbeddings, s.OriginalMaxPositionEmbeddings)
		}
		r.Freqs, r.InputScale = longropeFreqs(dims, base, s, maxPositionEmbeddings)
		r.Params.Traditional = false // SuScaledRoPE ignores rope_traditional
	case "proportional":
		rotated := int(float64(dims) * s.PartialRotaryFactor)
		if rotated < 0 || rotated > dims {
			return nil, fmt.Errorf("rope_scaling.partial_rotary_factor: %v gives %d rotated dims, want 0..head_dim %d", s.PartialRotaryFactor, rotated, dims)
		}
		r.Freqs = proportionalFreqs(dims, rotated, base, s.Factor)
	default:
		return nil, fmt.Errorf("rope_scaling.type: unsupported RoPE type %q (mlx_lm's initialize_rope raises \"Unsupported RoPE type\")", typ)
	}
	return r, nil
}

// Forward rotates x [..., L, D] for positions offset, offset+1, ...
func (r *RoPE) Forward(x backend.Array, offset int) backend.Array {
	return r.ForwardOffset(x, backend.Offset{Scalar: offset})
}

// ForwardOffset is Forward with a backend.Offset: a scalar, or one position
// per batch row (Rows, a left-padded batch). Dynamic NTK scaling needs one
// offset for the whole batch (its base depends on it; mlx_lm's
// DynamicNTKScalingRoPE fails on an array offset too): with Rows it panics
// with a *backend.OpError.
func (r *RoPE) ForwardOffset(x backend.Array, offset backend.Offset) backend.Array {
	if r.dynamic && offset.Rows != nil {
		panic(backend.Errorf("RoPE", []backend.Array{x, offset.Rows}, "rope type dynamic needs a scalar offset, got one offset per row"))
	}
	if r.InputScale != 1 {
		x = r.scaleInput(x)
	}
	p := r.Params
	if r.dynamic {
		p.Base = float32(r.DynamicBase(x.Shape()[len(x.Shape())-2], offset.Scalar))
	}
	return r.b.RoPE(x, p, offset)
}

// DynamicBase is DynamicNTKScalingRoPE's base for L new tokens at offset:
// base·(factor·seq/max − (factor−1))^(dims/(dims−2)), seq = max(L+offset, max),
// in float64 as Python computes it.
func (r *RoPE) DynamicBase(L, offset int) float64 {
	seq := max(L+offset, r.maxPositionEmbeddings)
	d := float64(r.Params.Dims)
	return r.base * math.Pow(r.factor*float64(seq)/float64(r.maxPositionEmbeddings)-(r.factor-1), d/(d-2))
}

// scaleInput is x.at[..., :dims].multiply(scale): the Python float scale
// becomes a float32 scalar, then takes x's dtype.
func (r *RoPE) scaleInput(x backend.Array) backend.Array {
	s := r.b.Full(tensor.Shape{}, float64(float32(r.InputScale)), x.DType())
	shape := x.Shape()
	D := shape[len(shape)-1]
	if r.Params.Dims == D {
		return r.b.Binary(backend.Multiply, x, s)
	}
	start, mid := make([]int, len(shape)), append([]int(nil), shape...)
	mid[len(mid)-1] = r.Params.Dims
	head := r.b.Binary(backend.Multiply, r.b.Slice(x, start, mid), s)
	start[len(start)-1] = r.Params.Dims
	return r.b.Concatenate(-1, head, r.b.Slice(x, start, shape))
}

// Release frees the frequency array.
func (r *RoPE) Release() {
	if r.Params.Freqs != nil {
		r.b.Release(r.Params.Freqs)
		r.Params.Freqs = nil
	}
}

// powFreqs returns base ** (arange(0, dims, 2) / dims) in float32: the
// exponent 2i/dims rounded to float32, the power rounded once to float32.
func powFreqs(dims, n int, base float64) []float32 {
	f := make([]float32, n)
	b := float64(float32(base))
	for i := range f {
		e := float32(2*i) / float32(dims)
		f[i] = float32(math.Pow(b, float64(e)))
	}
	return f
}

// llama3Freqs is Llama3RoPE's _freqs. Every step is one float32 op, with
// Python scalars cast to float32 first, as MLX evaluates it.
func llama3Freqs(dims int, base float64, s *checkpoint.RopeScaling) []float32 {
	old := float64(s.OriginalMaxPositionEmbeddings)
	lowWavelen := float32(old / s.LowFreqFactor)
	highWavelen := float32(old / s.HighFreqFactor)
	factor := float32(s.Factor)
	twoPi := float32(2 * math.Pi)
	oldF := float32(old)
	lowF := float32(s.LowFreqFactor)
	span := float32(s.HighFreqFactor - s.LowFreqFactor)

	freqs := powFreqs(dims, dims/2, base)
	for i, f := range freqs {
		w := float32(twoPi * f)
		if w > lowWavelen {
			f = float32(f * factor)
		}
		if w > highWavelen && w < lowWavelen {
			smooth := float32(float32(float32(oldF/w)-lowF) / span)
			f = float32(f / float32(float32(float32(1-smooth)/factor)+smooth))
		}
		freqs[i] = f
	}
	return freqs
}

// yarnFreqs is YarnRoPE's _freqs and mscale.
func yarnFreqs(dims int, base float64, s *checkpoint.RopeScaling) ([]float32, float64) {
	d := float64(dims)
	orig := float64(s.OriginalMaxPositionEmbeddings)
	correction := func(rotations float64) float64 {
		return d * math.Log(orig/(rotations*2*math.Pi)) / (2 * math.Log(base))
	}
	low := max(math.Floor(correction(s.BetaFast)), 0)
	high := min(math.Ceil(correction(s.BetaSlow)), d-1)
	if low == high {
		high += 0.001
	}
	mscale := func(scale, m float64) float64 {
		if scale <= 1 {
			return 1
		}
		return 0.1*m*math.Log(scale) + 1
	}
	inputScale := mscale(s.Factor, s.Mscale) / mscale(s.Factor, s.MscaleAllDim)

	factor := float32(s.Factor)
	lowF, span := float32(low), float32(high-low)
	freqs := powFreqs(dims, dims/2, base)
	for j, fe := range freqs {
		fi := float32(factor * fe)
		ramp := float32(float32(float32(j)-lowF) / span)
		ramp = min(max(ramp, 0), 1)
		mask := float32(1 - ramp)
		num := float32(fi * fe)
		den := float32(float32(fi*mask) + float32(fe*float32(1-mask)))
		freqs[j] = float32(num / den)
	}
	return freqs, inputScale
}

// longropeFreqs is SuScaledRoPE's _freqs (long_factor only, as mlx_lm) and
// input scale.
func longropeFreqs(dims int, base float64, s *checkpoint.RopeScaling, maxPos int) ([]float32, float64) {
	freqs := powFreqs(dims, dims/2, base)
	for i, f := range freqs {
		freqs[i] = float32(float32(s.LongFactor[i]) * f)
	}
	orig := float64(s.OriginalMaxPositionEmbeddings)
	factor := float64(maxPos) / orig
	scale := 1.0
	if factor > 1 {
		scale = math.Sqrt(1 + math.Log(factor)/math.Log(orig))
	}
	return freqs, scale
}

// proportionalFreqs is ProportionalRoPE's _freqs: factor·base^(2j/dims) for
// the rotated pairs, +Inf (no rotation) for the rest.
func proportionalFreqs(dims, rotated int, base, factor float64) []float32 {
	freqs := make([]float32, 0, dims/2)
	b := float64(float32(base))
	for i := 0; 2*i < rotated; i++ {
		e := float32(2*i) / float32(dims)
		freqs = append(freqs, float32(float32(factor)*float32(math.Pow(b, float64(e)))))
	}
	for len(freqs) < dims/2 {
		freqs = append(freqs, float32(math.Inf(1)))
	}
	return freqs
}
