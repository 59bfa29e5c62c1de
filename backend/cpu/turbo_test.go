package cpu

import (
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestTurboAttentionBadInput: parts that do not fit the scheme and head_dim,
// bits not offered, an unsupported head_dim, heads that do not group and a
// decoded dtype that is not float panic with an OpError naming what is
// wrong; a well-formed call does not. (The results are held to the
// host-decoded path by nn's TestTurboAttendInPlace.)
func TestTurboAttentionBadInput(t *testing.T) {
	b := open(t)
	parts := func(d int, k0 tensor.DType) [5]backend.Array {
		return [5]backend.Array{
			b.Zeros(tensor.Shape{1, 2, 5, d}, k0), b.Zeros(tensor.Shape{1, 2, 5, d / 32}, tensor.F16), b.Zeros(tensor.Shape{1, 2, 5, d / 32}, tensor.F16),
			b.Zeros(tensor.Shape{1, 2, 5, d * 3 / 8}, tensor.U8), b.Zeros(tensor.Shape{1, 2, 5, d / 32}, tensor.F16),
		}
	}
	good := func() backend.TurboKV {
		return backend.TurboKV{Parts: parts(64, tensor.I8), KBits: 8, VBits: 3, DType: tensor.BF16, Rotated: true}
	}
	q := func(h, d int) backend.Array { return b.Zeros(tensor.Shape{1, h, 1, d}, tensor.BF16) }
	o := b.TurboScaledDotProductAttention(q(4, 64), good(), 0.125, backend.NoMask{})
	if !o.Shape().Equal(tensor.Shape{1, 4, 1, 64}) || o.DType() != tensor.BF16 {
		t.Fatalf("well-formed call: %v %v", o.DType(), o.Shape())
	}
	for _, tc := range []struct {
		name string
		q    backend.Array
		kv   func() backend.TurboKV
		want string
	}{
		{"key bits", q(4, 64), func() backend.TurboKV { kv := good(); kv.KBits = 3; return kv }, "key bits 3"},
		{"value bits", q(4, 64), func() backend.TurboKV { kv := good(); kv.VBits = 6; return kv }, "value bits 6"},
		{"head_dim", q(4, 96), func() backend.TurboKV { kv := good(); kv.Parts = parts(96, tensor.I8); return kv }, "head_dim 96"},
		{"q head_dim", q(4, 128), good, "part 0 is I8 [1 2 5 64], want I8 [1 2 5 128]"},
		{"key codes dtype", q(4, 64), func() backend.TurboKV { kv := good(); kv.Parts = parts(64, tensor.U8); return kv }, "part 0 is U8"},
		{"value codes width", q(4, 64), func() backend.TurboKV { kv := good(); kv.VBits = 4; return kv }, "part 3 is U8 [1 2 5 24], want U8 [1 2 5 32]"},
		{"heads", q(3, 64), good, "3 query heads is not a multiple of 2 KV heads"},
		{"dtype", q(4, 64), func() backend.TurboKV { kv := good(); kv.DType = tensor.I32; return kv }, "not a float dtype"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			oe := opPanic(t, func() { b.TurboScaledDotProductAttention(tc.q, tc.kv(), 0.125, backend.NoMask{}) })
			if oe.Op != "TurboScaledDotProductAttention" || !strings.Contains(oe.Error(), tc.want) {
				t.Errorf("got %v, want a TurboScaledDotProductAttention error containing %q", oe, tc.want)
			}
		})
	}
}
