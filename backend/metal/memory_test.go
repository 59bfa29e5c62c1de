//go:build mlx

package metal

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// randBF16 is a seeded bf16 tensor with values in [-1, 1).
func randBF16(rng *rand.Rand, shape ...int) *tensor.Dense {
	v := make([]float32, tensor.Shape(shape).Size())
	for i := range v {
		v[i] = rng.Float32()*2 - 1
	}
	return tensor.FromFloat32(shape, v).Convert(tensor.BF16)
}

// decoder is a one-layer decode step built from the ops mlx_lm's llama
// uses, with a KV cache preallocated for all steps and written in place with
// SliceUpdate, as mlx_lm's KVCache does.
type decoder struct {
	b          *Backend
	norm       backend.Array
	wq, wo, wg backend.QuantizedArray
	k, v       backend.Array // [1, 2, steps, 32]
	x          backend.Array // [1, 1, 128] the current hidden state
}

func newDecoder(b *Backend, steps int) (*decoder, error) {
	rng := rand.New(rand.NewSource(7))
	d := &decoder{b: b}
	d.norm = b.FromHost(randBF16(rng, 128))
	quant := func(rows, cols int) backend.QuantizedArray {
		w := b.FromHost(randBF16(rng, rows, cols))
		q := b.Quantize(w, 64, 4)
		b.Release(w)
		return q
	}
	d.wq, d.wo, d.wg = quant(3*64, 128), quant(128, 64), quant(2*64, 128)
	d.k = b.Zeros(tensor.Shape{1, 2, steps, 32}, tensor.BF16)
	d.v = b.Zeros(tensor.Shape{1, 2, steps, 32}, tensor.BF16)
	d.x = b.FromHost(randBF16(rng, 1, 1, 128))
	return d, b.Eval(d.norm, d.k, d.v, d.x, d.wq.W, d.wo.W, d.wg.W)
}

// step runs decode step i and returns the next token (not yet evaluated);
// the new hidden state and cache replace the old ones, which are released.
func (d *decoder) step(i int) backend.Array {
	b := d.b
	s := b.Scope()
	defer s.Close()
	h := b.RMSNorm(d.x, d.norm, 1e-5)
	qkv := b.QuantizedMatmul(h, d.wq, true) // [1,1,192]
	split := func(j int) backend.Array {
		part := b.Slice(qkv, []int{0, 0, 64 * j}, []int{1, 1, 64 * (j + 1)})
		return b.Transpose(b.Reshape(part, 1, 1, 2, 32), 0, 2, 1, 3) // [1,2,1,32]
	}
	rope := backend.RoPE{Dims: 32, Base: 10000, Scale: 1}
	q := b.RoPE(split(0), rope, backend.Offset{Scalar: i})
	k := b.RoPE(split(1), rope, backend.Offset{Scalar: i})
	newK := b.SliceUpdate(d.k, k, []int{0, 0, i, 0})
	newV := b.SliceUpdate(d.v, split(2), []int{0, 0, i, 0})
	keys := b.Slice(newK, []int{0, 0, 0, 0}, []int{1, 2, i + 1, 32})
	vals := b.Slice(newV, []int{0, 0, 0, 0}, []int{1, 2, i + 1, 32})
	att := b.ScaledDotProductAttention(q, keys, vals, 0.17677669, backend.CausalMask{})
	o := b.QuantizedMatmul(b.Reshape(b.Transpose(att, 0, 2, 1, 3), 1, 1, 64), d.wo, true)
	gu := b.QuantizedMatmul(o, d.wg, true) // [1,1,128]
	gate := b.Slice(gu, []int{0, 0, 0}, []int{1, 1, 64})
	up := b.Slice(gu, []int{0, 0, 64}, []int{1, 1, 128})
	sw := b.SwiGLU(gate, up) // [1,1,64]
	x := b.Binary(backend.Add, d.x, b.Binary(backend.Multiply, o, b.Concatenate(2, sw, sw)))
	tok := b.Argmax(b.Reshape(x, 128), 0, false)
	s.Keep(newK, newV, x, tok)
	b.Release(d.k, d.v, d.x)
	d.k, d.v, d.x = newK, newV, x
	return tok
}

// TestDecodeMemoryFlat runs 1,000 decode-like steps pipelined as mlx_lm's
// generate_step is (AsyncEval of step i+1 before reading token i) and
// requires the live arrays, their bytes and MLX's active memory to be the
// same after the last step as after the warm-up.
func TestDecodeMemoryFlat(t *testing.T) {
	const steps, warm = 1000, 20
	b := open(t)
	var base backend.Stats
	var baseMem MemoryStats
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		d, err := newDecoder(b, steps+1)
		if err != nil {
			return err
		}
		tok := d.step(0)
		if err := b.AsyncEval(tok, d.k, d.v, d.x); err != nil {
			return err
		}
		// Measured at i == warm and i == steps, both with step i in flight.
		var end backend.Stats
		var endMem MemoryStats
		for i := 1; i <= steps+1; i++ {
			var next backend.Array
			if i <= steps {
				next = d.step(i)
				if err := b.AsyncEval(next, d.k, d.v, d.x); err != nil {
					return err
				}
			}
			host, err := b.ToHost(tok) // waits for token i-1 only
			if err != nil {
				return err
			}
			if id := host.Uint32s()[0]; id >= 128 {
				return fmt.Errorf("got token %d, want < 128 (step %d)", id, i)
			}
			b.Release(tok)
			tok = next
			if i == warm || i == steps {
				if err := b.Eval(d.k, d.v, d.x); err != nil {
					return err
				}
				b.ClearCache()
				if i == warm {
					base, baseMem = b.Stats(), b.Memory()
				} else {
					end, endMem = b.Stats(), b.Memory()
				}
			}
		}
		t.Logf("after %d steps: %d live arrays, %d live bytes, MLX active %d B (cache %d B, peak %d B); after %d: %d arrays, %d bytes, active %d B",
			steps, end.LiveArrays, end.LiveBytes, endMem.Active, endMem.Cache, endMem.Peak, warm, base.LiveArrays, base.LiveBytes, baseMem.Active)
		if end.LiveArrays != base.LiveArrays || end.LiveBytes != base.LiveBytes {
			t.Errorf("got %d live arrays / %d bytes after %d steps, want %d / %d as after %d", end.LiveArrays, end.LiveBytes, steps, base.LiveArrays, base.LiveBytes, warm)
		}
		if endMem.Active > baseMem.Active {
			t.Errorf("got MLX active memory %d B after %d steps, want at most %d B as after %d", endMem.Active, steps, baseMem.Active, warm)
		}
		if end.LeakedByGC != 0 {
			t.Errorf("got %d arrays found by the GC safety net, want 0", end.LeakedByGC)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
