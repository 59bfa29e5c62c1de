package debug

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// The plain float64 evaluation of each op, from the checkpoint's stored
// weights: written from the ops' mathematical definitions (mlx_lm's
// semantics), independent of every backend, so a replayed op's error is
// measured against the exact function of its (already rounded) inputs.

// dequant64 returns the [rows, cols] float64 matrix of a weight: a float
// weight converted, or an affine-quantized one decoded (each row of w is a
// little-endian, LSB-first bitstream of bits-wide codes; w = scale·q + bias
// per group, exactly).
func dequant64(w, scales, biases *tensor.Dense, quantized bool, p checkpoint.QuantParams) (m []float64, rows, cols int, err error) {
	if !quantized {
		if len(w.Shape) != 2 {
			return nil, 0, 0, fmt.Errorf("weight shape %v, want 2-D", w.Shape)
		}
		return w.ToFloat64(), w.Shape[0], w.Shape[1], nil
	}
	if len(w.Shape) != 2 || w.DType != tensor.U32 || p.Bits <= 0 || p.GroupSize <= 0 {
		return nil, 0, 0, fmt.Errorf("quantized weight %v %v bits %d group %d: want 2-D U32 codes", w.DType, w.Shape, p.Bits, p.GroupSize)
	}
	rows, cols = w.Shape[0], w.Shape[1]*32/p.Bits
	words := w.Uint32s()
	sc, bi := scales.ToFloat64(), biases.ToFloat64()
	groups := cols / p.GroupSize
	if len(sc) != rows*groups || len(bi) != rows*groups {
		return nil, 0, 0, fmt.Errorf("scales/biases have %d/%d entries, want %d×%d", len(sc), len(bi), rows, groups)
	}
	mask := uint64(1)<<p.Bits - 1
	m = make([]float64, rows*cols)
	per := w.Shape[1]
	for r := 0; r < rows; r++ {
		row := words[r*per : (r+1)*per]
		for j := 0; j < cols; j++ {
			off := j * p.Bits
			word, shift := off/32, off%32
			v := uint64(row[word]) >> shift
			if shift+p.Bits > 32 {
				v |= uint64(row[word+1]) << (32 - shift)
			}
			g := r*groups + j/p.GroupSize
			m[r*cols+j] = sc[g]*float64(v&mask) + bi[g]
		}
	}
	return m, rows, cols, nil
}

// linear64 is x [n, in] @ Wᵀ (+ bias), W [out, in].
func linear64(x []float64, l *checkpoint.Linear) ([]float64, error) {
	w, out, in, err := dequant64(l.Weight, l.Scales, l.Biases, l.Quantized, l.Params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", l.Path, err)
	}
	if len(x)%in != 0 {
		return nil, fmt.Errorf("%s: input of %d values is not rows of %d", l.Path, len(x), in)
	}
	var bias []float64
	if l.Bias != nil {
		bias = l.Bias.ToFloat64()
	}
	return matT64(x, w, len(x)/in, in, out, bias), nil
}

// matT64 is x [n, k] @ wᵀ (w [m, k]) + bias.
func matT64(x, w []float64, n, k, m int, bias []float64) []float64 {
	y := make([]float64, n*m)
	for r := 0; r < n; r++ {
		xr := x[r*k : (r+1)*k]
		for o := 0; o < m; o++ {
			wr := w[o*k : (o+1)*k]
			var s float64
			for i, xv := range xr {
				s += xv * wr[i]
			}
			if bias != nil {
				s += bias[o]
			}
			y[r*m+o] = s
		}
	}
	return y
}

// embed64 returns the rows of the embedding table at ids.
func embed64(ids []int32, e *checkpoint.Embedding) ([]float64, error) {
	w, rows, cols, err := dequant64(e.Weight, e.Scales, e.Biases, e.Quantized, e.Params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", e.Path, err)
	}
	out := make([]float64, 0, len(ids)*cols)
	for i, id := range ids {
		if int(id) >= rows || id < 0 {
			return nil, fmt.Errorf("%s: id %d (position %d) outside the table's %d rows", e.Path, id, i, rows)
		}
		out = append(out, w[int(id)*cols:(int(id)+1)*cols]...)
	}
	return out, nil
}

// head64 is the output head: lm_head, or the embedding table as a linear
// layer when tied.
func head64(x []float64, ck *checkpoint.Checkpoint) ([]float64, error) {
	if ck.Head != nil {
		return linear64(x, ck.Head)
	}
	w, rows, cols, err := dequant64(ck.Embed.Weight, ck.Embed.Scales, ck.Embed.Biases, ck.Embed.Quantized, ck.Embed.Params)
	if err != nil {
		return nil, err
	}
	return matT64(x, w, len(x)/cols, cols, rows, nil), nil
}

