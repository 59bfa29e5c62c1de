package nn_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

// hostDecode hides the CPU backend's TurboAttention, so a TurboKVCache on
// it takes the host path: decode the whole window, upload it, SDPA.
type hostDecode struct{ backend.Backend }

// turboMatrix is the oracle's scheme matrix (conformance/oracle/turboquant.py).
var turboMatrix = []turboquant.Scheme{{KBits: 8, VBits: 3}, {KBits: 4, VBits: 3}, {KBits: 4, VBits: 2}, {KBits: 8, VBits: 4}, {KBits: 2, VBits: 5}, {KBits: 5, VBits: 8}}

// TestTurboAttendInPlace: on the CPU backend, Attend reads the stored codes
// in place (backend.TurboAttention) and gives, bit for bit, what the host
// path gives (the window decoded, uploaded in the activation dtype, SDPA,
// and for the deferred read the output un-rotated): every scheme of the
// oracle's matrix, head_dim 64 and 128, float32 and bfloat16 activations,
// the eager and the deferred read, GQA with a batch of 2 and plain heads;
// through the bf16-first phase and its conversion, a causal prefill, decode
// steps, growth past the 256-slot capacity, a Trim that leaves stale codes
// past the offset, a Bool array mask with holes and an additive one.
func TestTurboAttendInPlace(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := backend.Backend(b).(backend.TurboAttention); !ok {
		t.Fatal("the CPU backend does not implement backend.TurboAttention")
	}
	host := hostDecode{b}
	type heads struct{ B, H, Hk int }
	for _, sc := range turboMatrix {
		for _, D := range []int{64, 128} {
			for _, dt := range []tensor.DType{tensor.F32, tensor.BF16} {
				for _, deferred := range []bool{true, false} {
					for _, hd := range []heads{{2, 6, 2}, {1, 2, 2}} {
						name := fmt.Sprintf("%s/d%d/%v/deferred=%v/b%dh%dhk%d", sc, D, dt, deferred, hd.B, hd.H, hd.Hk)
						t.Run(name, func(t *testing.T) {
							r := rand.New(rand.NewPCG(uint64(D*sc.KBits), uint64(sc.VBits)))
							in, err := nn.NewTurboKVCache(b, sc, deferred, false)
							if err != nil {
								t.Fatal(err)
							}
							defer in.Release()
							ref, err := nn.NewTurboKVCache(host, sc, deferred, false)
							if err != nil {
								t.Fatal(err)
							}
							defer ref.Release()
							rnd := func(heads, L int) backend.Array {
								return b.AsType(randArray(b, r, hd.B, heads, L, D), dt)
							}
							step := func(what string, L int, mask func(S int) backend.Mask) {
								t.Helper()
								q, k, v := rnd(hd.H, L), rnd(hd.Hk, L), rnd(hd.Hk, L)
								m := mask(in.Offset() + L)
								got := in.Attend(q, k, v, 0.125, m)
								want := ref.Attend(q, k, v, 0.125, m)
								if got.DType() != want.DType() || !equalHost(t, b, got, want) {
									t.Fatalf("%s (offset %d): the in-place read differs from the decoded window's", what, in.Offset())
								}
								if in.Offset() != ref.Offset() {
									t.Fatalf("%s: offsets %d and %d", what, in.Offset(), ref.Offset())
								}
							}
							causal := func(int) backend.Mask { return backend.CausalMask{} }
							none := func(int) backend.Mask { return backend.NoMask{} }
							step("bf16-first prefill", 37, causal)
							in.State() // the conversion, as models/minicpm5's Forward asks for it
							ref.State()
							if !in.Converted() || !ref.Converted() {
								t.Fatal("State did not convert the window")
							}
							step("decode", 1, none)
							step("prefill", 5, causal)
							step("past the capacity", 230, causal)
							if in.Trim(4) != 4 || ref.Trim(4) != 4 {
								t.Fatal("Trim(4)")
							}
							step("decode after Trim", 1, none)
							const L = 3
							step("Bool array mask", L, func(S int) backend.Mask {
								v := make([]int32, hd.B*L*S)
								for i := range v {
									if r.IntN(3) > 0 {
										v[i] = 1
									}
								}
								return backend.ArrayMask{A: b.FromHost(tensor.FromInt32(tensor.Shape{hd.B, 1, L, S}, v).Convert(tensor.Bool))}
							})
							step("additive array mask", 1, func(S int) backend.Mask {
								v := make([]float32, hd.B*S)
								for i := range v {
									v[i] = -3 * float32(r.IntN(4))
								}
								return backend.ArrayMask{A: b.FromHost(tensor.FromFloat32(tensor.Shape{hd.B, 1, 1, S}, v).Convert(dt))}
							})
						})
					}
				}
			}
		}
	}
}