// rms64 is weight ⊙ x / sqrt(mean(x²) + eps) over rows of len(weight).
func rms64(x []float64, weight *tensor.Dense, eps float32) []float64 {
	w := weight.ToFloat64()
	n := len(w)
	y := make([]float64, len(x))
	for r := 0; r < len(x)/n; r++ {
		xr := x[r*n : (r+1)*n]
		var ss float64
		for _, v := range xr {
			ss += v * v
		}
		inv := 1 / math.Sqrt(ss/float64(n)+float64(eps))
		for i, v := range xr {
			y[r*n+i] = w[i] * v * inv
		}
	}
	return y
}

// rope64 rotates x [B, H, L, D] for positions 0..L-1 as mx.fast.rope does
// with r's parameters (after r.InputScale on the rotated features).
func rope64(x []float64, shape tensor.Shape, r *nn.RoPE) []float64 {
	L, D := shape[2], shape[3]
	p := r.Params
	dims, half := p.Dims, p.Dims/2
	base := float64(p.Base)
	if r.Type == "dynamic" {
		base = float64(float32(r.DynamicBase(L, 0)))
	}
	inv := make([]float64, half)
	for i := range inv {
		if r.Freqs != nil {
			inv[i] = 1 / float64(r.Freqs[i])
		} else {
			inv[i] = math.Pow(base, -2*float64(i)/float64(dims))
		}
	}
	y := append([]float64(nil), x...)
	for row := 0; row < len(x)/D; row++ {
		pos := float64(p.Scale) * float64(row%L)
		v := y[row*D : (row+1)*D]
		for i := 0; i < dims; i++ {
			v[i] *= r.InputScale
		}
		for i := 0; i < half; i++ {
			a, b := i, i+half
			if p.Traditional {
				a, b = 2*i, 2*i+1
			}
			s, c := math.Sincos(pos * inv[i])
			x1, x2 := v[a], v[b]
			v[a], v[b] = x1*c-x2*s, x1*s+x2*c
		}
	}
	return y
}

// sdpa64 is softmax(scale·q kᵀ + causal mask) v with q [B, H, L, D], k and
// v [B, Hk, S, D]; query head h reads KV head h/(H/Hk). causal lets query i
// attend to key j <= i + S - L.
func sdpa64(q, k, v []float64, B, H, Hk, L, S, D int, scale float64, causal bool) []float64 {
	out := make([]float64, B*H*L*D)
	w := make([]float64, S)
	for b := 0; b < B; b++ {
		for h := 0; h < H; h++ {
			kh := h / (H / Hk)
			for i := 0; i < L; i++ {
				qi := q[((b*H+h)*L+i)*D:][:D]
				m := math.Inf(-1)
				for j := 0; j < S; j++ {
					if causal && j > i+S-L {
						w[j] = math.Inf(-1)
						continue
					}
					kj := k[((b*Hk+kh)*S+j)*D:][:D]
					var s float64
					for d := range qi {
						s += qi[d] * kj[d]
					}
					w[j] = s * scale
					m = math.Max(m, w[j])
				}
				var z float64
				for j := range w {
					w[j] = math.Exp(w[j] - m)
					z += w[j]
				}
				o := out[((b*H+h)*L+i)*D:][:D]
				for j := 0; j < S; j++ {
					if w[j] == 0 {
						continue
					}
					vj := v[((b*Hk+kh)*S+j)*D:][:D]
					for d := range o {
						o[d] += w[j] / z * vj[d]
					}
				}
			}
		}
	}
	return out
}

// swiglu64 is silu(gate)·up = gate/(1+exp(-gate))·up.
func swiglu64(gate, up []float64) []float64 {
	y := make([]float64, len(gate))
	for i, g := range gate {
		y[i] = g / (1 + math.Exp(-g)) * up[i]
	}
	return y
}

// add64 is x + y.
func add64(x, y []float64) []float64 {
	z := make([]float64, len(x))
	for i := range x {
		z[i] = x[i] + y[i]
	}
	return z
}

// heads moves [B, L, H, hd] to [B, H, L, hd] (toHeads) or back.
func heads(x []float64, B, L, H, hd int, toHeads bool) []float64 {
	y := make([]float64, len(x))
	for b := 0; b < B; b++ {
		for l := 0; l < L; l++ {
			for h := 0; h < H; h++ {
				src := ((b*L+l)*H + h) * hd // [B, L, H, hd]
				dst := ((b*H+h)*L + l) * hd // [B, H, L, hd]
				if !toHeads {
					src, dst = dst, src
				}
				copy(y[dst:dst+hd], x[src:src+hd])
			}
		}
	}
	return y
}
